"""A file torn after a miss served newer bytes than the cache's last good whole read:
every door answers from those newer bytes, never from the older whole read.

The soak's violation (round seed 3, op 869: a torn file answered version 1 after version
2 was served): a miss answered version 2 from its one-unit read, the file tore before the
refresher read it whole, and the cache installed its last good whole read (version 1)
for the torn file. The query path's miss replayed the newer bytes, but a cached hit
(`Engine.serve`), the `list` op's summaries and a git recheck took the cache's units.

The daemon's core runs in process (assembly.build_daemon, mtime staleness) on a real
epic workspace.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from epic_state_harness import EPIC, STATE, story_id, task_id, write_epic

from storyd.api import answers
from storyd.core.query import Query
from storyd.server.assembly import build_daemon
from storyd.server.service import Daemon, Settings

ASKED = story_id(3)


def _write(workspace: Path, done: int) -> None:
    """Five stories of three tasks; the asked one has `done` leading tasks DONE."""
    tasks = {}
    for n in range(1, 6):
        sid = story_id(n)
        count = done if sid == ASKED else 1
        tasks[sid] = {task_id(sid, t): ({"status": "DONE", "commitSha": f"{t:040x}"}
                                        if t <= count else {"status": "PENDING"})
                      for t in (1, 2, 3)}
    write_epic(workspace, EPIC, tasks=tasks)


def _direct(workspace: Path) -> bytes:
    out = answers.run(Query(str(workspace), epic=EPIC, story=ASKED), "mtime")
    assert out.code == 0, out.stderr
    return out.stdout


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


def _served_then_torn(workspace: Path, daemon: Daemon) -> tuple[bytes, str]:
    """Version 2 served by a miss, then the file torn and the cache told: what was
    served, and the asked unit's key."""
    daemon.start([])
    ws = daemon.engine.add_workspace(str(workspace))
    daemon.engine.scan(ws)  # the whole read: version 1 (one task done)
    _write(workspace, 2)
    query = Query(str(workspace), epic=EPIC, story=ASKED)
    served = daemon.read_answer(str(workspace), query, time.monotonic_ns())
    assert served.line == _direct(workspace)  # a miss: two tasks done, not installed
    state = workspace / STATE
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])  # torn in place
    snap = ws.files[STATE]
    daemon.engine.refresh(ws, STATE, snap.adapter)  # the cache learns the file is torn
    [key] = [k for k in ws.files[STATE].keys if ASKED in k]
    return served.line, key


def _resume_point(line: bytes) -> str:
    return str(orjson.loads(line)["resumePoint"])


@pytest.mark.slow
class TestNeverOlderThanServed:
    def test_the_cached_hit_is_the_newer_bytes(self, workspace: Path, daemon: Daemon) -> None:
        served, key = _served_then_torn(workspace, daemon)
        entry = daemon.engine.serve(str(workspace), STATE, key, checked=False)
        assert entry is not None and entry.line is not None
        # before: the last good whole read's entry (version 1: task 2 next)
        assert _resume_point(entry.line) == _resume_point(served)

    def test_the_list_is_the_newer_bytes(self, workspace: Path, daemon: Daemon) -> None:
        served, key = _served_then_torn(workspace, daemon)
        [unit] = [u for u in daemon.engine.summaries(str(workspace)) if u["unit"] == key]
        assert unit["resumePoint"] == _resume_point(served)
        assert unit["stale"] == "file unreadable"  # still said to be the last good read's

    def test_a_git_recheck_keeps_the_newer_bytes(self, workspace: Path, daemon: Daemon) -> None:
        served, key = _served_then_torn(workspace, daemon)
        ws = daemon.engine.workspaces[str(workspace)]
        daemon.engine.recheck(ws)
        entry = daemon.engine.serve(str(workspace), STATE, key, checked=False)
        assert entry is not None and entry.line is not None
        assert _resume_point(entry.line) == _resume_point(served)
