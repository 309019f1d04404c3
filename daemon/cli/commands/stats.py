"""`storyd stats`: the daemon's counters as one JSON object."""

from __future__ import annotations

import sys

import orjson

from storyd.cli.common import SOCKET_ONLY, ask_once

__all__ = ["FLAGS", "main"]

USAGE = "usage: storyd stats [--socket PATH]"
FLAGS = SOCKET_ONLY


def main(argv: list[str]) -> int:
    """Print the stats answer, pretty."""
    _path, answer = ask_once(argv, USAGE, "stats")
    if answer is None:
        return 69
    sys.stdout.write(orjson.dumps(answer, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0
