"""The Task Master and beads formats, on fixtures written here: tags and the current tag,
find-next-task's order, dependencies never satisfied, two task files, the lookalike;
bd ready's rules, tombstones, invented statuses, torn lines and large files."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from format_harness import codes, direct_envelope, load_one

from storyd.api.answers import Options, resume_unit
from storyd.core.errors import DataError, UsageError
from storyd.core.formats import builtin

TM = ".taskmaster/tasks/tasks.json"
LEGACY = "tasks/tasks.json"
BEADS = ".beads/issues.jsonl"


def _json(ws: Path, relpath: str, value: object) -> None:
    path = ws / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2))


def _task(ident: object, status: str, deps: list[object] | None = None, priority: str = "medium",
          subtasks: list[dict[str, object]] | None = None) -> dict[str, object]:
    return {"id": ident, "title": f"task {ident}", "status": status, "priority": priority,
            "dependencies": deps or [], "subtasks": subtasks or []}


def _units(ws: Path, relpath: str = TM) -> dict[str, object]:
    return {u.key: u for u in builtin("task-master").load(
        __import__("storyd.core.formats.base", fromlist=["Source"]).Source(str(ws)), relpath)}


def test_task_master_tags_current_tag_and_no_unit_answers_the_current(tmp_path: Path) -> None:
    _json(tmp_path, TM, {
        "master": {"tasks": [_task(1, "done")], "metadata": {}},
        "loop": {"tasks": [_task(1, "done"), _task("2", "pending", ["1"])]},
    })
    _json(tmp_path, ".taskmaster/state.json", {"currentTag": "loop"})
    units = _units(tmp_path)
    assert set(units) == {"master", "loop"}
    assert units["loop"].labels["current"] == "yes"  # type: ignore[attr-defined]
    answer = resume_unit(str(tmp_path), TM, None, Options())
    assert answer.unit.key == "loop"
    assert answer.envelope["resumePoint"] == "task-2"
    assert resume_unit(str(tmp_path), TM, "master", Options()).envelope["resumePoint"] == "all-done"


def test_task_master_next_subtasks_of_in_progress_parents_first(tmp_path: Path) -> None:
    _json(tmp_path, TM, {"tasks": [
        _task(1, "done"),
        _task(2, "pending", [1], priority="high"),
        _task(3, "in-progress", [1], subtasks=[
            {"id": 1, "status": "done", "dependencies": []},
            {"id": 2, "status": "pending", "dependencies": [1]},
            {"id": 3, "status": "pending", "dependencies": ["3.2"]},
        ]),
    ], "meta": {"projectName": "x"}})
    unit = _units(tmp_path)["master"]
    assert unit.next["task"] == "3.2"  # type: ignore[attr-defined]
    assert [t.id for t in unit.tasks] == ["1", "2", "3", "3.1", "3.2", "3.3"]  # type: ignore[attr-defined]


def test_task_master_priority_then_fewer_dependencies_then_id(tmp_path: Path) -> None:
    _json(tmp_path, TM, {"tasks": [
        _task(1, "done"), _task(2, "done"),
        _task(5, "pending", [1, 2]), _task(4, "pending", [1]), _task(3, "pending", [1]),
        _task(6, "pending", [1, 2], priority="critical"), _task(7, "pending", [9], "critical"),
    ]})
    assert _units(tmp_path)["master"].next["task"] == "6"  # type: ignore[attr-defined]
    _json(tmp_path, TM, {"tasks": [
        _task(1, "done"), _task(2, "done"),
        _task(5, "pending", [1, 2]), _task(4, "pending", [1]), _task(3, "pending", [1]),
    ]})
    unit = _units(tmp_path)["master"]
    assert unit.next["task"] == "3"  # type: ignore[attr-defined]
    assert unit.next["ready"] == ["3", "4", "5"]  # type: ignore[attr-defined]  # its view


def test_task_master_cancelled_and_deferred_dependencies_never_satisfied(tmp_path: Path) -> None:
    _json(tmp_path, TM, {"tasks": [
        _task(1, "cancelled"), _task(2, "deferred"),
        _task(3, "pending", [1]), _task(4, "pending", ["2"]),
    ]})
    unit = _units(tmp_path)["master"]
    assert unit.next is None  # type: ignore[attr-defined]
    assert unit.resume_point == "blocked"  # type: ignore[attr-defined]
    assert codes(unit) == ["cancelled-dependency", "cancelled-dependency", "no-next-task"]  # type: ignore[arg-type]
    _json(tmp_path, TM, {"tasks": [_task(1, "done"), _task(2, "deferred"), _task(3, "blocked")]})
    unit = _units(tmp_path)["master"]
    assert unit.resume_point == "blocked"  # type: ignore[attr-defined]
    assert [f.message for f in unit.findings] == [  # type: ignore[attr-defined]
        "no task is ready: the open tasks are blocked, deferred, none pending or in progress"]


def test_task_master_two_files_that_disagree(tmp_path: Path) -> None:
    _json(tmp_path, TM, {"master": {"tasks": [_task(1, "done"), _task(2, "done")]}})
    _json(tmp_path, LEGACY, {"tasks": [_task(1, "done"), _task(2, "pending")]})
    assert "task-files-disagree" in codes(_units(tmp_path)["master"])  # type: ignore[arg-type]
    assert "task-files-disagree" in codes(_units(tmp_path, LEGACY)["master"])  # type: ignore[arg-type]


def test_task_master_lookalike_and_non_task_master_json_are_refused(tmp_path: Path) -> None:
    _json(tmp_path, LEGACY, {"version": "1.0", "tasks": [
        {"id": "TASK-001", "status": "completed", "completed": True},
        {"id": "TASK-002", "status": "todo", "completed": False}]})
    with pytest.raises(DataError, match=r"not a Task Master tasks file.*TASK-001"):
        resume_unit(str(tmp_path), LEGACY, None, Options())
    _json(tmp_path, LEGACY, {"name": "x", "items": []})
    with pytest.raises(DataError, match="no `tasks` array"):
        resume_unit(str(tmp_path), LEGACY, None, Options())
    _json(tmp_path, LEGACY, {"a": {"tasks": []}, "b": {"tasks": []}})  # master absent: first
    assert resume_unit(str(tmp_path), LEGACY, None, Options()).unit.key == "a"
    with pytest.raises(UsageError, match="holds 2 units"):  # a format with no current unit
        from storyd.core.model import Unit
        from storyd.core.target import for_state_file

        for_state_file(str(tmp_path), LEGACY, None).pick([Unit("x", LEGACY, "a", ()),
                                                          Unit("x", LEGACY, "b", ())])


def test_task_master_string_ids_mixed_dependencies_and_statuses(tmp_path: Path) -> None:
    _json(tmp_path, TM, {"master": {"tasks": [
        _task("1", "completed"), _task("2", "review"),
        _task("3", "pending", [1, "2"]), _task("4", "pending", ["1"]),
        _task("5", "bogus"),
    ]}})
    unit = _units(tmp_path)["master"]
    assert unit.next["task"] == "4"  # type: ignore[attr-defined]  # 3 waits on review
    assert codes(unit) == ["unknown-status"]  # type: ignore[arg-type]
    assert direct_envelope(tmp_path, TM)["tasksCompleted"] == [{"id": "1", "commitSha": None}]


def _issue(ident: str, status: str = "open", priority: int = 2,
           created: str = "2026-01-01T00:00:00Z", **more: object) -> str:
    return json.dumps({"id": ident, "title": ident, "status": status, "priority": priority,
                       "created_at": created, **more})


def _blocks(child: str, on: str, kind: str = "blocks") -> dict[str, str]:
    return {"issue_id": child, "depends_on_id": on, "type": kind}


def _beads(ws: Path, *lines: str) -> None:
    path = ws / BEADS
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def test_beads_ready_work_as_bd_ready_decides(tmp_path: Path) -> None:
    future = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 86400))
    _beads(
        tmp_path,
        _issue("bd-1", "closed"),
        _issue("bd-10", "open", 0, dependencies=[_blocks("bd-10", "bd-2")]),  # blocked
        _issue("bd-2", "open", 1),
        _issue("bd-3", "open", 1, created="2026-02-01T00:00:00Z"),  # newer: first
        _issue("bd-4", "open", 0, defer_until=future),  # deferred
        _issue("bd-5", "open", 0, dependencies=[_blocks("bd-5", "bd-1")]),  # blocker closed
        _issue("bd-6", "open", 0, dependencies=[_blocks("bd-6", "bd-10", "parent-child")]),
        _issue("bd-7", "tombstone"),
        _issue("bd-8", "in_progress", 0),
    )
    unit = load_one(builtin("beads"), tmp_path, BEADS)
    assert unit.next is not None and unit.next["task"] == "bd-5"
    assert unit.labels["ready"] == "3"
    assert unit.next["ready"] == ["bd-5", "bd-3", "bd-2"]  # bd ready's view, in its order
    assert "bd-7" not in [t.id for t in unit.tasks]
    assert unit.resume_point == "task-bd-5"
    _beads(tmp_path, _issue("bd-5", "closed"), _issue("bd-2", "open", 1),
           _issue("bd-3", "open", 1, created="2026-02-01T00:00:00Z"))
    assert load_one(builtin("beads"), tmp_path, BEADS).next["task"] == "bd-3"  # type: ignore[index]


def test_beads_invented_statuses_torn_lines_and_all_done(tmp_path: Path) -> None:
    _beads(tmp_path, _issue("x-1", "done"), '{"id": "x-2", "status": "clo', _issue("x-3", "frozen"),
           "[1, 2]", _issue("x-4", "closed"))
    unit = load_one(builtin("beads"), tmp_path, BEADS)
    assert codes(unit) == ["no-next-task", "torn-line", "unknown-status", "unknown-status"]
    torn = next(f for f in unit.findings if f.code == "torn-line")
    assert torn.evidence["lines"] == "2,4"
    _beads(tmp_path, _issue("x-1", "closed"), _issue("x-2", "tombstone"))
    assert direct_envelope(tmp_path, BEADS)["resumePoint"] == "all-done"


@pytest.mark.slow
def test_several_megabyte_files_answer_in_time(tmp_path: Path) -> None:
    """A 3 MB issues.jsonl and a 3 MB tagged tasks.json (9 tags) read in well under a second."""
    pad = "x" * 400
    _beads(tmp_path, *(_issue(f"bd-{n}", "closed" if n % 3 else "open", n % 5, description=pad)
                       for n in range(6000)))
    assert (tmp_path / BEADS).stat().st_size > 2_500_000
    started = time.perf_counter()
    unit = load_one(builtin("beads"), tmp_path, BEADS)
    assert time.perf_counter() - started < 2.0
    assert len(unit.tasks) == 6000 and unit.next is not None
    tags = {f"tag{t}": {"tasks": [_task(n, "done" if n < 150 else "pending", [n - 1] if n else [],
                                        subtasks=[{"id": 1, "status": "pending", "details": pad}])
                                  for n in range(200)]} for t in range(9)}
    _json(tmp_path, TM, tags)
    assert (tmp_path / TM).stat().st_size > 1_000_000
    started = time.perf_counter()
    units = _units(tmp_path)
    assert time.perf_counter() - started < 2.0
    assert len(units) == 9 and units["tag0"].next["task"] == "150"  # type: ignore[attr-defined]
