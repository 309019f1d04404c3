"""`storyd check`: exit 1 when any unit has a warning or error finding (CI, pre-push).

Info findings are not problems; the `story-finished` ones are printed all the same.
A state file that does not parse is a problem: one `UNREADABLE <path>: <error>` line
each (the cause and the position), and exit 1.
"""

from __future__ import annotations

import sys

from daemon.commands.common import REPORT_FLAGS, parse_prefixed, units, unreadable_line

__all__ = ["FLAGS", "main"]

USAGE = (
    "usage: storyd check [--workspace DIR ...] [--in-flight] [--direct] [--config FILE]\n"
    "                    [--socket PATH] [--timeout MS] [--staleness git|mtime]\n"
    "                    [--quiet]"
)
FLAGS = REPORT_FLAGS
_FAILING = frozenset(("warning", "error"))
_NOTED = frozenset(("story-finished",))
"""Info findings check prints (without failing): facts a CI must not act against."""


def main(argv: list[str]) -> int:
    """0 when clean, 1 with the offending findings listed, other codes for errors."""
    found = units(parse_prefixed(argv, FLAGS, USAGE))
    problems = 0
    for unit in found.units:
        where = f"{unit['workspace']}/{unit['stateFile']} {unit['unit']}"
        if unit.get("error"):
            problems += 1
            sys.stdout.write(f"{where}: error: {unit['error']}\n")
        for finding in unit.get("findingList") or []:  # type: ignore[attr-defined]
            failing = finding["severity"] in _FAILING
            if failing or finding["code"] in _NOTED:
                problems += failing
                sys.stdout.write(
                    f"{where}: {finding['severity']}: {finding['detector']}/"
                    f"{finding['code']}: {finding['message']}\n"
                )
    for entry in found.unreadable:
        problems += 1
        sys.stdout.write(unreadable_line(entry, full_path=True) + "\n")
    broken = len(found.unreadable)
    also = f" ({broken} unreadable state file{'s' * (broken != 1)})" if broken else ""
    sys.stdout.write(f"{len(found.units)} units, {problems} problems{also}\n")
    return 1 if problems else 0
