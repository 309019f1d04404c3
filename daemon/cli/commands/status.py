"""`storyd status`: every unit with a progress bar, its resume point, its findings and
its claim (who holds it, until when, or abandoned: storyd.api.claimview)."""

from __future__ import annotations

import sys

from storyd.cli.common import REPORT_FLAGS, parse_prefixed, report_units
from storyd.core.flags import SWITCH

__all__ = ["FLAGS", "main"]

USAGE = (
    "usage: storyd status [--workspace DIR ...] [--in-flight] [--json] [--direct]\n"
    "                     [--config FILE] [--socket PATH] [--timeout MS] [--staleness git|mtime]\n"
    "                     [--quiet]"
)
FLAGS = {**REPORT_FLAGS, "json": SWITCH}
def main(argv: list[str]) -> int:
    """Print every unit (from the daemon, or read here when none runs)."""
    flags = parse_prefixed(argv, FLAGS, USAGE)
    found = report_units(flags)
    from storyd.api.claimview import attach

    attach(found.units)  # each unit's claim, and its claim-lost findings
    if flags.get("json"):
        import orjson

        body = {"units": found.units, "source": found.source, "unreadable": found.unreadable}
        sys.stdout.write(orjson.dumps(body).decode() + "\n")
        return 0
    from storyd.api.render import status_text
    from storyd.cli.terminal import color_on

    color = color_on(sys.stdout)
    sys.stdout.write(status_text(found.units, color, found.unreadable))
    return 0
