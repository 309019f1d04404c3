"""Issue 33's memory gap: what the history recorder holds, walked object by object from
the recorder itself (gc's referents) with a real database file: no Unit, no event dict,
no string of a read the engine has let go, and one pass's tasks at most."""

from __future__ import annotations

import gc
import json
import sys
import types
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from storyd.api import history_db
from storyd.config.history import History
from storyd.core.model import DONE, PENDING, Task, Unit
from storyd.server.recorder import BACKLOG, BLOCK, Recorder

STATE = "plans/epic-0049/execution-state.json"
SHA = "a" * 40


def _read(key: str, done: int) -> Unit:
    """A unit as a fresh parse gives it: every string a new object (json.loads)."""
    nodes = json.loads(json.dumps(
        {f"{key}-T{n}": {"status": "DONE" if n < done else "PENDING", "sha": SHA}
         for n in range(3)}))  # fmt: skip
    tasks = tuple(
        Task(tid, node["status"], DONE if node["status"] == "DONE" else PENDING,
             commit_sha=node["sha"] if node["status"] == "DONE" else None)
        for tid, node in nodes.items())  # fmt: skip
    return Unit("epic", STATE, json.loads(json.dumps(key)), tasks)


def _held(recorder: Recorder) -> Iterator[object]:
    """Every object the recorder reaches, but its database, thread, log and config."""
    skip = {id(recorder.writer), id(recorder.worker), id(recorder.log), id(recorder.limits)}
    todo = [v for k, v in vars(recorder).items() if id(v) not in skip] if hasattr(
        recorder, "__dict__") else []  # fmt: skip
    seen: set[int] = set()
    while todo:
        obj = todo.pop()
        if id(obj) in seen or id(obj) in skip or isinstance(
            obj, (type, types.ModuleType, types.FunctionType, types.MethodType)
        ):
            continue
        seen.add(id(obj))
        yield obj
        todo.extend(gc.get_referents(obj))


def _event(key: str, clock: str) -> tuple[dict[str, object], bytes]:
    event = {"event": "changed", "clock": clock, "generation": 1, "workspace": "/ws",
             "stateFile": STATE, "unit": key, "format": "epic", "done": 1, "total": 3}
    return event, json.dumps(event).encode() + b"\n"


@pytest.fixture
def recorder(tmp_path: Path) -> Iterator[Recorder]:
    """A recorder whose writer thread is not started: what it queues stays queued."""
    made = Recorder(history_db.open_writer(str(tmp_path / "h.sqlite3")), History())
    yield made
    made.writer.close()


def test_a_queued_version_holds_no_unit_and_no_event_dict(recorder: Recorder) -> None:
    keys = [f"story-{n:04d}" for n in range(50)]
    units = [_read(k, 2) for k in keys]
    present = frozenset(keys)
    events = []
    for unit in units:
        assert recorder.regressed("/ws", unit, present) == ()
    for key in keys:
        event, line = _event(key, f"c:{key}")
        events.append(event)
        recorder(event, line)
    assert recorder.state()["queued"] == 50
    held = {id(o) for o in _held(recorder)}
    assert not held & {id(u) for u in units}, "a queued version holds its Unit"
    assert not held & {id(e) for e in events}, "a queued version holds the event's dict"
    assert {id(u.tasks) for u in units} <= held  # the engine's own tuple, no copy


def test_a_rebuild_with_no_event_pins_nothing_of_the_older_read(recorder: Recorder) -> None:
    keys = [f"story-{n:04d}" for n in range(200)]
    first = [_read(k, 2) for k in keys]
    for unit in first:
        recorder.regressed("/ws", unit, frozenset(keys))
    for key in keys:  # the first sight's events: marks and tasks go to the batch
        recorder(*_event(key, "c:1"))
    for _ in range(3):  # re-reads, same progress: no event, as the engine sends none
        again = [_read(k, 2) for k in keys]
        present = frozenset(keys)
        for unit in again:
            assert recorder.regressed("/ws", unit, present) == ()
    recorder._batch.clear()  # the writer took them (not started here)
    held = list(_held(recorder))
    ids = {id(o) for o in held}
    old = {id(s) for u in first for t in u.tasks for s in (t.id, t.commit_sha) if s}
    assert not ids & old, "the marks pin strings of a read the engine let go"
    assert not any(isinstance(o, Unit) for o in held)
    tasks = [o for o in held if isinstance(o, Task)]
    assert len(tasks) <= 3 * len(keys), "more than one pass's tasks are held"
    assert {id(t) for t in tasks} <= {id(t) for u in again for t in u.tasks}


