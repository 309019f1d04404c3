"""The held progress (marks) read from the history database: what `regressed` findings
are judged against, read by every command that answers without the daemon (`resume
--detail`, status, check, the hooks' direct reads, the early door) and by the daemon's
recorder at its start.

Kept apart from history_store.py, the writer's side, so that such a read imports
neither json (re), nor hashlib: a marks body is read by storyd's own C scanner
(storyd.core.jsonio), about 5 ms less on each of those commands.
"""

from __future__ import annotations

from collections.abc import Iterator

from storyd.core import jsonio

TYPE_CHECKING = False
if TYPE_CHECKING:
    import sqlite3

    from storyd.api.history_lineage import Stamp
    from storyd.api.history_rules import Mark

__all__ = ["LINEAGE", "Key", "file_marks", "lineage_of", "load_marks", "marks_of", "parse"]

Key = tuple[str, str, str]
"""(workspace, state file, unit key)."""

LINEAGE = "\x00lineage"  # the marks body's key of their lineage (no task id is this)


def parse(body: str) -> tuple[dict[str, Mark], Stamp | None]:
    """A marks body (json.dumps of a dict: history_store.save_marks): the marks, and
    their lineage (None: recorded before lineages)."""
    try:
        raw, end = jsonio.scan_value(body, 0)
        whole = end == len(body) and isinstance(raw, dict)
    except (StopIteration, ValueError, RecursionError):
        whole = False
    if not whole:  # never written so; json says what it makes of it
        import json

        raw = json.loads(body)
    found = raw.pop(LINEAGE, None)
    stamp = tuple(found) if isinstance(found, list) and len(found) == 6 else None
    return {k: tuple(v) for k, v in raw.items()}, stamp


def load_marks(
    conn: sqlite3.Connection,
) -> Iterator[tuple[Key, int, dict[str, Mark], Stamp | None]]:
    """Every unit's held progress, with its row id and its lineage."""
    query = ("SELECT u.workspace, u.state_file, u.unit, u.id, m.body FROM marks m"
             " JOIN units u ON u.id = m.unit_id")  # fmt: skip
    for ws, sf, unit, uid, body in conn.execute(query):
        yield (ws, sf, unit), uid, *parse(body)


def marks_of(conn: sqlite3.Connection, key: Key) -> dict[str, Mark]:
    """One unit's held progress (empty when unknown)."""
    return lineage_of(conn, key)[0]


def lineage_of(conn: sqlite3.Connection, key: Key) -> tuple[dict[str, Mark], Stamp | None]:
    """One unit's held progress and its lineage (empty and None when unknown)."""
    row = conn.execute(
        "SELECT m.body FROM marks m JOIN units u ON u.id = m.unit_id"
        " WHERE u.workspace=? AND u.state_file=? AND u.unit=?", key
    ).fetchone()  # fmt: skip
    return parse(row[0]) if row else ({}, None)


def file_marks(
    conn: sqlite3.Connection, workspace: str, state_file: str
) -> dict[str, dict[str, Mark]]:
    """The held progress of every unit of one state file, by unit key."""
    rows = conn.execute(
        "SELECT u.unit, m.body FROM marks m JOIN units u ON u.id = m.unit_id"
        " WHERE u.workspace=? AND u.state_file=?", (workspace, state_file)
    )  # fmt: skip
    return {unit: parse(body)[0] for unit, body in rows}
