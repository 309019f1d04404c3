"""orjson for the daemon's state-file reads, only where it parses as the lean path does.

daemon/core/jsonio.py parses with the `_json` C scanner so that `storyd resume` starts fast;
the daemon puts `loads` below in front of it (`switches.configure(fast_parse=loads)` in
assembly.py; about 1.3x faster on a 3 MB file, and orjson shares repeated short keys).
The two parsers agree on every document orjson accepts, except two cases, which go to
the lean path (`jsonio.UNSURE`):

- integers beyond 64 bits: orjson returns a float, `_json` an exact int. Any run of 19
  or more digits that could start a number (at the start, or after `[`, `:`, `,` or
  whitespace, with an optional `-`) sends the file to the lean path. Runs inside hex
  commit shas follow a letter or a quote, so they do not.
- `\\uD800`-`\\uDFFF` escapes: orjson refuses a lone surrogate, `_json` keeps it (and
  the renderer writes U+FFFD). Any `\\uD` escape sends the file to the lean path. A file
  without a backslash has none: one `memchr` (0.3 ms on 6 MB) spares the two searches
  for the escape (13 ms), which most state files never need.

Everything orjson refuses (BOMs, UTF-16/32, 1e400, NaN, torn files, nesting deeper than
1024) is parsed again by the lean path, which accepts or names the cause exactly as
`storyd resume` does. tests/test_fastjson.py checks the equivalence.
"""

from __future__ import annotations

from itertools import islice, product
from string import ascii_letters

import orjson

from storyd.core import jsonio

__all__ = ["forget_keys", "loads", "loads_big"]

# Nineteen digits in a row, wherever they are, are found by a plain substring search
# in a copy where every digit is "0" and every other byte a space (0.7 ms on 0.9 MB;
# a plain regular expression took 4 ms, one with the left context 39). Such runs
# are rare (a 40-hex sha holds one about once in 300), so each is then checked for what
# may stand before a number.
_DIGITS_ONLY = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_RUN = b"0" * 19
_BEFORE_NUMBER = frozenset(b"[:, \t\n\r\x0b\x0c")
_MINUS = ord("-")
_SURROGATE_ESCAPES = (b"\\ud", b"\\uD")


def _long_integer(data: bytes) -> bool:
    """Whether a run of 19 or more digits could start a number (see the docstring)."""
    digits = data.translate(_DIGITS_ONLY)
    start = digits.find(_RUN)
    while start >= 0:
        before = start - 1
        if before >= 0 and data[before] == _MINUS:
            before -= 1
        if before < 0 or data[before] in _BEFORE_NUMBER:
            return True
        end = digits.find(b" ", start)  # the rest of this run cannot start a number
        if end < 0:
            return False
        start = digits.find(_RUN, end)
    return False


def _surrogate_escape(data: bytes) -> bool:
    """Whether a `\\uD...` escape may stand in the document (see the docstring)."""
    return b"\\" in data and any(escape in data for escape in _SURROGATE_ESCAPES)


def loads(data: bytes) -> object:
    """The parsed document, or `jsonio.UNSURE` when only the lean path is sure to agree."""
    if _surrogate_escape(data) or _long_integer(data):
        return jsonio.UNSURE
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return jsonio.UNSURE


# orjson keeps the keys it made (those of 64 bytes or less) in a cache of 2,048 slots
# for later parses to share. After a big parse those are strings made amid its tree, one
# here and one there in the arenas the tree filled: freed, the tree leaves those 1 MiB
# arenas pinned (a 4.6 MB state file parsed and freed: 4 arenas -> 12-14). Parsing
# 16,384 keys of our own (150 KB, 1.7 ms) takes over all but a few slots with strings
# made side by side (7-8 arenas; eight epic views read in a row: 17 arenas, not 22).
# The keys are "~" and three letters, made by C loops: 3 ms at import, where a dict of
# formatted keys took 14 ms of the daemon's start.
_FORGET = ('{"~' + '":0,"~'.join(
    islice(map("".join, product(ascii_letters, repeat=3)), 16_384)) + '":0}').encode()


def forget_keys() -> None:
    """Take orjson's key cache over with keys of our own (see above)."""
    orjson.loads(_FORGET)


def loads_big(data: bytes) -> object:
    """`loads` for a big document: then orjson's key cache is taken over (`forget_keys`)."""
    try:
        return loads(data)
    finally:
        forget_keys()
