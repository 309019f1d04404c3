"""JSON for the resume path: parse state files and render jq-identical bytes.

Why not orjson or `json` here: `storyd resume` is a short-lived process and its
import cost is its latency. orjson 3.13 imports uuid, dataclasses and zoneinfo at
start-up (about 25 ms measured) and `json` imports `re`; the C scanner in `_json`
is the same parser `json.loads` uses, without those imports. The daemon installs
orjson in front of it (`switches.configure(fast_parse=...)`, see daemon/server/fastjson.py),
which hands back
`UNSURE` wherever orjson could parse differently, so the socket and the fallback
still parse identically.

`dumps` reproduces `jq -c`: compact separators, non-ASCII written raw, control
characters escaped (\\b \\f \\n \\r \\t or \\u00XX) and DEL as \\u007f.
"""

from __future__ import annotations

import _json

from storyd.core.switches import CONFIG

__all__ = [
    "ORJSON_INTS",
    "JSONError",
    "conflict_marker",
    "decode_text",
    "dumps",
    "dumps_like_orjson",
    "kind",
    "loads",
    "loads_each",
    "scan_value",
    "scanner_with",
    "utf16_without_bom",
    "value_start",
]


TYPE_CHECKING = False  # `typing` costs start-up time; see daemon/core/model.py
if TYPE_CHECKING:
    from collections.abc import Callable

    Scanner = Callable[[str, int], tuple[object, int]]

UNSURE = object()  # a fast parser's "parse this one with the lean path" answer
# The fast parser in front of `loads` (the daemon's orjson) is a process-wide switch:
# switches.configure(fast_parse=...). It must return the value `loads` would, or
# `UNSURE` (errors included: the lean path then names the cause, line and column).


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
scan_value = _scan
"""`scan_value(text, index)`: the value starting at `index` and where it ends, by the C
scanner `loads` uses (StopIteration, ValueError or RecursionError when there is none)."""
_WHITESPACE = " \t\n\r"


def scanner_with(pairs: Callable[[list[tuple[str, object]]], object]) -> Scanner:
    """A scanner like `scan_value` that builds each object from its (key, value) pairs,
    repeated keys included, with `pairs` (json's object_pairs_hook); what it raises
    ends the scan."""

    class _Hooked(_Context):
        object_pairs_hook = staticmethod(pairs)  # type: ignore[assignment]

    return _json.make_scanner(_Hooked())  # type: ignore[arg-type]


def _position(text: str, index: int) -> tuple[int, int]:
    line = text.count("\n", 0, index) + 1
    column = index - (text.rfind("\n", 0, index) + 1) + 1
    return line, column


def _fail(text: str, index: int, reason: str) -> JSONError:
    line, column = _position(text, index)
    return JSONError(reason, line, column)


_BOMS = (
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)
_BOM_LEADS = frozenset(b"\xff\xfe\x00")


def decode_text(data: bytes) -> str:
    """Text from a file's bytes: UTF-8, or what its byte-order mark says (UTF-8, UTF-16 or
    UTF-32); the mark itself is dropped. Raises UnicodeDecodeError."""
    if data[:1] and data[0] in _BOM_LEADS:
        for bom, codec in _BOMS:
            if data.startswith(bom):
                return data[len(bom) :].decode(codec)
    text = data.decode("utf-8")
    return text[1:] if text.startswith("\ufeff") else text


def utf16_without_bom(data: bytes) -> str | None:
    """ "UTF-16LE"/"UTF-16BE" when the bytes look like UTF-16 text saved without a BOM
    (NUL in every other byte, as ASCII text in UTF-16 has), else None."""
    sample = data[:256]
    even, odd = sample[0::2], sample[1::2]
    if len(odd) < 1:
        return None
    if odd.count(0) * 2 > len(odd) and even.count(0) == 0:
        return "UTF-16LE"
    if even.count(0) * 2 > len(even) and odd.count(0) == 0:
        return "UTF-16BE"
    return None


_MARKERS = ("<<<<<<<", "|||||||", "=======", ">>>>>>>")


def conflict_marker(text: str) -> int | None:
    """Where the first git merge-conflict marker line starts, if the text has one."""
    offset = 0
    for line in text.split("\n"):
        if line.startswith(_MARKERS) and (len(line) == 7 or line[7] in " \r"):
            return offset
        offset += len(line) + 1
    return None


