"""`storyd list`: one JSON line per unit (the socket's `list` op, or a direct read)."""

from __future__ import annotations

import sys

import orjson

from daemon.commands.common import parse_report_flags, units

__all__ = ["main"]

USAGE = "usage: storyd list [--workspace DIR ...] [--in-flight] [--direct] [--socket PATH]"


def main(argv: list[str]) -> int:
    """Print the units as JSON lines."""
    found = units(parse_report_flags(argv, USAGE))
    for unit in found.units:
        sys.stdout.write(orjson.dumps(unit).decode() + "\n")
    return 0
