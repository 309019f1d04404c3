"""`storyd release`: give back a claim (the same target flags as `storyd claim`).

Exit codes: 0 released, or nothing held there; 75 another owner holds it live (name it
with --owner to release as that owner); 64 bad flags.
"""

from __future__ import annotations

import json
import sys

from storyd.cli.commands.claim import TARGET_FLAGS, target
from storyd.cli.common import parse_prefixed

__all__ = ["FLAGS", "main"]

USAGE = (
    "usage: storyd release [--workspace DIR] (--epic-id E --story-id S | --state-file PATH "
    "[--unit U]) [--task T]\n"
    "                      [--owner NAME] [--json]"
)
FLAGS = TARGET_FLAGS


def main(argv: list[str]) -> int:
    """Release (0), or name the holder (75)."""
    from storyd.api.claims import release

    flags = parse_prefixed(argv, FLAGS, USAGE)
    chosen, owner = target(flags, USAGE)
    gone = release(chosen, owner)
    if flags.get("json"):
        line = {"released": gone is not None, "token": gone.token if gone else None,
                "owner": owner}  # fmt: skip
        sys.stdout.write(json.dumps(line, ensure_ascii=False) + "\n")
    elif gone is None:
        sys.stdout.write(f"{chosen.label()}: {owner} held nothing there\n")
    else:
        sys.stdout.write(f"released {chosen.label()} (token {gone.token})\n")
    return 0
