"""`storyd check`: exit 1 when any unit has a warning or error finding (CI, pre-push).

Info findings are not problems; the `story-finished` ones are printed all the same.
A state file that does not parse is a problem: one `UNREADABLE <path>: <error>` line
each (the cause and the position), and exit 1.
"""

from __future__ import annotations

import sys

from storyd.cli.common import REPORT_FLAGS, parse_prefixed, units, unreadable_line

__all__ = ["FLAGS", "main", "report"]

USAGE = (
    "usage: storyd check [--workspace DIR ...] [--in-flight] [--direct] [--config FILE]\n"
    "                    [--socket PATH] [--timeout MS] [--staleness git|mtime]\n"
    "                    [--quiet]"
)
FLAGS = REPORT_FLAGS
_FAILING = frozenset(("warning", "error"))
_NOTED = frozenset(("story-finished",))
"""Info findings check prints (without failing): facts a CI must not act against."""


def report(
    units: list[dict[str, object]], unreadable: list[dict[str, object]] | None = None
) -> tuple[str, int]:
    """What check prints for these unit summaries and unreadable state files, and how
    many problems it counts."""
    unreadable = unreadable or []
    problems = 0
    lines = []
    for unit in units:
        where = f"{unit['workspace']}/{unit['stateFile']} {unit['unit']}"
        if unit.get("error"):
            problems += 1
            lines.append(f"{where}: error: {unit['error']}\n")
        for finding in unit.get("findingList") or []:  # type: ignore[attr-defined]
            failing = finding["severity"] in _FAILING
            if failing or finding["code"] in _NOTED:
                problems += failing
                lines.append(
                    f"{where}: {finding['severity']}: {finding['detector']}/"
                    f"{finding['code']}: {finding['message']}\n"
                )
    for entry in unreadable:
        problems += 1
        lines.append(unreadable_line(entry, full_path=True) + "\n")
    broken = len(unreadable)
    also = f" ({broken} unreadable state file{'s' * (broken != 1)})" if broken else ""
    lines.append(f"{len(units)} units, {problems} problems{also}\n")
    return "".join(lines), problems


def main(argv: list[str]) -> int:
    """0 when clean, 1 with the offending findings listed, other codes for errors."""
    found = units(parse_prefixed(argv, FLAGS, USAGE))
    text, problems = report(found.units, found.unreadable)
    sys.stdout.write(text)
    return 1 if problems else 0
