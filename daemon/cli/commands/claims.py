"""`storyd claims`: the claims on this machine, live first, then the abandoned ones (a
lease that ended unreleased: its owner stopped renewing it), with the last state storyd
saw of each. With --json, one JSON object per line. --workspace keeps one workspace.
"""

from __future__ import annotations

import json
import sys

from storyd.cli.common import parse_prefixed
from storyd.core.flags import SWITCH, VALUE, text

__all__ = ["FLAGS", "main"]

USAGE = "usage: storyd claims [--workspace DIR] [--owner NAME] [--json]"
FLAGS = {"workspace": VALUE, "owner": VALUE, "json": SWITCH}


def main(argv: list[str]) -> int:
    """List the claims (0, also when there is none)."""
    import os
    import time

    from storyd.api.claims import listing
    from storyd.api.claimview import last_text

    flags = parse_prefixed(argv, FLAGS, USAGE)
    workspace = text(flags, "workspace")
    found = listing(os.path.realpath(workspace) if workspace else None,
                    owner=text(flags, "owner"))  # fmt: skip
    now = time.time()
    for held in found:
        shown = held.as_dict(now)
        if flags.get("json"):
            sys.stdout.write(json.dumps(shown, ensure_ascii=False) + "\n")
            continue
        left = f"{held.expires - now:.0f} s left" if held.live(now) else "ABANDONED"
        seen = "" if held.live(now) else last_text(shown["last"])
        sys.stdout.write(f"{held.place.workspace}: {held.place.label()}: {held.owner} token "
                         f"{held.token}, until {shown['expires']} ({left})"
                         f"{'; last seen: ' + seen if seen else ''}\n")  # fmt: skip
    if not found and not flags.get("json"):
        sys.stdout.write("no claims\n")
    return 0
