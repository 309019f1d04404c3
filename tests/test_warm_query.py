"""A query the cache cannot answer yet is built from the freshest parse, without waiting
(issue 43): never queued behind a warm-up's (or refresher's) read of the whole file,
never behind the detectors' pass, and never older than the file.

The daemon's core runs in process (assembly.build_daemon, mtime staleness) on a real
epic workspace; the whole-file read in progress is the file's read lock held by the
test, which is what a warm-up's read holds while it builds every unit.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from daemon_harness import wait_for
from epic_state_harness import EPIC, STATE, story_id, task_id, write_epic

from storyd.api import answers
from storyd.core import pipeline
from storyd.core.query import Query
from storyd.server.assembly import build_daemon
from storyd.server.service import Daemon, Settings

STORIES = 40
ASKED = story_id(17)


def _write(workspace: Path, done: int) -> None:
    """The epic with `done` leading tasks DONE in the asked story (3 tasks a story)."""
    tasks = {}
    for n in range(1, STORIES + 1):
        sid = story_id(n)
        count = done if sid == ASKED else 1
        tasks[sid] = {task_id(sid, t): ({"status": "DONE", "commitSha": f"{t:040x}"}
                                        if t <= count else {"status": "PENDING"})
                      for t in (1, 2, 3)}
    write_epic(workspace, EPIC, tasks=tasks)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    _write(ws, 1)
    return Path(os.path.realpath(ws))


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    built = build_daemon(Settings(staleness="mtime"))
    try:
        yield built
    finally:
        built.stop()


def _query(workspace: Path) -> Query:
    return Query(str(workspace), epic=EPIC, story=ASKED, detail=True)


def _direct(workspace: Path) -> bytes:
    out = answers.run(Query(str(workspace), epic=EPIC, story=ASKED), "mtime")
    assert out.code == 0, out.stderr
    return out.stdout


class TestNotQueued:
    """A miss during the warm-up's read of the file answers while that read goes on."""

    @pytest.mark.slow
    def test_answers_while_the_whole_file_read_holds_the_lock(
        self, workspace: Path, daemon: Daemon
    ) -> None:
        lock = daemon.engine.reads.file_lock(str(workspace), STATE)
        with lock:  # the warm-up's read of the file is under way (it waits on this lock)
            daemon.start([str(workspace)])
            asked = daemon.executor.submit(daemon.read_answer, str(workspace),
                                           _query(workspace), time.monotonic_ns())
            # before issue 43: the miss read the whole file under this lock, so it
            # waited for the warm-up's read; this timed out
            got = asked.result(timeout=10)
            assert got.line == _direct(workspace)
            assert not daemon.warm.done  # the warm-up had not read the file
        wait_for(lambda: daemon.warm.done, 20.0, "the warm-up")


class TestUncheckedCache:
    """Read but not yet checked by the detectors: the cached unit answers, while fresh."""

    def test_no_parse_while_the_file_is_unchanged(
        self, workspace: Path, daemon: Daemon, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        daemon.start([])  # no warm-up: the test reads the workspace, detectors not run
        ws = daemon.engine.add_workspace(str(workspace), checked=False)
        daemon.engine.scan(ws)
        assert not ws.checked and STATE in ws.files
        parsed: list[str] = []
        one, whole = pipeline.read_one, pipeline.read_file

        def read_one(*args, **kwargs):  # type: ignore[no-untyped-def]
            parsed.append("one")
            return one(*args, **kwargs)

        def read_file(*args, **kwargs):  # type: ignore[no-untyped-def]
            parsed.append("file")
            return whole(*args, **kwargs)

        monkeypatch.setattr(pipeline, "read_one", read_one)
        monkeypatch.setattr(pipeline, "read_file", read_file)
        first = daemon.read_answer(str(workspace), _query(workspace), time.monotonic_ns())
        assert first.line == _direct(workspace)
        assert parsed == []  # the warm-up's parse answered
        _write(workspace, 2)  # a write: the cached unit no longer answers
        second = daemon.read_answer(str(workspace), _query(workspace), time.monotonic_ns())
        assert second.line == _direct(workspace) != first.line
        assert parsed == ["one"]  # the file parsed again, the asked unit alone built


def _served_then_torn(workspace: Path, daemon: Daemon, *, checked: bool) -> bytes:
    """Version 2 served by a miss (not installed), then the file torn in place and the
    cache told: what was served."""
    daemon.start([])
    ws = daemon.engine.add_workspace(str(workspace), checked=checked)
    daemon.engine.scan(ws)  # the whole read: one task done
    _write(workspace, 2)
    served = daemon.read_answer(str(workspace), _query(workspace), time.monotonic_ns())
    assert served.line == _direct(workspace)  # a miss: two tasks done, not installed
    state = workspace / STATE
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])  # torn
    daemon.engine.refresh(ws, STATE, ws.files[STATE].adapter)  # the cache learns it
    return served.line


def _point(line: bytes | None) -> str:
    assert line is not None
    return str(orjson.loads(line)["resumePoint"])


@pytest.mark.slow
class TestNeverOlderThanServed:
    """A miss's answer (read_one: the asked unit from bytes the cache has not installed)
    is never followed, once the file tears, by an older one from the cache's last good
    whole read (the soak's violation, round seed 3 op 869: version 2 served, then
    version 1). Every door: the miss path, a cached hit, the list, a git recheck (the
    last three took the last good whole read's units before Reads.newest_good)."""

    def test_a_miss(self, workspace: Path, daemon: Daemon) -> None:
        served = _served_then_torn(workspace, daemon, checked=False)
        after = daemon.read_answer(str(workspace), _query(workspace), time.monotonic_ns())
        assert after.line == served

    def test_a_cached_hit(self, workspace: Path, daemon: Daemon) -> None:
        served = _served_then_torn(workspace, daemon, checked=True)
        key = _key(daemon, workspace)
        entry = daemon.engine.lookup(str(workspace), STATE, key)  # what a hit would serve
        assert entry is not None
        assert _point(entry.line) == _point(served)

    def test_the_list(self, workspace: Path, daemon: Daemon) -> None:
        served = _served_then_torn(workspace, daemon, checked=True)
        key = _key(daemon, workspace)
        [unit] = [u for u in daemon.engine.summaries(str(workspace)) if u["unit"] == key]
        assert unit["resumePoint"] == _point(served)
        assert unit["stale"] == "file unreadable"  # still said to be a last good read's

    def test_a_git_recheck(self, workspace: Path, daemon: Daemon) -> None:
        served = _served_then_torn(workspace, daemon, checked=True)
        daemon.engine.recheck(daemon.engine.workspaces[str(workspace)])
        entry = daemon.engine.lookup(str(workspace), STATE, _key(daemon, workspace))
        assert entry is not None
        assert _point(entry.line) == _point(served)


def _key(daemon: Daemon, workspace: Path) -> str:
    [key] = [k for k in daemon.engine.workspaces[str(workspace)].files[STATE].keys
             if ASKED in k]
    return key
