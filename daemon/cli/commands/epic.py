"""`storyd epic`: the epic-level view (reclassified stories, executable next, blocked and why).

Asks the daemon's `epic` op first and falls back to reading the files here; both call
daemon/api/epicview.py, so the answer is the same.
"""

from __future__ import annotations

import os
import sys

from storyd.cli.common import parse_prefixed, refusal
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


def _from_daemon(flags: dict[str, object], workspace: str, epic: str) -> dict[str, object] | None:
    """The daemon's view, or None when no daemon answered."""
    from storyd.api.client import Client, DaemonUnavailable

    timeout = float(text(flags, "timeout") or "5000") / 1000
    try:
        with Client(text(flags, "socket"), timeout=timeout) as client:
            answer = client.request("epic", workspace=workspace, epic=epic)
    except DaemonUnavailable:
        return None
    if not answer.get("ok"):
        error = answer.get("error")
        if isinstance(error, dict) and isinstance(error.get("code"), int):
            from storyd.core.errors import StorydError

            exc = StorydError(str(error.get("message")))
            exc.code = int(error["code"])
            raise exc
        raise refusal(answer)
    view = answer.get("view")
    assert isinstance(view, dict), "the epic op answers with a view object"
    return view


def main(argv: list[str]) -> int:
    """Print the epic view (JSON with --json); exit codes as `storyd resume`'s."""
    from storyd.core.ids import normalize_epic_id

    flags = parse_prefixed(argv, FLAGS, USAGE)
    raw = text(flags, "epic-id")
    if raw is None:
        raise UsageError(f"--epic-id is required\n{USAGE}")
    epic = normalize_epic_id(raw)
    workspace = os.path.realpath(text(flags, "workspace") or os.getcwd())
    view = None if flags.get("direct") else _from_daemon(flags, workspace, epic)
    if view is None:
        from storyd.api.epicview import epic_view

        view = epic_view(workspace, epic)
    if flags.get("json"):
        from storyd.core.jsonio import dumps

        sys.stdout.buffer.write(dumps(view) + b"\n")
    else:
        from storyd.api.epicview import render_text

        sys.stdout.write(render_text(view))
    return 0
