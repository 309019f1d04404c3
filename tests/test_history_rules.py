"""Issue 33's rules on their own: what changed between versions, what a version lost,
the marks moving forward, and pruning within [history]'s bounds (a real SQLite file)."""

from __future__ import annotations

import json
from pathlib import Path

from storyd.api import history_db, history_rules, history_store
from storyd.core.model import DONE, PENDING, Task, Unit

A, B = "a" * 40, "b" * 40


def _unit(*tasks: tuple[str, str, str | None]) -> Unit:
    made = tuple(Task(tid, status, DONE if status == "DONE" else PENDING, commit_sha=sha)
                 for tid, status, sha in tasks)  # fmt: skip
    return Unit("epic", "plans/epic-0001/execution-state.json", "story-0001-0001", made)


def test_changes_are_worded_task_by_task() -> None:
    before = history_rules.task_rows(_unit(("T1", "PENDING", None), ("T2", "DONE", A)).tasks)
    after = history_rules.task_rows(_unit(("T1", "DONE", B), ("T3", "PENDING", None)).tasks)
    assert history_rules.changes(before, after) == [
        f"T1 PENDING → DONE at {B[:12]}", "T3 added (PENDING)", "T2 removed"]  # fmt: skip
    assert history_rules.changes(after, None) == ["unit removed"]
    assert history_rules.changes(None, after) == [f"T1 DONE at {B[:12]}", "T3 PENDING"]


def test_lost_progress_and_the_marks_that_keep_it() -> None:
    held = _unit(("T1", "DONE", A), ("T2", "DONE", A), ("T3", "DONE", A))
    marks = history_rules.advance({}, held, 100.0, set())
    assert marks is not None and sorted(marks) == ["T1", "T2", "T3"]
    stale = _unit(("T1", "DONE", B), ("T2", "PENDING", None))
    on_branch = {A: True, B: True}
    lost = history_rules.lost(marks, stale, on_branch.__getitem__)
    assert [(tid, why) for tid, why, _ in lost] == [
        ("T1", "sha-replaced"), ("T2", "undone"), ("T3", "removed")]  # fmt: skip
    rewritten = history_rules.lost(marks, stale, lambda sha: False)  # A rebased away
    assert [tid for tid, _, _ in rewritten] == ["T2", "T3"]
    kept = history_rules.advance(marks, stale, 200.0, {"T1", "T2", "T3"})
    assert kept is None, "a lost task's mark stays as the version that had it"
    findings = history_rules.regressed_findings(lost, lambda t: f"t{t:g}")
    assert {f.code for f in findings} == {"regressed"}
    assert {f.severity for f in findings} == {"warning"}
    assert findings[1].evidence["seen"] == "t100" and findings[1].evidence["sha"] == A
    assert "T2 was DONE" in findings[1].message.replace("task ", "")


def test_pruning_keeps_the_bounds_and_every_units_newest(tmp_path: Path) -> None:
    writer = history_db.open_writer(str(tmp_path / "h.sqlite3"))
    conn = writer.conn
    try:
        conn.execute("BEGIN")
        for u in range(3):
            uid = history_store.unit_id(conn, ("/ws", "s.json", f"u{u}"), "epic")
            for n in range(50):
                rows = [("T1", "DONE" if n % 2 else "PENDING", "done" if n % 2 else "pending",
                         None, None)]  # fmt: skip
                history_store.record(conn, uid, 1000.0 + n, "", "daemon", "changed", rows,
                                     json.dumps({"n": n}))  # fmt: skip
        conn.execute("COMMIT")
        assert history_store.prune(conn, 10, 0.0, 1 << 30) == 3 * 40
        counts = conn.execute("SELECT COUNT(*) FROM versions GROUP BY unit_id").fetchall()
        assert counts == [(10,)] * 3
        assert history_store.prune(conn, 10, 1045.0, 1 << 30) == 3 * 5  # older than 1045
        assert history_store.prune(conn, 10, 0.0, 0) == 3 * 4  # no room: the newest stay
        assert conn.execute("SELECT COUNT(*) FROM versions").fetchone() == (3,)
        # the newest three hold one task state each, and share one envelope (n = 49)
        assert conn.execute("SELECT COUNT(*) FROM tasks").fetchone() == (3,)
        assert conn.execute("SELECT COUNT(*) FROM envelopes").fetchone() == (1,)
    finally:
        writer.close()
    assert (tmp_path / "h.sqlite3").stat().st_mode & 0o777 == 0o600


def test_the_history_table_is_checked_like_every_other(tmp_path: Path) -> None:
    import pytest

    from storyd import config
    from storyd.config import ConfigError

    good = tmp_path / "good.toml"
    good.write_text('[history]\nenabled = false\npath = "~/h.sqlite3"\nmax_versions = 5\n'
                    "max_age_days = 0\nmax_mb = 64\nprune_minutes = 1.5\n")  # fmt: skip
    history = config.load(str(good)).history
    assert history is not None and history.enabled is False
    assert history.path is not None and history.path.endswith("/h.sqlite3")
    assert "~" not in history.path
    assert (history.max_versions, history.max_age_days, history.max_mb) == (5, 0.0, 64)
    assert config.load(str(good)).as_dict()["history"]["prune_minutes"] == 1.5
    bad = tmp_path / "bad.toml"
    bad.write_text('[history]\nenabled = "yes"\nmax_versions = 0\nmax_mb = "big"\nkeep = 1\n')
    with pytest.raises(ConfigError) as raised:
        config.load(str(bad))
    fields = sorted(p.field for p in raised.value.problems)
    assert fields == ["history.enabled", "history.keep", "history.max_mb", "history.max_versions"]


