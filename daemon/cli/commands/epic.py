"""`storyd epic`: the epic-level view (reclassified stories, executable next, blocked and why).

Asks the daemon's `epic` op first and falls back to reading the files here
(storyd.api.epic); both call daemon/api/epicview.py, so the answer is the same.
"""

from __future__ import annotations

import os
import sys

from storyd.cli.common import parse_prefixed, seconds
from storyd.core.errors import UsageError
from storyd.core.flags import SWITCH, VALUE, text

__all__ = ["FLAGS", "main"]

USAGE = (
    "usage: storyd epic --epic-id <id> [--workspace DIR] [--json] [--direct]\n"
    "                   [--socket PATH] [--timeout MS]"
)
FLAGS = {
    "epic-id": VALUE,
    "workspace": VALUE,
    "json": SWITCH,
    "direct": SWITCH,
    "socket": VALUE,
    "timeout": VALUE,
}


def main(argv: list[str]) -> int:
    """Print the epic view (JSON with --json); exit codes as `storyd resume`'s."""
    from storyd.api.epic import epic

    flags = parse_prefixed(argv, FLAGS, USAGE)
    raw = text(flags, "epic-id")
    if raw is None:
        raise UsageError(f"--epic-id is required\n{USAGE}")
    view = epic(
        text(flags, "workspace") or os.getcwd(),
        raw,
        direct=bool(flags.get("direct")),
        socket=text(flags, "socket"),
        timeout=seconds(text(flags, "timeout"), "5000"),
    ).view
    if flags.get("json"):
        from storyd.core.jsonio import dumps

        sys.stdout.buffer.write(dumps(view) + b"\n")
    else:
        from storyd.api.epicview import render_text

        sys.stdout.write(render_text(view))
    return 0
