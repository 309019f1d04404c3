"""`storyd list`: one JSON line per unit (the socket's `list` op, or a direct read)."""

from __future__ import annotations

import sys

import orjson

from daemon.commands.common import REPORT_FLAGS, parse_prefixed, units

__all__ = ["FLAGS", "main"]

USAGE = (
    "usage: storyd list [--workspace DIR ...] [--in-flight] [--direct] [--config FILE]\n"
    "                   [--socket PATH] [--timeout MS] [--staleness git|mtime]"
)
FLAGS = REPORT_FLAGS


def main(argv: list[str]) -> int:
    """Print the units as JSON lines."""
    found = units(parse_prefixed(argv, FLAGS, USAGE))
    for unit in found.units:
        sys.stdout.write(orjson.dumps(unit).decode() + "\n")
    return 0
