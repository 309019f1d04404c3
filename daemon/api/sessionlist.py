"""The agents' sessions storyd knows of: the hooks' per-session records (issue 30,
daemon/api/sessions.py), listed for `storyd top`. A record names its workspace, its
agent (records made before issue 34 do not), when the session began and when a hook
last wrote it (the file's mtime): a session whose hooks run often is recent."""

from __future__ import annotations

import os

__all__ = ["sessions_in_flight"]

_MAX_BYTES = 1 << 20


def sessions_in_flight(
    within: float = 86400.0, now: float | None = None
) -> list[dict[str, object]]:
    """Sessions whose record was written in the last `within` seconds, the most recent
    first: session (its id), agent, workspace, started, seen (epoch seconds)."""
    import json
    import time

    from storyd.api.sessions import record_path

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
            with open(entry.path, "rb") as handle:
                data = handle.read(_MAX_BYTES + 1)
            record = json.loads(data) if len(data) <= _MAX_BYTES else None
        except (OSError, ValueError, RecursionError):
            continue
        if not isinstance(record, dict) or not isinstance(record.get("session"), str):
            continue
        agent = record.get("agent")
        found.append({
            "session": record["session"], "workspace": str(record.get("workspace")),
            "agent": agent if isinstance(agent, str) else None,
            "started": record.get("started") if isinstance(record.get("started"), float) else None,
            "seen": seen,
        })  # fmt: skip
    found.sort(key=lambda r: -float(r["seen"]))
    return found

