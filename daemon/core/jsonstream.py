"""One member of a JSON document's top-level object read entry by entry, never whole.

A 10,000-story state file parses into some 450,000 objects (~40 MB). Built whole, for one
story or for a write that changed one, that tree costs its own allocation (~15 ms of
page faults at first touch), and whatever else the process keeps while it lives lands
in its 1 MiB pymalloc arenas and pins them once the tree is freed: a daemon's RSS grew
about 4 MB a write, to 25 MB over what it held after its warm-up (issue 43). Here the
top-level object is walked by hand and each entry of `member` (an epic's `stories`) is
scanned on its own by the same C scanner jsonio uses: at most one entry's objects are
alive at a time, they reuse the same pools, and the whole walk is faster than the whole
parse (10,000 stories: 38 ms against orjson's 52 ms, in one process).

The values are `jsonio.loads`'s: the same scanner, the same strict strings, NaN and
Infinity refused. Only the plain shape is taken: UTF-8 without a byte-order mark, an
object at the top with `member` once, holding an object whose keys are all different.
Anything else (a BOM, UTF-16, a duplicate key, `member` missing or not an object, an
error anywhere) gives None, and the caller parses the document whole as before: the
same value, or the same error in the same words.
"""

from __future__ import annotations

import _json

from storyd.core.jsonio import scan_value

TYPE_CHECKING = False  # `typing` costs start-up time; see daemon/core/model.py
if TYPE_CHECKING:
    from collections.abc import Callable

    Visit = Callable[[str, str, int, int, object], object]
    Entries = list[tuple[str, int, int]]
    Top = dict[str, object]

__all__ = ["Members", "members", "value_at"]

_WHITESPACE = " \t\n\r"
_FIRST_SLICE = 16  # characters of a whitespace run stripped at once, at first
_CHUNK = 65536  # at most (16 x 4^6)
_scanstring = _json.scanstring
_FAILED = (StopIteration, ValueError, RecursionError, SystemError)  # the scanner's errors


class NotPlain(Exception):
    """The document is not the plain shape: parse it whole."""


class Members:
    """A document read by `members`: its text, its top-level members but `member`
    (`top`, in file order; `member`'s value there is None), and `member`'s entries as
    (key, start, end) of each value in `text`, in file order (none listed when a
    `visit` saw them: 10,000 stories' tuples are heap a read need not make)."""

    __slots__ = ("entries", "text", "top")

    def __init__(self, top: dict[str, object], text: str,
                 entries: list[tuple[str, int, int]]) -> None:  # fmt: skip
        self.top, self.text, self.entries = top, text, entries


def members(data: bytes, member: str, visit: Visit | None = None,
            longest: int | None = None) -> Members | None:
    """The document's top level with `member`'s entries located, or None: not the
    plain shape (the module docstring). `visit(key, text, start, end, value)` sees each
    entry as it is scanned (`text[start:end]` is the value's text), the value alive only
    for the call; after a None it may have seen some entries, which the caller then
    drops. `longest`: an entry whose text is longer gives None, unvisited (one story of
    tens of thousands of tasks is a whole tree by itself: a daemon parses that file
    whole, where server/quietgc.py and compact.py keep such a tree from pinning heap)."""
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return None
    try:  # what `visit` raises is a bug of the caller's: it is not caught here
        top, entries, end = _top(text, member, visit, longest)
    except NotPlain:
        return None
    end = _skip(text, end)
    if end != len(text) or entries is None:
        return None
    return Members(top, text, entries)


def value_at(text: str, start: int) -> object:
    """The value that starts at `start` (an entry `members` located)."""
    return scan_value(text, start)[0]


def _scan(text: str, index: int) -> tuple[object, int]:
    """The value at `index` and where it ends; NotPlain for any scanner error. One
    frame on purpose: a story is scanned four frames below `members`' caller, as deep
    as the whole parse's (load_json_object, loads, the top object, `stories`), so
    nesting too deep for the whole parse is too deep here too, never read here alone."""
    try:
        return scan_value(text, index)
    except _FAILED:
        raise NotPlain from None


def _skip(text: str, index: int) -> int:
    """Past the whitespace at `index`: one character (a space after a colon), then the
    rest of a run stripped in C a slice at a time, the first short (an indent), each
    next one four times as long up to `_CHUNK`: a run of any length costs a few Python
    steps (a file padded with megabytes of it, or with many long runs, included)."""
    length = len(text)
    if index < length and text[index] in _WHITESPACE:  # a run: mostly one space, or none
        index += 1
        size = _FIRST_SLICE
        while index < length and text[index] in _WHITESPACE:
            piece = text[index : index + size]
            index += len(piece) - len(piece.lstrip(_WHITESPACE))
            if size < _CHUNK:
                size *= 4
    return index


def _key(text: str, index: int) -> tuple[str, int]:
    """A member's key and where its value starts (after the colon and any space)."""
    if text[index : index + 1] != '"':
        raise NotPlain
    try:
        key, index = _scanstring(text, index + 1, True)
    except _FAILED:
        raise NotPlain from None
    index = _skip(text, index)
    if text[index : index + 1] != ":":
        raise NotPlain
    return key, _skip(text, index + 1)


def _after(text: str, index: int) -> tuple[bool, int]:
    """Past a member: (True, the next member's start) after a comma, (False, past the
    brace) at the object's end."""
    index = _skip(text, index)
    mark = text[index : index + 1]
    if mark == ",":
        return True, _skip(text, index + 1)
    if mark == "}":
        return False, index + 1
    raise NotPlain


def _top(text: str, member: str, visit: Visit | None,
         longest: int | None) -> tuple[Top, Entries | None, int]:  # fmt: skip
    index = _skip(text, 0)
    if text[index : index + 1] != "{":
        raise NotPlain
    index = _skip(text, index + 1)
    top: dict[str, object] = {}
    entries = None
    if text[index : index + 1] == "}":
        return top, entries, index + 1
    more = True
    while more:
        key, index = _key(text, index)
        if key in top:
            raise NotPlain  # a duplicate: the last one wins, in the first one's place
        if key == member:
            if text[index : index + 1] != "{":
                raise NotPlain
            entries, index = _entries(text, index + 1, visit, longest)
            top[key] = None
        else:
            top[key], index = _scan(text, index)
        more, index = _after(text, index)
    return top, entries, index


def _entries(text: str, index: int, visit: Visit | None,
             longest: int | None) -> tuple[list[tuple[str, int, int]], int]:  # fmt: skip
    """`member`'s entries, from just past its opening brace; where the object ends."""
    found: list[tuple[str, int, int]] = []
    seen: set[str] = set()
    index = _skip(text, index)
    if text[index : index + 1] == "}":
        return found, index + 1
    scan = _scan
    more = True
    while more:
        key, start = _key(text, index)
        if key in seen:
            raise NotPlain
        seen.add(key)
        value, end = scan(text, start)
        if longest is not None and end - start > longest:
            raise NotPlain
        if visit is not None:
            visit(key, text, start, end, value)
        del value  # one entry's objects alive at a time
        if visit is None:
            found.append((key, start, end))
        more, index = _after(text, end)
    return found, index
