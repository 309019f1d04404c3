"""`storyd history`: a unit's versions, newest last, each with what changed, and a bar
of its tasks done per version; between them, in time order, its claims' grants,
renewals, expiries, releases and forced writes (with --json, `{"claim": kind, ...}`
lines). Reads the history database read-only (no daemon needed;
`--busy SECONDS` bounds the wait for a lock). `--accept` takes the unit's current
version as it is: its `regressed` findings resolve (docs/service.md, [history]).

`--since` takes an ISO date or time (2026-11-25, 2026-11-25T13:00:00Z) or an age
(30m, 6h, 2d).
"""

from __future__ import annotations

import os
import sys
import time

from storyd.cli.common import parse_prefixed
from storyd.core.errors import UsageError
from storyd.core.flags import SWITCH, VALUE, text

__all__ = ["FLAGS", "main"]

USAGE = (
    "usage: storyd history (--epic-id <id> --story-id <id> | --state-file PATH [--unit ID])\n"
    "                      [--workspace DIR] [--since WHEN] [--json] [--accept]\n"
    "                      [--busy SECONDS] [--socket PATH]"
)
FLAGS = {
    "epic-id": VALUE,
    "story-id": VALUE,
    "state-file": VALUE,
    "unit": VALUE,
    "workspace": VALUE,
    "since": VALUE,
    "json": SWITCH,
    "accept": SWITCH,
    "busy": VALUE,
    "socket": VALUE,
}
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def since_epoch(value: str, now: float) -> float:
    """`--since` in epoch seconds: an age (`30m`, `6h`, `2d`) or an ISO date or time."""
    from storyd.core.isotime import parse_epoch

    raw = value.strip()
    if raw[:-1].replace(".", "", 1).isdigit() and raw[-1:] in _UNITS:
        return now - float(raw[:-1]) * _UNITS[raw[-1]]
    stamp = parse_epoch(raw if "T" in raw else raw + "T00:00:00Z")
    if stamp is None:
        raise UsageError(
            f"--since {value!r}: expected an age (30m, 6h, 2d) or an ISO date\n{USAGE}"
        )
    return float(stamp)


def main(argv: list[str]) -> int:
    """List the versions (JSON lines with --json), or accept the current one."""
    from storyd.api import history

    flags = parse_prefixed(argv, FLAGS, USAGE)
    named = history.name_unit(
        text(flags, "workspace") or os.getcwd(),
        epic_id=text(flags, "epic-id"), story_id=text(flags, "story-id"),
        state_file=text(flags, "state-file"), unit=text(flags, "unit"),
    )  # fmt: skip
    if flags.get("accept"):
        from storyd.api.history_accept import accept

        sys.stdout.write(accept(named, text(flags, "socket")) + "\n")
        return 0
    since = since_epoch(text(flags, "since") or "", time.time()) if flags.get("since") else 0.0
    try:
        busy = float(text(flags, "busy") or "2")
    except ValueError:
        raise UsageError(f"--busy expects seconds\n{USAGE}") from None
    found = history.timeline(named, since, busy=busy)
    if flags.get("json"):
        from storyd.core.jsonio import dumps

        for version in found:
            sys.stdout.buffer.write(dumps(version) + b"\n")
        return 0
    if not found:
        sys.stderr.write(f"no versions of {named.unit or named.state_file} recorded"
                         f"{' since then' if since else ''}\n")  # fmt: skip
        return 0
    sys.stdout.write(f"{named.state_file} {named.unit or ''}".rstrip() + "\n")
    sys.stdout.write("\n".join(history.timeline_lines(found)) + "\n")
    return 0
