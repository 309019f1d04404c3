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
from recorder_harness import STORY, T1, T2, T3, recorder, unit


def test_marks_are_read_after_construction_and_before_their_first_use(tmp_path: Path) -> None:
    db, ws = tmp_path / "h.sqlite3", str(tmp_path)
    first = recorder(db)
    first.start()
    assert first.regressed(ws, unit(3)) == ()
    first({"event": "changed", "workspace": ws, "stateFile": STATE, "unit": STORY,
           "format": "epic", "clock": "x:1"}, b"")
    wait_for(lambda: first.state()["queued"] == 0, message="the version to be written")
    first.close()

    again = recorder(db)  # a restart: the marks are in the database
    assert again.marks == {}, "read while the daemon was still starting"
    again.start()
    try:
        lost = again.regressed(ws, unit(1))
        assert sorted(f.task for f in lost) == [T2, T3], "the marks of the last run"
    finally:
        again.close()


def test_a_recorder_never_started_reads_its_marks_on_first_use(tmp_path: Path) -> None:
    db, ws = tmp_path / "h.sqlite3", str(tmp_path)
    first = recorder(db)
    first.start()
    first.regressed(ws, unit(2))
    first({"event": "changed", "workspace": ws, "stateFile": STATE, "unit": STORY,
           "format": "epic", "clock": "x:1"}, b"")
    wait_for(lambda: first.state()["queued"] == 0, message="the version to be written")
    first.close()

    again = recorder(db)
    try:
        lost = again.regressed(ws, unit(0))
        assert sorted(f.task for f in lost) == [T1, T2]
    finally:
        again.writer.close()