def test_units_gone_with_their_progress() -> None:
    held = {"s1": {"T1": ("DONE", A, None, 5.0), "T2": ("DONE", B, None, 9.0)},
            "s2": {}, "s3": {"T1": ("done", None, None, 1.0)}}  # fmt: skip
    found = history_rules.gone_findings(held, frozenset({"s3"}), lambda t: f"t{t:g}")
    assert [f.evidence["unit"] for f in found] == ["s1"], "s2 held nothing, s3 is there"
    assert found[0].task is None and found[0].evidence["tasks"] == "2"
    assert found[0].evidence["seen"] == "t9" and found[0].code == "regressed"


def test_a_version_of_many_tasks_stores_each_task_state_once(tmp_path: Path) -> None:
    """Task states are looked up in chunks (SQLite bounds a statement's variables): a
    unit of 1,200 tasks, recorded twice, then with one task moved."""
    writer = history_db.open_writer(str(tmp_path / "h.sqlite3"))
    conn = writer.conn
    uid = history_store.unit_id(conn, ("/ws", "plans/x.json", "u"), "epic")
    tasks = [(f"T{n}", "PENDING", None) for n in range(1200)]
    rows = history_rules.task_rows(_unit(*tasks).tasks)
    first = history_store.record(conn, uid, 1.0, "", "daemon", "changed", rows)
    assert history_store.record(conn, uid, 2.0, "", "daemon", "changed", rows, again=False) == 0
    tasks[700] = ("T700", "DONE", A)
    moved = history_rules.task_rows(_unit(*tasks).tasks)
    asked: list[int] = []
    second = history_store.record(conn, uid, 3.0, "", "daemon", "changed", moved,
                                  lambda: asked.append(1) or '{"n":1}')  # fmt: skip
    assert second > first and asked == [1]
    assert conn.execute("SELECT COUNT(*) FROM tasks").fetchone()[0] == 1201
    found = history_store.versions(conn, ("/ws", "plans/x.json", "u"))
    assert [v["changes"] for v in found][1:] == [[f"T700 PENDING → DONE at {A[:12]}"]]
    assert found[1]["envelope"] == {"n": 1} and found[1]["done"] == 1
    writer.close()


def test_packed_marks_round_trip_and_know_an_unchanged_unit() -> None:
    unit = _unit(("T1", "DONE", A), ("T2", "PENDING", None), ("T3", "DONE", B))
    marks = history_rules.advance({}, unit, 5.0, set())
    assert marks is not None
    packed = history_rules.pack(marks, unit)
    assert history_rules.expand(packed) == marks and packed == (unit.tasks, 5.0, 5.0)
    assert history_rules.unchanged(packed, unit)
    assert history_rules.unchanged((), _unit(("T1", "PENDING", None)))
    # a re-read: equal progress, other strings; then a lost task, a new one, an order
    again = _unit(*(("".join(["T", n]), "".join(["DO", "NE"]) if d else "PENDING", s)
                    for n, d, s in (("1", 1, A), ("2", 0, None), ("3", 1, B))))  # fmt: skip
    assert not history_rules.unchanged(packed, again)
    assert not history_rules.unchanged(packed, _unit(("T1", "DONE", A)))
    grown = Unit("epic", unit.state_file, unit.key,
                 (*unit.tasks[:2], Task("T4", "DONE", DONE), unit.tasks[2]))  # fmt: skip
    assert not history_rules.unchanged(packed, grown)
    turned = Unit("epic", unit.state_file, unit.key, unit.tasks[::-1])
    assert not history_rules.unchanged(packed, turned)  # the marks repack in its order
    assert history_rules.unchanged(history_rules.pack(marks, turned), turned)
    kept = {**marks, "T9": ("DONE", A, None, 1.0)}  # a lost task's mark stays, last
    assert history_rules.expand(history_rules.pack(kept, unit)) == kept
    assert list(history_rules.expand(history_rules.pack(kept, unit))) == ["T1", "T3", "T9"]
    assert not history_rules.unchanged(history_rules.pack(kept, unit), unit)


def test_a_task_state_is_stored_as_json_dumps_gives_it(tmp_path: Path) -> None:
    """The bodies' hashes are in databases already written: the text must not change."""
    writer = history_db.open_writer(str(tmp_path / "h.sqlite3"))
    uid = history_store.unit_id(writer.conn, ("/ws", "plans/x.json", "u"), "epic")
    row = ("TÂCHE-1", "DONE", "done", A, "2026-11-25T10:00:00Z")
    history_store.record(writer.conn, uid, 1.0, "", "daemon", "changed", [row])
    body = writer.conn.execute("SELECT body FROM tasks").fetchone()[0]
    assert body == json.dumps(row, separators=(",", ":")) and "\\u00c2" in body
    writer.close()
