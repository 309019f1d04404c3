"""`storyd check`: exit 1 when any unit has a warning or error finding (CI, pre-push).

Info findings are not problems; the `story-finished` ones are printed all the same.
A state file that does not parse is a problem: one `UNREADABLE <path>: <error>` line
each (the cause and the position), and exit 1.
"""

from __future__ import annotations

import sys

from storyd.api.check import Checked
from storyd.api.render import check_text
from storyd.cli.common import REPORT_FLAGS, parse_prefixed, report_units

__all__ = ["FLAGS", "main"]

USAGE = (
    "usage: storyd check [--workspace DIR ...] [--in-flight] [--direct] [--config FILE]\n"
    "                    [--socket PATH] [--timeout MS] [--staleness git|mtime]\n"
    "                    [--quiet]"
)
FLAGS = REPORT_FLAGS


def main(argv: list[str]) -> int:
    """0 when clean, 1 with the offending findings listed, other codes for errors."""
    checked = Checked(report_units(parse_prefixed(argv, FLAGS, USAGE)))
    sys.stdout.write(check_text(checked))
    return checked.code
