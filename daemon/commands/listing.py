"""`storyd list`: one JSON line per unit (the socket's `list` op, or a direct read)."""

from __future__ import annotations

import sys

import orjson

from daemon.commands.common import fail, parse_report_flags, units
from daemon.errors import StorydError

__all__ = ["main"]

USAGE = "usage: storyd list [--workspace DIR ...] [--in-flight] [--direct] [--socket PATH]"


def main(argv: list[str]) -> int:
    """Print the units as JSON lines."""
    try:
        found = units(parse_report_flags(argv, USAGE))
    except StorydError as exc:
        return fail(exc, "list")
    for unit in found.units:
        sys.stdout.write(orjson.dumps(unit).decode() + "\n")
    return 0
