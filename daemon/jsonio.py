"""JSON for the resume path: parse state files and render jq-identical bytes.

Why not orjson or `json` here: `storyd resume` is a short-lived process and its
import cost is its latency. orjson 3.13 imports uuid, dataclasses and zoneinfo at
start-up (about 25 ms measured) and `json` imports `re`; the C scanner in `_json`
is the same parser `json.loads` uses, without those imports. The daemon uses this
same module for state files, so the socket and the fallback parse identically; it
uses orjson only for its own protocol lines.

`dumps` reproduces `jq -c`: compact separators, non-ASCII written raw, control
characters escaped (\\b \\f \\n \\r \\t or \\u00XX) and DEL as \\u007f.
"""

from __future__ import annotations

import _json
import math

__all__ = ["JSONError", "dumps", "kind", "loads"]


class JSONError(ValueError):
    """Invalid JSON, with a 1-based line and column."""

    def __init__(self, reason: str, line: int, column: int) -> None:
        super().__init__(f"{reason} at line {line} column {column}")
        self.reason = reason
        self.line = line
        self.column = column


_KINDS = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}


def kind(value: object) -> str:
    """How an error message names a parsed JSON value's type ("an array", "null", ...)."""
    if value is None:
        return "null"
    return _KINDS.get(type(value), "a number")


def _reject_constant(name: str) -> object:
    msg = f"{name} is not valid JSON"
    raise ValueError(msg)


class _Context:
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_reject_constant)


# typeshed asks for a make_scanner here; the C code only reads these six attributes.
_scan = _json.make_scanner(_Context())  # type: ignore[arg-type]
_WHITESPACE = " \t\n\r"


def _position(text: str, index: int) -> tuple[int, int]:
    line = text.count("\n", 0, index) + 1
    column = index - (text.rfind("\n", 0, index) + 1) + 1
    return line, column


def _fail(text: str, index: int, reason: str) -> JSONError:
    line, column = _position(text, index)
    return JSONError(reason, line, column)


def _diagnose(text: str, start: int) -> JSONError:
    """Explain a parse failure (slow path: imports `json` for its error positions)."""
    import json

    try:
        json.JSONDecoder(parse_constant=_reject_constant).raw_decode(text, start)
    except json.JSONDecodeError as exc:
        return _fail(text, exc.pos, exc.msg.lower().removesuffix(" at"))
    except ValueError as exc:  # NaN, Infinity
        return _fail(text, start, str(exc))
    return _fail(text, start, "invalid JSON")


def loads(data: bytes) -> object:
    """Parse one JSON document from UTF-8 bytes (a UTF-8 BOM is ignored)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        prefix = data[: exc.start].decode("utf-8", "replace")
        raise _fail(prefix, len(prefix), "invalid UTF-8") from None
    start = 1 if text.startswith("\ufeff") else 0
    length = len(text)
    while start < length and text[start] in _WHITESPACE:
        start += 1
    try:
        value, end = _scan(text, start)
    except StopIteration as stop:
        reason = "empty document" if start >= length else "expecting a value"
        raise _fail(text, stop.value or start, reason) from None
    except RecursionError:
        raise _fail(text, start, "nesting too deep") from None
    except (ValueError, SystemError):
        raise _diagnose(text, start) from None
    while end < length and text[end] in _WHITESPACE:
        end += 1
    if end != length:
        raise _fail(text, end, "extra data after the document")
    return value


_ESCAPES = {i: f"\\u{i:04x}" for i in range(0x20)}
_ESCAPES.update({0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"})
_ESCAPES.update({0x22: '\\"', 0x5C: "\\\\", 0x7F: "\\u007f"})


def _string(value: str) -> str:
    return '"' + value.translate(_ESCAPES) + '"'


def _number(value: float) -> str:
    """A float as jq prints it: integral values without `.0`, others shortest round-trip."""
    if not math.isfinite(value):
        return "null"
    if value.is_integer() and abs(value) < 1e17:
        return str(int(value))
    return repr(value)


def _render(value: object) -> str:
    if isinstance(value, str):
        return _string(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, dict):
        return "{" + ",".join(_string(k) + ":" + _render(v) for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_render(v) for v in value) + "]"
    msg = f"cannot render {type(value).__name__} as JSON"
    raise TypeError(msg)


def dumps(value: object) -> bytes:
    """Compact JSON bytes, byte-identical to `jq -c` for strings, numbers, lists and dicts."""
    text = _render(value)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from a \\udXXX escape: jq writes U+FFFD
        cleaned = "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)
        return cleaned.encode("utf-8")
