"""orjson for the daemon's state-file reads, only where it parses as the lean path does.

daemon/jsonio.py parses with the `_json` C scanner so that `storyd resume` starts fast;
the daemon installs `loads` below in front of it (about 1.3x faster on a 3 MB file, and
orjson shares repeated short keys). The two parsers agree on every document orjson
accepts, except two cases, which go to the lean path (`jsonio.UNSURE`):

- integers beyond 64 bits: orjson returns a float, `_json` an exact int. Any run of 19
  or more digits that could start a number (at the start, or after `[`, `:`, `,` or
  whitespace, with an optional `-`) sends the file to the lean path. Runs inside hex
  commit shas follow a letter or a quote, so they do not.
- `\\uD800`-`\\uDFFF` escapes: orjson refuses a lone surrogate, `_json` keeps it (and
  the renderer writes U+FFFD). Any `\\uD` escape sends the file to the lean path.

Everything orjson refuses (BOMs, UTF-16/32, 1e400, NaN, torn files, nesting deeper than
1024) is parsed again by the lean path, which accepts or names the cause exactly as
`storyd resume` does. tests/test_fastjson.py checks the equivalence.
"""

from __future__ import annotations

import re

import orjson

from daemon import jsonio

__all__ = ["install", "loads"]

_LONG_INTEGER = re.compile(rb"(?:^|[\[:,\s])-?[0-9]{19}")
_SURROGATE_ESCAPES = (b"\\ud", b"\\uD")


def loads(data: bytes) -> object:
    """The parsed document, or `jsonio.UNSURE` when only the lean path is sure to agree."""
    if any(escape in data for escape in _SURROGATE_ESCAPES) or _LONG_INTEGER.search(data):
        return jsonio.UNSURE
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return jsonio.UNSURE


def install() -> None:
    """Parse state files with orjson in this process (the daemon; never the CLI)."""
    jsonio.use_fast_parser(loads)