def _utf16_error(encoding: str) -> JSONError:
    reason = f"{encoding} text without a byte-order mark (save it as UTF-8, or with a BOM)"
    return JSONError(reason, 1, 1)


def _explain(data: bytes, text: str, index: int, reason: str) -> JSONError:
    """The parse failure at `index`, named by its likely cause (failure path only).

    In order: UTF-16 saved without a byte-order mark, git merge-conflict markers, a
    comment (`//` or `/* */`) where the parser stopped, a trailing comma before `}` or
    `]`; otherwise the parser's own reason.
    """
    encoding = utf16_without_bom(data)
    if encoding is not None:
        return _utf16_error(encoding)
    marker = conflict_marker(text)
    if marker is not None:
        found = text[marker : marker + 7]
        return _fail(text, marker, f"git merge-conflict marker {found!r} (an unresolved merge)")
    if text.startswith(("//", "/*"), index):
        return _fail(text, index, f"a {text[index : index + 2]!r} comment (JSON has no comments)")
    if index < len(text) and text[index] in "}]":
        before = index - 1
        while before >= 0 and text[before] in _WHITESPACE:
            before -= 1
        if before >= 0 and text[before] == ",":
            return _fail(text, before, f"a trailing comma before {text[index]!r}")
    return _fail(text, index, reason)


def _diagnose(text: str, start: int) -> tuple[int, str]:
    """Where and why a parse failed (slow path: imports `json` for its error positions)."""
    import json

    try:
        json.JSONDecoder(parse_constant=_reject_constant).raw_decode(text, start)
    except json.JSONDecodeError as exc:
        return exc.pos, exc.msg.lower().removesuffix(" at")
    except ValueError as exc:  # NaN, Infinity
        return start, str(exc)
    return start, "invalid JSON"


def _undecodable(data: bytes, exc: UnicodeDecodeError) -> JSONError:
    encoding = utf16_without_bom(data)
    if encoding is not None:
        return _utf16_error(encoding)
    if exc.encoding != "utf-8":  # a BOM named UTF-16 or UTF-32; the bytes do not follow it
        return JSONError(f"invalid {exc.encoding.upper()} after its byte-order mark", 1, 1)
    prefix = data[: exc.start].decode("utf-8", "replace")
    return _fail(prefix, len(prefix), "invalid UTF-8")


def loads(data: bytes) -> object:
    """Parse one JSON document from bytes: UTF-8, or UTF-16/32 with a byte-order mark
    (a UTF-8 BOM is ignored). A failure names its cause, line and column."""
    fast = CONFIG.fast_parse
    if fast is not None:
        value = fast(data)
        if value is not UNSURE:
            return value
    try:  # the usual document: UTF-8 without a mark, its value first, nothing after
        text = data.decode()
        value, end = _scan(text, 0)
    except (StopIteration, ValueError, RecursionError, SystemError):
        pass  # the whole path below parses it again, and names the failure
    else:
        if end == len(text) or not text[end:].strip(_WHITESPACE):
            return value
    try:
        text = decode_text(data)
    except UnicodeDecodeError as exc:
        raise _undecodable(data, exc) from None
    start = 0
    length = len(text)
    while start < length and text[start] in _WHITESPACE:
        start += 1
    try:
        value, end = _scan(text, start)
    except StopIteration as stop:
        reason = "empty document" if start >= length else "expecting a value"
        raise _explain(data, text, stop.value or start, reason) from None
    except RecursionError:
        raise _fail(text, start, "nesting too deep") from None
    except (ValueError, SystemError):
        raise _explain(data, text, *_diagnose(text, start)) from None
    while end < length and text[end] in _WHITESPACE:
        end += 1
    if end != length:
        raise _explain(data, text, end, "extra data after the document")
    return value