def test_the_marks_still_find_a_stale_write_after_the_rereads(recorder: Recorder) -> None:
    key = "story-0001"
    recorder.regressed("/ws", _read(key, 3), frozenset([key]))
    for _ in range(2):
        assert recorder.regressed("/ws", _read(key, 3), frozenset([key])) == ()
    lost = recorder.regressed("/ws", _read(key, 1), frozenset([key]))
    assert [(f.code, f.task) for f in lost] == [
        ("regressed", f"{key}-T1"), ("regressed", f"{key}-T2")]  # fmt: skip
    assert all(f.evidence["why"] == "undone" for f in lost)


def test_a_pass_let_go_of_leaves_nothing_of_it_held(recorder: Recorder) -> None:
    """The installer's pass (its keys, the builds' tasks, the gone-units memo) is held
    only while the installer holds its keys: units with no event (the same answer)
    leave nothing behind, and the marks of a second share one `seen` float."""
    keys = [f"story-{n:04d}" for n in range(300)]
    units = [_read(k, 2 * (n % 2)) for n, k in enumerate(keys)]  # every other one finishes
    present = frozenset(keys)
    for unit in units:  # the same answer as before for all: no event comes
        recorder.regressed("/ws", unit, present)
    alive = weakref.ref(present)
    del present
    gc.collect()
    assert alive() is None, "the recorder keeps the installer's pass keys"
    held = list(_held(recorder))
    tasks = {id(o) for o in held if isinstance(o, Task)}
    assert not tasks & {id(t) for u in units[::2] for t in u.tasks}, "the pass's tasks are held"
    assert len(tasks) <= 3 * len(units[1::2])  # the marks': over their build's own tuple
    assert not any(isinstance(o, frozenset) and len(o) == len(keys) for o in held)
    seen = {id(p[-1]) for p in recorder.marks[("/ws", STATE)].values()}
    assert len(seen) <= 2, "a float per mark, not one per second"
    found = recorder.regressed("/ws", _read(keys[1], 0), frozenset(keys))
    assert [f.task for f in found] == [f"{keys[1]}-T0", f"{keys[1]}-T1"]


def test_a_units_marks_cost_a_pointer_a_finished_task(recorder: Recorder) -> None:
    """The marks of a unit whose finished tasks are as its build has them (nearly every
    unit) are its build's own tasks tuple and a seen time each: no copy of the status,
    sha and completedAt of every task (8,387 units at a warm-up: 1.2 MB -> 0.6 MB)."""
    keys = [f"story-{n:04d}" for n in range(100)]
    units = [_read(k, 3) for k in keys]
    present = frozenset(keys)
    for unit in units:
        recorder.regressed("/ws", unit, present)
    held = recorder.marks[("/ws", STATE)]
    per_unit = sum(sys.getsizeof(p) for p in held.values()) / len(keys)
    assert per_unit <= sys.getsizeof((None,) * 4), "the marks copy each finished task"
    assert all(held[u.key][0] is u.tasks for u in units)
    # a re-read with the same progress moves the marks onto its own tasks
    again = [_read(k, 3) for k in keys]
    for unit in again:
        assert recorder.regressed("/ws", unit, frozenset(keys)) == ()
    assert all(held[u.key][0] is u.tasks for u in again)


def test_a_backlog_holds_its_lines_compressed_in_blocks(recorder: Recorder) -> None:
    """While the writer is behind (a warm-up's first sights wait for a git backfill),
    the lines beyond the backlog are held compressed, BLOCK at a time, and the writer
    reads each back as it was sent; once it has caught up, lines are held whole."""
    keys = [f"story-{n:05d}" for n in range(BACKLOG + 2 * BLOCK + 10)]
    units = [_read(k, 1) for k in keys]
    present = frozenset(keys)
    for unit in units:
        recorder.regressed("/ws", unit, present)
    sent = []
    for key in keys:
        event, line = _event(key, f"c:{key}")
        event["summary"] = {"story": key, "next": f"{key}-T1", "padding": "x" * 300}
        line = json.dumps(event).encode() + b"\n"
        sent.append(json.loads(line))
        recorder(event, line)
    batch = recorder._batch
    assert all(isinstance(v.line, bytes) for v in batch[:BACKLOG])
    packed = batch[BACKLOG : BACKLOG + 2 * BLOCK]
    assert not any(isinstance(v.line, bytes) for v in packed), "lines held whole"
    assert all(isinstance(v.line, bytes) for v in batch[BACKLOG + 2 * BLOCK :])  # a tail
    blocks = {id(v.line.block): v.line.block for v in packed}  # type: ignore[union-attr]
    assert len(blocks) == 2
    whole = sum(len(json.dumps(e)) for e in sent[BACKLOG : BACKLOG + 2 * BLOCK])
    assert sum(len(b.data) for b in blocks.values()) < 0.2 * whole
    assert [v.event()[2] for v in batch] == sent
