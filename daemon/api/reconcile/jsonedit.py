"""Minimal textual edits of a JSON document: change only the bytes of the values that change.

A state file is never re-dumped. The text is scanned once for the span of every value
(`scan`), a change replaces one value's span or appends one member to an object, in the
object's own layout (one line or one member a line, its indentation and its `": "`), and
`edit` re-parses the result to prove it is the old document plus the changes, in the
same key order. Key order, indentation, the final newline, non-ASCII text and escapes
outside the changed values are therefore kept exactly as the writer wrote them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import pairwise

from storyd.core.errors import DataError
from storyd.core.formats.dialect import MISSING, Path, lookup

__all__ = ["MISSING", "Node", "Path", "edit", "lookup", "scan", "set_in"]

_DECODER = json.JSONDecoder()
_WS = " \t\n\r"


class Node:
    """One value's span in the text; objects and arrays keep their children's spans."""

    __slots__ = ("end", "items", "kind", "members", "start")

    def __init__(self, kind: str, start: int) -> None:
        self.kind = kind  # "object", "array" or "scalar"
        self.start = start
        self.end = start
        self.members: list[tuple[str, int, int, Node]] = []  # key, key start, key end, value
        self.items: list[Node] = []

    def child(self, step: str | int) -> Node | None:
        """The member (last one wins, as in json.loads) or item named by one path step."""
        if self.kind == "object" and isinstance(step, str):
            found = [node for key, _, _, node in self.members if key == step]
            return found[-1] if found else None
        if self.kind == "array" and isinstance(step, int) and 0 <= step < len(self.items):
            return self.items[step]
        return None


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _expect(text: str, i: int, chars: str) -> str:
    if i >= len(text) or text[i] not in chars:
        msg = f"unexpected {'end' if i >= len(text) else repr(text[i])} at offset {i}"
        raise DataError(msg)
    return text[i]


def _value(text: str, i: int) -> Node:
    char = _expect(text, i, '{["-0123456789tfn')
    if char == "{":
        return _object(text, i)
    if char == "[":
        return _array(text, i)
    node = Node("scalar", i)
    try:
        _, node.end = _DECODER.raw_decode(text, i)
    except json.JSONDecodeError as exc:
        raise DataError(str(exc)) from None
    return node


def _object(text: str, i: int) -> Node:
    node = Node("object", i)
    i = _skip(text, i + 1)
    if text[i : i + 1] == "}":
        node.end = i + 1
        return node
    while True:
        _expect(text, i, '"')
        key, key_end = _DECODER.raw_decode(text, i)
        colon = _skip(text, key_end)
        _expect(text, colon, ":")
        child = _value(text, _skip(text, colon + 1))
        node.members.append((key, i, key_end, child))
        i = _skip(text, child.end)
        if _expect(text, i, ",}") == "}":
            node.end = i + 1
            return node
        i = _skip(text, i + 1)


def _array(text: str, i: int) -> Node:
    node = Node("array", i)
    i = _skip(text, i + 1)
    if text[i : i + 1] == "]":
        node.end = i + 1
        return node
    while True:
        child = _value(text, i)
        node.items.append(child)
        i = _skip(text, child.end)
        if _expect(text, i, ",]") == "]":
            node.end = i + 1
            return node
        i = _skip(text, i + 1)


def scan(text: str) -> Node:
    """The span tree of a JSON text (DataError when it is not one JSON value)."""
    start = _skip(text, 1 if text.startswith("\ufeff") else 0)
    root = _value(text, start)
    if _skip(text, root.end) != len(text):
        msg = f"extra data after the JSON value at offset {root.end}"
        raise DataError(msg)
    return root


def set_in(document: object, path: Path, value: object) -> None:
    """Set `path` in a parsed document (a new key goes last, as `edit` writes it)."""
    parent = lookup(document, path[:-1])
    last = path[-1]
    if isinstance(parent, dict) and isinstance(last, str):
        parent[last] = value
        return
    if not (isinstance(parent, list) and isinstance(last, int) and 0 <= last < len(parent)):
        msg = f"{_dotted(path)}: no such place in the document"
        raise DataError(msg)
    parent[last] = value


def _dotted(path: Path) -> str:
    return "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in path) or "."


def _dump(value: object, ascii_only: bool) -> str:
    return json.dumps(value, ensure_ascii=ascii_only)


def _member_layout(text: str, obj: Node) -> tuple[str, str]:
    """How a new member is written after the last one: (separator, colon)."""
    _, key_start, key_end, child = obj.members[-1]
    colon = text[key_end : child.start]
    opening = text[obj.start + 1 : obj.members[0][1]]
    if "\n" in opening:
        line_start = text.rfind("\n", 0, key_start) + 1
        indent = text[line_start:key_start]
        if indent.strip():  # the key shares its line with something else
            indent = " " * (key_start - line_start)
        return ",\n" + indent, colon
    if len(obj.members) > 1:
        previous = obj.members[-2][3]
        return text[previous.end : key_start], colon
    return ("," if colon == ":" else ", "), colon  # compact writers put no space after either


def _splice(
    text: str, root: Node, path: Path, value: object, ascii_only: bool
) -> tuple[int, int, str]:
    """The (start, end, replacement) that writes `value` at `path`."""
    parent = root
    for step in path[:-1]:
        found = parent.child(step)
        if found is None:
            msg = f"{_dotted(path)}: no such place in the document"
            raise DataError(msg)
        parent = found
    last = path[-1]
    target = parent.child(last)
    if target is not None:
        return target.start, target.end, _dump(value, ascii_only)
    if parent.kind != "object" or not isinstance(last, str):
        msg = f"{_dotted(path)}: cannot add an item to an array"
        raise DataError(msg)
    member = _dump(last, ascii_only)
    if not parent.members:
        return parent.start + 1, parent.end - 1, f"{member}: {_dump(value, ascii_only)}"
    separator, colon = _member_layout(text, parent)
    at = parent.members[-1][3].end
    return at, at, f"{separator}{member}{colon}{_dump(value, ascii_only)}"


def _ordered(value: object) -> object:
    """A comparable form that keeps key order (dict equality ignores it)."""
    if isinstance(value, dict):
        return [(k, _ordered(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [_ordered(v) for v in value]
    return (type(value).__name__, value)


def edit(text: str, changes: Sequence[tuple[Path, object]]) -> str:
    """`text` with each (path, new value) written in place; verified by re-parsing.

    Raises DataError when the text is not JSON, a path leads nowhere, or the result would
    not parse to exactly the old document plus the changes.
    """
    root = scan(text)
    ascii_only = text.isascii() and "\\u" in text
    splices = [_splice(text, root, path, value, ascii_only) for path, value in changes]
    splices.sort(key=lambda s: s[0])
    for (_, end, _), (start, _, _) in pairwise(splices):
        if start < end:
            raise DataError("two changes touch the same value")
    out = text
    for start, end, replacement in reversed(splices):
        out = out[:start] + replacement + out[end:]
    expected = json.loads(text.lstrip("\ufeff"))
    for path, value in changes:
        set_in(expected, path, value)
    try:
        written = json.loads(out.lstrip("\ufeff"))
    except json.JSONDecodeError as exc:
        raise DataError(f"the edited document does not parse: {exc}") from None
    if _ordered(written) != _ordered(expected):
        raise DataError("the edited document is not the old one plus the changes")
    return out
