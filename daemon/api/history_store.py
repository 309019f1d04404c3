"""Rows in and out of the history database (history_db.py): the writer's inserts, marks
and pruning, and the versions' queries. Plain functions over a connection. The marks'
reads, which the commands without a daemon make, are history_marks.py's.

A version's tasks are ids of `tasks` rows packed as unsigned 32-bit integers: a task
state that many versions share (a DONE task stays DONE) is stored once per unit.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from array import array
from collections.abc import Callable

from storyd.api.history_marks import LINEAGE, Key
from storyd.api.history_rules import Mark, Row, changes

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.api.history_lineage import Stamp

__all__ = [
    "Key",
    "prune",
    "record",
    "save_marks",
    "size",
    "unit_id",
    "versions",
]

# json.dumps with separators builds an encoder a call (12 of a version's 41 us); the
# bodies must stay byte for byte what it gives (their hashes are in the database)
_compact = json.JSONEncoder(separators=(",", ":")).encode


def _hash(text: str) -> int:
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def unit_id(conn: sqlite3.Connection, key: Key, fmt: str) -> int:
    """The unit's row id, made when new."""
    row = conn.execute(
        "SELECT id FROM units WHERE workspace=? AND state_file=? AND unit=?", key
    ).fetchone()
    if row is not None:
        return int(row[0])
    cur = conn.execute(
        "INSERT INTO units(workspace, state_file, unit, format) VALUES (?,?,?,?)", (*key, fmt)
    )
    return int(cur.lastrowid or 0)


def _envelope_id(conn: sqlite3.Connection, body: str) -> int:
    """The id of `body` in `envelopes`, stored when new."""
    digest = _hash(body)
    found = conn.execute("SELECT id FROM envelopes WHERE hash=?", (digest,)).fetchone()
    if found is not None:
        return int(found[0])
    cur = conn.execute("INSERT INTO envelopes(hash, body) VALUES (?,?)", (digest, body))
    return int(cur.lastrowid or 0)


_CHUNK = 500  # hashes asked at once (SQLite's bound on a statement's variables)


def _task_ids(conn: sqlite3.Connection, uid: int, rows: list[Row]) -> bytes:
    """The rows' ids in `tasks` (the unit's), stored when new, packed: one look-up for
    a version's tasks, not one per task (the writer's cost at a 10,000-unit warm-up)."""
    bodies = [_compact(r) for r in rows]
    hashes = [_hash(b) for b in bodies]
    known: dict[int, int] = {}
    for at in range(0, len(hashes), _CHUNK):
        part = hashes[at : at + _CHUNK]
        marks = ",".join("?" * len(part))
        known.update(conn.execute(f"SELECT hash, id FROM tasks WHERE unit_id=? AND hash IN"
                                  f" ({marks})", (uid, *part)))  # fmt: skip
    ids = array("I")
    for body, digest in zip(bodies, hashes, strict=True):
        found = known.get(digest)
        if found is None:
            cur = conn.execute("INSERT INTO tasks(unit_id, hash, body) VALUES (?,?,?)",
                               (uid, digest, body))  # fmt: skip
            found = known[digest] = int(cur.lastrowid or 0)
        ids.append(found)
    return ids.tobytes()


def record(
    conn: sqlite3.Connection,
    uid: int,
    at: float,
    clock: str,
    source: str,
    kind: str,
    rows: list[Row] | None,
    envelope: str | Callable[[], str] = "",
    *,
    again: bool = True,
) -> int:
    """Insert one version (None rows: the unit was removed); its id. Without `again`, a
    version whose tasks and kind are the unit's newest's (a restart's look at an
    unchanged unit, a change of findings alone) is not stored, and 0 is returned.
    `envelope` may be a function: it is called only for a version that is stored."""
    packed = None
    done = total = 0
    if rows is not None:
        packed = _task_ids(conn, uid, rows)
        done = sum(1 for r in rows if r[2] == "done")
        # an open optional task (Kiro's `[ ]*`) is not counted against progress, as the
        # summaries count it (api/summaries.py `counted`; a row holds its status alone)
        total = len(rows) - sum(1 for r in rows if r[1] == "optional" and r[2] != "done")
    if not again:
        newest = conn.execute("SELECT tasks, kind FROM versions WHERE unit_id=?"
                              " ORDER BY id DESC LIMIT 1", (uid,)).fetchone()  # fmt: skip
        if newest == (packed, kind):
            return 0
    if callable(envelope):
        envelope = envelope()
    env = _envelope_id(conn, envelope) if envelope else None
    cur = conn.execute(
        "INSERT INTO versions(unit_id, at, clock, source, kind, done, total, tasks, envelope)"
        " VALUES (?,?,?,?,?,?,?,?,?)",
        (uid, at, clock, source, kind, done, total, packed, env),
    )
    return int(cur.lastrowid or 0)


