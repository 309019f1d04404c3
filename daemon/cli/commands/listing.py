"""`storyd list`: one JSON line per unit (the socket's `list` op, or a direct read), with
its `claim` and `claim-lost` findings as `storyd status` shows them (storyd.api.claimview).

A state file that does not parse has no units to list: it is named on stderr, one
`UNREADABLE <path>: <error>` line each (stdout stays one unit per line).
"""

from __future__ import annotations

import sys

import orjson

from storyd.api.render import unreadable_line
from storyd.cli.common import REPORT_FLAGS, parse_prefixed, report_units

__all__ = ["FLAGS", "main"]

USAGE = (
    "usage: storyd list [--workspace DIR ...] [--in-flight] [--direct] [--config FILE]\n"
    "                   [--socket PATH] [--timeout MS] [--staleness git|mtime]\n"
    "                   [--quiet]"
)
FLAGS = REPORT_FLAGS


def main(argv: list[str]) -> int:
    """Print the units as JSON lines."""
    found = report_units(parse_prefixed(argv, FLAGS, USAGE))
    from storyd.api.claimview import attach

    attach(found.units)  # each unit's claim, and its claim-lost findings
    for unit in found.units:
        sys.stdout.write(orjson.dumps(unit).decode() + "\n")
    sys.stdout.flush()
    for entry in found.unreadable:
        sys.stderr.write(unreadable_line(entry, full_path=True) + "\n")
    return 0
