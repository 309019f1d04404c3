"""Rows in and out of the history database (history_db.py): the writer's inserts,
marks and pruning, and the readers' queries. Plain functions over a connection."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import zlib
from collections.abc import Iterator

from storyd.api.history_rules import Mark, Row

__all__ = [
    "Key",
    "blob_of",
    "last_rows",
    "load_marks",
    "marks_of",
    "prune",
    "record",
    "save_marks",
    "size",
    "unit_id",
    "versions",
]

Key = tuple[str, str, str]
"""(workspace, state file, unit key)."""


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


def record(
    conn: sqlite3.Connection,
    uid: int,
    at: float,
    clock: str,
    source: str,
    kind: str,
    rows: list[Row] | None,
    envelope: str,
    changes: list[str],
) -> int:
    """Insert one version (its blob deduplicated by hash); its id."""
    digest = None
    done = total = 0
    if rows is not None:
        body = json.dumps({"envelope": envelope, "tasks": rows}, separators=(",", ":")).encode()
        digest = hashlib.blake2b(body, digest_size=16).digest()
        conn.execute("INSERT OR IGNORE INTO blobs(hash, body) VALUES (?,?)",
                     (digest, zlib.compress(body, 6)))  # fmt: skip
        total = len(rows)
        done = sum(1 for r in rows if r[2] == "done")
    cur = conn.execute(
        "INSERT INTO versions(unit_id, at, clock, source, kind, done, total, blob, changes)"
        " VALUES (?,?,?,?,?,?,?,?,?)",
        (uid, at, clock, source, kind, done, total, digest, json.dumps(changes)),
    )
    return int(cur.lastrowid or 0)


def blob_of(conn: sqlite3.Connection, digest: bytes | None) -> dict[str, object] | None:
    """A version's envelope and tasks, or None (a removal)."""
    if digest is None:
        return None
    row = conn.execute("SELECT body FROM blobs WHERE hash=?", (digest,)).fetchone()
    return json.loads(zlib.decompress(row[0])) if row else None


def last_rows(conn: sqlite3.Connection, uid: int) -> list[Row] | None:
    """The tasks of the unit's newest version (None: none, or removed)."""
    row = conn.execute(
        "SELECT blob FROM versions WHERE unit_id=? ORDER BY id DESC LIMIT 1", (uid,)
    ).fetchone()
    body = blob_of(conn, row[0]) if row else None
    return [tuple(r) for r in body["tasks"]] if body else None  # type: ignore[misc, union-attr]


def save_marks(conn: sqlite3.Connection, uid: int, marks: dict[str, Mark]) -> None:
    """Replace a unit's held progress."""
    conn.execute("INSERT OR REPLACE INTO marks(unit_id, body) VALUES (?,?)",
                 (uid, json.dumps(marks)))  # fmt: skip


def load_marks(conn: sqlite3.Connection) -> Iterator[tuple[Key, int, dict[str, Mark]]]:
    """Every unit's held progress, with its row id."""
    query = ("SELECT u.workspace, u.state_file, u.unit, u.id, m.body FROM marks m"
             " JOIN units u ON u.id = m.unit_id")  # fmt: skip
    for ws, sf, unit, uid, body in conn.execute(query):
        yield (ws, sf, unit), uid, {k: tuple(v) for k, v in json.loads(body).items()}


def marks_of(conn: sqlite3.Connection, key: Key) -> dict[str, Mark]:
    """One unit's held progress (empty when unknown)."""
    row = conn.execute(
        "SELECT m.body FROM marks m JOIN units u ON u.id = m.unit_id"
        " WHERE u.workspace=? AND u.state_file=? AND u.unit=?", key
    ).fetchone()  # fmt: skip
    return {k: tuple(v) for k, v in json.loads(row[0]).items()} if row else {}  # type: ignore[misc]


def size(conn: sqlite3.Connection) -> int:
    """Bytes the database's pages take."""
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    return int(pages) * int(conn.execute("PRAGMA page_size").fetchone()[0])


def prune(
    conn: sqlite3.Connection, per_unit: int, before: float, max_bytes: int, batch: int = 5000
) -> int:
    """Drop versions beyond `per_unit` per unit and older than `before` (epoch seconds),
    then the oldest until the database fits `max_bytes`; a unit's newest version always
    stays. Unreferenced blobs go too. How many versions were dropped."""
    dropped = conn.execute(
        "DELETE FROM versions WHERE id IN (SELECT id FROM (SELECT id, ROW_NUMBER() OVER"
        " (PARTITION BY unit_id ORDER BY id DESC) AS n, at FROM versions)"
        " WHERE n > ? OR (n > 1 AND at < ?))",
        (per_unit, before),
    ).rowcount
    while size(conn) - _free(conn) > max_bytes:
        gone = conn.execute(
            "DELETE FROM versions WHERE id IN (SELECT id FROM versions v WHERE id <"
            " (SELECT MAX(id) FROM versions w WHERE w.unit_id = v.unit_id)"
            " ORDER BY id LIMIT ?)", (batch,)
        ).rowcount  # fmt: skip
        _drop_blobs(conn)
        dropped += gone
        if gone == 0:
            break
    _drop_blobs(conn)
    return dropped


def _free(conn: sqlite3.Connection) -> int:
    pages = conn.execute("PRAGMA freelist_count").fetchone()[0]
    return int(pages) * int(conn.execute("PRAGMA page_size").fetchone()[0])


def _drop_blobs(conn: sqlite3.Connection) -> None:
    conn.execute("DELETE FROM blobs WHERE hash NOT IN (SELECT blob FROM versions"
                 " WHERE blob IS NOT NULL)")  # fmt: skip


def versions(conn: sqlite3.Connection, key: Key, since: float = 0.0) -> list[dict[str, object]]:
    """A unit's versions, oldest first, each with what changed and its tasks."""
    row = conn.execute(
        "SELECT id, format FROM units WHERE workspace=? AND state_file=? AND unit=?", key
    ).fetchone()
    if row is None:
        return []
    out = []
    for vid, at, clock, source, kind, done, total, digest, changes in conn.execute(
        "SELECT id, at, clock, source, kind, done, total, blob, changes FROM versions"
        " WHERE unit_id=? AND at >= ? ORDER BY id", (row[0], since)
    ):  # fmt: skip
        body = blob_of(conn, digest) or {}
        out.append({
            "version": vid, "at": at, "clock": clock, "source": source, "kind": kind,
            "done": done, "total": total, "changes": json.loads(changes),
            "tasks": body.get("tasks"), "envelope": body.get("envelope"),
        })  # fmt: skip
    return out