def save_marks(
    conn: sqlite3.Connection, uid: int, marks: dict[str, Mark], stamp: Stamp | None = None
) -> None:
    """Replace a unit's held progress (and the lineage it belongs to, when known)."""
    body: dict[str, object] = dict(marks)
    if stamp is not None:
        body[LINEAGE] = stamp
    conn.execute("INSERT OR REPLACE INTO marks(unit_id, body) VALUES (?,?)",
                 (uid, json.dumps(body)))  # fmt: skip


def size(conn: sqlite3.Connection) -> int:
    """Bytes the database's pages hold (free pages not counted)."""
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    return (int(pages) - int(free)) * int(conn.execute("PRAGMA page_size").fetchone()[0])


def prune(
    conn: sqlite3.Connection, per_unit: int, before: float, max_bytes: int, batch: int = 5000
) -> int:
    """Drop versions beyond `per_unit` per unit and older than `before` (epoch seconds),
    then the oldest until the database fits `max_bytes`; a unit's newest version always
    stays. Task states no version holds any more go too. How many versions were dropped."""
    touched: set[int] = set()
    gone = conn.execute(
        "DELETE FROM versions WHERE id IN (SELECT id FROM (SELECT id, ROW_NUMBER() OVER"
        " (PARTITION BY unit_id ORDER BY id DESC) AS n, at FROM versions)"
        " WHERE n > ? OR (n > 1 AND at < ?)) RETURNING unit_id",
        (per_unit, before),
    ).fetchall()
    touched.update(r[0] for r in gone)
    dropped = len(gone)
    while size(conn) > max_bytes:
        _drop_tasks(conn, touched)
        touched.clear()
        if size(conn) <= max_bytes:
            break
        more = conn.execute(
            "DELETE FROM versions WHERE id IN (SELECT id FROM versions v WHERE id <"
            " (SELECT MAX(id) FROM versions w WHERE w.unit_id = v.unit_id)"
            " ORDER BY id LIMIT ?) RETURNING unit_id", (batch,)
        ).fetchall()  # fmt: skip
        if not more:
            break
        touched.update(r[0] for r in more)
        dropped += len(more)
    _drop_tasks(conn, touched)
    return dropped


def _drop_tasks(conn: sqlite3.Connection, units: set[int]) -> None:
    """The task states of `units` that none of their versions holds any more."""
    for uid in units:
        held: set[int] = set()
        for (packed,) in conn.execute(
            "SELECT tasks FROM versions WHERE unit_id=? AND tasks IS NOT NULL", (uid,)
        ):
            held.update(array("I", packed))
        ids = [r[0] for r in conn.execute("SELECT id FROM tasks WHERE unit_id=?", (uid,))]
        stale = [(i,) for i in ids if i not in held]
        conn.executemany("DELETE FROM tasks WHERE id=?", stale)
    conn.execute("DELETE FROM envelopes WHERE id NOT IN (SELECT envelope FROM versions"
                 " WHERE envelope IS NOT NULL)")  # fmt: skip


def versions(
    conn: sqlite3.Connection, key: Key, since: float = 0.0
) -> list[dict[str, object]]:
    """A unit's versions from `since` on, oldest first, each with its tasks and what
    changed from the version before it (kept or not: the first listed is compared too)."""
    row = conn.execute(
        "SELECT id FROM units WHERE workspace=? AND state_file=? AND unit=?", key
    ).fetchone()
    if row is None:
        return []
    uid = row[0]
    states = {i: tuple(json.loads(b)) for i, b in
              conn.execute("SELECT id, body FROM tasks WHERE unit_id=?", (uid,))}  # fmt: skip
    out: list[dict[str, object]] = []
    before: list[Row] | None = None
    first = True
    for vid, at, clock, source, kind, done, total, packed, envelope in conn.execute(
        "SELECT v.id, v.at, v.clock, v.source, v.kind, v.done, v.total, v.tasks, e.body"
        " FROM versions v LEFT JOIN envelopes e ON e.id = v.envelope"
        " WHERE v.unit_id=? ORDER BY v.id", (uid,)
    ):  # fmt: skip
        rows = [states[i] for i in array("I", packed)] if packed is not None else None
        if at >= since:
            said = ["accepted as it is"] if kind == "accepted" else (
                changes(None if first else before, rows))
            out.append({
                "version": vid, "at": at, "clock": clock, "source": source, "kind": kind,
                "done": done, "total": total, "changes": said,
                "tasks": [list(r) for r in rows] if rows is not None else None,
                "envelope": json.loads(envelope) if envelope else None,
            })  # fmt: skip
        before, first = rows, False
    return out
