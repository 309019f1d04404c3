"""Accepting a unit's current version as it is: its `regressed` findings resolve.

`accept` asks the daemon that records when one answers (its marks are in memory), else
writes the history database itself under the writer's lock (history_db.py).
"""

from __future__ import annotations

import time

from storyd.api import history_db, history_marks, history_store
from storyd.api.history import Named
from storyd.core.errors import StorydError, StoryNotInState

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.core.model import Unit

__all__ = ["accept"]


def accept(named: Named, socket: str | None = None, path: str | None = None) -> str:
    """Accept the unit as it is now: the daemon that records forgets the progress it
    lost; with no daemon, the database's marks restart from its newest version. Says
    which of the two it did."""
    from storyd.api.client import Client, DaemonUnavailable

    try:
        with Client(socket, timeout=5.0) as client:
            answer = client.request(
                "history", workspace=named.workspace, stateFile=named.state_file,
                unit=named.unit, accept=True,
            )  # fmt: skip
    except DaemonUnavailable:
        return _accept_here(named, path)
    if not answer.get("ok"):
        error = answer.get("error")
        message = error.get("message") if isinstance(error, dict) else str(error)
        raise StorydError(f"the daemon refused: {message}")
    return "accepted by the daemon: its regressed findings resolve"


def _accept_here(named: Named, path: str | None) -> str:
    """No daemon: the unit as the state file holds it now (read under the writers'
    lock) becomes its held progress, and an `accepted` version is recorded."""
    from storyd.api import history_rules as rules
    from storyd.core.pipeline import Options, read_units
    from storyd.core.target import Target

    where = Target(named.state_file, named.unit, f"unit {named.unit!r} not in "
                   f"{named.state_file}", None)  # fmt: skip
    units = read_units(named.workspace, where.adapter, where.relpath, Options())
    try:
        unit: Unit | None = where.pick(units)
    except StoryNotInState:  # a unit gone from the file: its held progress is let go
        unit = None
    writer = history_db.open_writer(path or history_db.configured_or_default())
    try:
        conn = writer.conn
        now = time.time()
        if unit is None:
            if named.unit is None or not history_marks.marks_of(conn, named.key()):
                raise where.not_there()
            fmt, marks, rows = where.adapter.name, {}, None
        else:
            named = Named(named.workspace, named.state_file, unit.key)
            fmt, rows = unit.format, rules.task_rows(unit.tasks)
            marks = rules.advance({}, unit, now, set()) or {}
        conn.execute("BEGIN IMMEDIATE")
        uid = history_store.unit_id(conn, named.key(), fmt)
        history_store.save_marks(conn, uid, marks)
        history_store.record(conn, uid, now, "", "cli", "accepted", rows)
        conn.execute("COMMIT")
    finally:
        writer.close()
    return "accepted in the history database (no daemon answered)"
