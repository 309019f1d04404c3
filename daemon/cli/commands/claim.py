"""`storyd claim`: take a unit or a task for an owner, with a lease and a fencing token.

Exit codes: 0 granted (or the owner's own lease renewed: same token), 75 another owner
holds it (one line naming the holder and when its lease ends), 64 bad flags. With
`--json`, one line `{"token": N, "owner": ..., "expires": ...}`. --owner defaults to
$STORYD_OWNER (the agent session, when a hook left it), else `user:<login>`; --ttl to
$STORYD_CLAIM_TTL, else config.toml's `[claims] ttl`, else 900 s. See docs/claims.md.
"""

from __future__ import annotations

import json
import sys

from storyd.cli.common import parse_prefixed
from storyd.core.flags import SWITCH, VALUE, text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.api.claims import Place

__all__ = ["FLAGS", "TARGET_FLAGS", "main", "target"]

USAGE = (
    "usage: storyd claim [--workspace DIR] (--epic-id E --story-id S | --state-file PATH "
    "[--unit U]) [--task T]\n"
    "                    [--owner NAME] [--ttl SECONDS] [--json]"
)
TARGET_FLAGS = {
    "workspace": VALUE,
    "epic-id": VALUE,
    "story-id": VALUE,
    "state-file": VALUE,
    "unit": VALUE,
    "task": VALUE,
    "owner": VALUE,
    "json": SWITCH,
}
FLAGS = {**TARGET_FLAGS, "ttl": VALUE}


def target(flags: dict[str, object], usage: str) -> tuple[Place, str]:
    """The place and the owner the flags name (UsageError with the usage line)."""
    from storyd.api.claims import default_owner, place
    from storyd.core.errors import UsageError

    try:
        chosen = place(text(flags, "workspace") or ".", epic_id=text(flags, "epic-id"),
                       story_id=text(flags, "story-id"), state_file=text(flags, "state-file"),
                       unit=text(flags, "unit"), task=text(flags, "task"))  # fmt: skip
    except UsageError as exc:
        raise UsageError(f"{exc.message}\n{usage}") from None
    return chosen, text(flags, "owner") or default_owner()


def main(argv: list[str]) -> int:
    """Grant (0) or name the holder (75)."""
    from storyd.api.claims import claim, ttl_seconds

    flags = parse_prefixed(argv, FLAGS, USAGE)
    chosen, owner = target(flags, USAGE)
    granted = claim(chosen, owner, ttl_seconds(text(flags, "ttl")))
    shown = granted.as_dict()
    if flags.get("json"):
        line = {"token": granted.token, "owner": owner, "expires": shown["expires"]}
        sys.stdout.write(json.dumps(line, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(f"claimed {chosen.label()} for {owner}: token {granted.token}, "
                         f"lease until {shown['expires']}\n")  # fmt: skip
    return 0
