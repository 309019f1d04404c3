"""history_marks.parse reads a marks body as json did (history_store.save_marks writes it
with json.dumps), with storyd's own scanner: the same marks and lineage for any body."""

from __future__ import annotations

import json
import sqlite3

from hypothesis import given, settings
from hypothesis import strategies as st

from storyd.api import history_marks, history_store
from storyd.api.history_db import SCHEMA

_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_MARK = st.tuples(_TEXT, st.none() | _TEXT, st.none() | _TEXT,
                  st.floats(allow_nan=False, allow_infinity=False) | st.integers(0, 2**40))
_STAMP = st.tuples(st.integers(0, 2**63), st.integers(0, 2**63), st.integers(0, 2**63),
                   st.integers(0, 2**63), _TEXT, _TEXT)


def _as_json_read(body: str) -> tuple[dict[str, object], object]:
    """What the parse was before history_marks: json.loads, then the same shaping."""
    raw = json.loads(body)
    found = raw.pop(history_marks.LINEAGE, None)
    stamp = tuple(found) if isinstance(found, list) and len(found) == 6 else None
    return {k: tuple(v) for k, v in raw.items()}, stamp


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_TEXT.filter(lambda k: k != history_marks.LINEAGE), _MARK, max_size=8),
       st.none() | _STAMP)
def test_parse_reads_what_json_read(marks: dict[str, tuple[object, ...]],
                                    stamp: tuple[object, ...] | None) -> None:
    conn = sqlite3.connect(":memory:")
    conn.executescript(SCHEMA)
    conn.execute("INSERT INTO units(workspace, state_file, unit, format) VALUES ('w','s','u','e')")
    history_store.save_marks(conn, 1, marks, stamp)  # type: ignore[arg-type]
    (body,) = conn.execute("SELECT body FROM marks").fetchone()
    got = history_marks.parse(body)
    assert got == _as_json_read(body)
    assert history_marks.lineage_of(conn, ("w", "s", "u")) == got
    assert history_marks.file_marks(conn, "w", "s") == {"u": got[0]}


def test_a_body_json_alone_reads_is_still_read() -> None:
    """NaN is json's, not JSON's: a body written with one is read as json reads it."""
    body = '{"T1": ["DONE", null, null, NaN]}'
    marks, stamp = history_marks.parse(body)
    assert stamp is None and list(marks) == ["T1"] and marks["T1"][3] != marks["T1"][3]


def test_a_version_counts_progress_as_the_summary_does() -> None:
    """An open optional task (Kiro's `[ ]*`, status `optional`) is not in a version's
    total, as the summary `status` shows leaves it out (`storyd history` said 2/4 beside
    the summary's 2/3)."""
    conn = sqlite3.connect(":memory:")
    conn.executescript(SCHEMA)
    uid = history_store.unit_id(conn, ("w", "tasks.md", "spec"), "kiro")
    rows = [("1", "done", "done", None, None), ("2", "done", "done", None, None),
            ("3", "pending", "pending", None, None), ("4", "optional", "pending", None, None)]
    history_store.record(conn, uid, 1.0, "x:1", "daemon", "changed", rows)
    [version] = history_store.versions(conn, ("w", "tasks.md", "spec"))
    assert (version["done"], version["total"]) == (2, 3)
