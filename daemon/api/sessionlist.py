"""The agents' sessions storyd knows of: the hooks' per-session records (issue 30,
daemon/api/sessions.py), listed for `storyd top`. A record names its workspace, its
agent (records made before issue 34 do not), when the session began and when a hook
last wrote it (the file's mtime): a session whose hooks run often is recent. From issue
34 on a record also says the session's state (working, stopped, waiting: its last
event), since when, what a notification said, and the state file and unit it is on;
an older record lists with the state unknown (None)."""

from __future__ import annotations

import os

__all__ = ["sessions_in_flight"]

_MAX_BYTES = 1 << 20


def sessions_in_flight(
    within: float = 86400.0, now: float | None = None
) -> list[dict[str, object]]:
    """Sessions whose record was written in the last `within` seconds, the most recent
    first: session (its id), agent, workspace, started, seen (epoch seconds), state
    (working, stopped, waiting, or None), since (epoch seconds, or None), note (what a
    notification said), on ([state file, unit or None], or None)."""
    import json
    import time

    from storyd.api.sessions import record_path, state
    from storyd.core.regular import read_regular

    folder = os.path.dirname(record_path("x"))
    now = time.time() if now is None else now
    found = []
    try:
        entries = [e for e in os.scandir(folder) if e.name.endswith(".json") and e.is_file()]
    except OSError:
        return []
    for entry in entries:
        try:
            seen = entry.stat().st_mtime
            if now - seen > within:
                continue
            # a record swapped for a FIFO or a device since the scan: unreadable at once
            record = json.loads(read_regular(entry.path, _MAX_BYTES))
        except (OSError, ValueError, RecursionError):
            continue
        if not isinstance(record, dict) or not isinstance(record.get("session"), str):
            continue
        agent = record.get("agent")
        found.append({
            "session": record["session"], "workspace": str(record.get("workspace")),
            "agent": agent if isinstance(agent, str) else None,
            "started": record.get("started") if isinstance(record.get("started"), float) else None,
            "seen": seen, "state": state(record),
            "since": record.get("at") if isinstance(record.get("at"), float) else None,
            "note": record.get("note") if isinstance(record.get("note"), str) else None,
            "on": _on(record.get("on")),
        })  # fmt: skip
    found.sort(key=lambda r: -float(r["seen"]))
    return found



def _on(value: object) -> list[str | None] | None:
    """A record's `on`, checked: [state file, unit or None], or None."""
    if not isinstance(value, list) or len(value) != 2 or not isinstance(value[0], str):
        return None
    return [value[0], value[1] if isinstance(value[1], str) else None]
