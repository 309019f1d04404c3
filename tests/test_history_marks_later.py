"""The recorder reads its marks after the daemon's socket listens (issue 43).

Building a Recorder reads nothing from the database (a daemon builds it before it
listens, and the read is one JSON parse per unit ever recorded); its writer thread
reads the marks as its first job, and every use of them waits for that read, so a
restarted daemon still finds the progress a stale copy lost.
"""

from __future__ import annotations

from pathlib import Path

from daemon_harness import wait_for
from epic_state_harness import STATE

T1, T2, T3 = "TASK-0049-0001-001", "TASK-0049-0001-002", "TASK-0049-0001-003"
STORY = "story-0049-0001"


def _unit(done: int) -> object:
    from storyd.core.model import DONE, PENDING, Task, Unit

    tasks = tuple(Task(tid, "DONE" if n < done else "PENDING", DONE if n < done else PENDING)
                  for n, tid in enumerate((T1, T2, T3)))  # fmt: skip
    return Unit("epic", STATE, STORY, tasks)


def _recorder(db: Path) -> object:
    from storyd.api import history_db
    from storyd.config.history import History
    from storyd.server.recorder import Recorder

    return Recorder(history_db.open_writer(str(db)), History())


def test_marks_are_read_after_construction_and_before_their_first_use(tmp_path: Path) -> None:
    db, ws = tmp_path / "h.sqlite3", str(tmp_path)
    first = _recorder(db)
    first.start()  # type: ignore[attr-defined]
    assert first.regressed(ws, _unit(3)) == ()  # type: ignore[attr-defined]
    first({"event": "changed", "workspace": ws, "stateFile": STATE, "unit": STORY,  # type: ignore[operator]
           "format": "epic", "clock": "x:1"}, b"")
    wait_for(lambda: first.state()["queued"] == 0, message="the version to be written")  # type: ignore[attr-defined]
    first.close()  # type: ignore[attr-defined]

    again = _recorder(db)  # a restart: the marks are in the database
    assert again.marks == {}, "read while the daemon was still starting"  # type: ignore[attr-defined]
    again.start()  # type: ignore[attr-defined]
    try:
        lost = again.regressed(ws, _unit(1))  # type: ignore[attr-defined]
        assert sorted(f.task for f in lost) == [T2, T3], "the marks of the last run"
    finally:
        again.close()  # type: ignore[attr-defined]


def test_a_recorder_never_started_reads_its_marks_on_first_use(tmp_path: Path) -> None:
    db, ws = tmp_path / "h.sqlite3", str(tmp_path)
    first = _recorder(db)
    first.start()  # type: ignore[attr-defined]
    first.regressed(ws, _unit(2))  # type: ignore[attr-defined]
    first({"event": "changed", "workspace": ws, "stateFile": STATE, "unit": STORY,  # type: ignore[operator]
           "format": "epic", "clock": "x:1"}, b"")
    wait_for(lambda: first.state()["queued"] == 0, message="the version to be written")  # type: ignore[attr-defined]
    first.close()  # type: ignore[attr-defined]

    again = _recorder(db)
    try:
        lost = again.regressed(ws, _unit(0))  # type: ignore[attr-defined]
        assert sorted(f.task for f in lost) == [T1, T2]
    finally:
        again.writer.close()  # type: ignore[attr-defined]