def loads_each(datas: list[bytes]) -> list[object]:
    """Each document's value as `loads` gives it, None for one that does not parse (as
    for `null`): the documents decoded in one go, each scanned in C, any unusual one
    (a byte-order mark, a NUL, leading space, invalid) by `loads` itself."""
    parts: list[str] | None = None
    if CONFIG.fast_parse is None:
        try:
            parts = b"\0".join(datas).decode().split("\0")
        except UnicodeDecodeError:
            parts = None
        if parts is not None and len(parts) != len(datas):
            parts = None  # a document holds a NUL: the parts are not the documents
    values: list[object] = []
    for index, data in enumerate(datas):
        if parts is not None:
            text = parts[index]
            try:
                value, end = _scan(text, 0)
            except (StopIteration, ValueError, RecursionError, SystemError):
                pass
            else:
                if end == len(text) or not text[end:].strip(_WHITESPACE):
                    values.append(value)
                    continue
        try:
            values.append(loads(data))
        except (ValueError, RecursionError):  # JSONError is a ValueError
            values.append(None)
    return values


def value_start(data: bytes) -> tuple[int, int]:
    """The line and column where a document's top-level value starts (for error messages)."""
    try:
        text = decode_text(data)
    except UnicodeDecodeError:
        return 1, 1
    start = 0
    while start < len(text) and text[start] in _WHITESPACE:
        start += 1
    return _position(text, start)


_ESCAPES = {i: f"\\u{i:04x}" for i in range(0x20)}
_ESCAPES.update({0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"})
_ESCAPES.update({0x22: '\\"', 0x5C: "\\\\", 0x7F: "\\u007f"})


def _string(value: str) -> str:
    return '"' + value.translate(_ESCAPES) + '"'


def _number(value: float) -> str:
    """A number as jq prints it: an integer as it is, an integral float without `.0`,
    others shortest round-trip."""
    if isinstance(value, int):
        return str(value)
    if not _finite(value):
        return "null"
    if value.is_integer() and abs(value) < 1e17:
        return str(int(value))
    return repr(value)


def _exact(value: float) -> str:
    """A float as Python reads it back as a float (`1.0`, not `1`); null when not finite."""
    if isinstance(value, int):
        return str(value)
    return repr(value) if _finite(value) else "null"


ORJSON_INTS = (-(1 << 63), 1 << 64)  # the integers orjson reads and writes as integers


def _orjson_number(value: float) -> str:
    """A number as orjson writes it, in value: a float as `_exact`; an integer beyond
    64 bits refused, as orjson refuses it."""
    if isinstance(value, int) and not ORJSON_INTS[0] <= value < ORJSON_INTS[1]:
        msg = "integer exceeds 64-bit range"
        raise ValueError(msg)
    return _exact(value)


def _finite(value: float) -> bool:
    """math.isfinite without `math` (a shared library to load: 0.1-0.2 ms of a hook)."""
    return value - value == 0.0  # inf - inf and nan - nan are nan


def _render(value: object, number: Callable[[float], str] = _number) -> str:
    if isinstance(value, str):
        return _string(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int | float):
        return number(value)
    if isinstance(value, dict):
        return "{" + ",".join(_string(k) + ":" + _render(v, number)
                              for k, v in value.items()) + "}"  # fmt: skip
    if isinstance(value, list | tuple):
        return "[" + ",".join(_render(v, number) for v in value) + "]"
    msg = f"cannot render {type(value).__name__} as JSON"
    raise TypeError(msg)


def dumps_like_orjson(value: object) -> bytes:
    """JSON equal in value to `orjson.dumps`'s, for the daemon's answers before it
    imports orjson (server/protocol.py): a float stays one (its exponent may be written
    otherwise), DEL is escaped where orjson writes it raw. ValueError where orjson
    refuses a lone surrogate or an integer beyond 64 bits. For what protocol.py renders
    (str keys; str, int, float, bool, None, lists, tuples): subclasses of those, which
    orjson refuses, and non-str keys are not checked here."""
    return _render(value, _orjson_number).encode("utf-8")  # a lone surrogate raises


def dumps(value: object, *, exact_floats: bool = False) -> bytes:
    """Compact JSON bytes, byte-identical to `jq -c` for strings, numbers, lists and dicts;
    with `exact_floats`, a float stays one when read back (storyd's own records)."""
    text = _render(value, _exact if exact_floats else _number)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from a \\udXXX escape: jq writes U+FFFD
        cleaned = "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)
        return cleaned.encode("utf-8")
