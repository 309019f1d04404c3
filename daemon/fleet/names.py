"""One spelling of every name on the server (docs/fleet.md says why these).

KV bucket `storyd-units` (history 1: last value wins), keys `u.<machine>.<digest>` for
a unit and `m.<machine>` for a machine's heartbeat; stream `STORYD_EVENTS` on subjects
`storyd.events.<machine>.<event>`, de-duplicated by `Nats-Msg-Id` within its window.
"""

from __future__ import annotations

from hashlib import blake2b

__all__ = [
    "BUCKET",
    "DUPLICATE_WINDOW",
    "EVENTS_MAX_AGE",
    "HISTORY",
    "MSG_ID",
    "STREAM",
    "SUBJECTS",
    "event_subject",
    "machine_key",
    "unit_key",
]

BUCKET = "storyd-units"
HISTORY = 1
STREAM = "STORYD_EVENTS"
SUBJECTS = "storyd.events.>"
DUPLICATE_WINDOW = 3600.0  # seconds a message id is remembered (the default is 120)
EVENTS_MAX_AGE = 7 * 86400.0  # events older than a week are dropped by the server
MSG_ID = "Nats-Msg-Id"


def unit_key(machine: str, workspace: str, state_file: str, unit: str) -> str:
    """The KV key of one unit on one machine (a digest: paths hold any character)."""
    digest = blake2b(f"{workspace}\0{state_file}\0{unit}".encode(), digest_size=12).hexdigest()
    return f"u.{machine}.{digest}"


def machine_key(machine: str) -> str:
    """The KV key of a machine's heartbeat."""
    return f"m.{machine}"


def event_subject(machine: str, kind: str) -> str:
    """The stream subject of one event."""
    return f"storyd.events.{machine}.{kind}"
