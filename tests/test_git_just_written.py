"""A state file git has just written is checked once git settles, not in between.

git writes the work tree and the index, and moves the ref a moment later (a switch moves
HEAD after the index; a cherry-pick writes CHERRY_PICK_HEAD just after it). A refresh in
that moment saw a state file naming a commit the branch did not hold yet, and an
`unreachable` drifted out until the ref moved (test_ordinary_git's cherry-pick, under
load). The daemon's installer counts an index written less than a git settle window ago
as git at work: the detectors' last findings are kept and the workspace is checked again
once git settles, as for a held index.lock.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from epic_state_harness import STATE, STORY, task_id, write_epic
from git_harness import GitWorkspace

from storyd.api.answers import Answer, Options
from storyd.core.gitstate import git_operation_in_progress
from storyd.core.model import Finding, Unit
from storyd.server.assembly import build_daemon
from storyd.server.engine import Engine
from storyd.server.refresher import GIT_SETTLE
from storyd.server.service import Settings

T1 = task_id(STORY, 1)


def _repo(tmp_path: Path) -> GitWorkspace:
    repo = GitWorkspace(tmp_path / "ws").init()
    repo.commit("base", {"README": "hello\n"})
    return repo


def _index_written_long_ago(repo: GitWorkspace) -> None:
    index = repo.path / ".git" / "index"
    past = time.time() - 60
    os.utime(index, (past, past))


def test_an_index_just_written_counts_as_git_at_work(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    workspace = str(repo.path)
    repo.write("more.txt", "x\n")
    repo.git("add", "more.txt")  # the index, written now; no lock, no operation
    assert git_operation_in_progress(workspace, just_written=5.0)
    assert not git_operation_in_progress(workspace)  # the lock and markers' rule alone
    _index_written_long_ago(repo)
    assert not git_operation_in_progress(workspace, just_written=5.0)


def test_the_daemon_waits_for_git_to_settle_after_the_index(tmp_path: Path) -> None:
    """build_daemon's installer uses the settle window; the refresher's own operation
    rule does not (its recheck would wait for ever behind it)."""
    repo = _repo(tmp_path)
    daemon = build_daemon(Settings())
    daemon.start([])  # no workspace watched
    try:
        busy = daemon.engine.installer.git_busy
        repo.git("add", "README")
        repo.write("README", "changed\n")
        repo.git("add", "README")
        assert busy(str(repo.path))
        assert not daemon.refresher.git_busy(str(repo.path))
        _index_written_long_ago(repo)
        assert not busy(str(repo.path))
    finally:
        daemon.stop()


def test_a_refresh_while_git_writes_keeps_the_findings_and_defers(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    write_epic(repo.path, "0049", tasks={STORY: {T1: {"status": "PENDING"}}})
    calls: list[str] = []

    def detect(workspace: str, unit: Unit, answer: Answer) -> tuple[Finding, ...]:
        calls.append(unit.key)
        return (Finding("probe", "seen", "info", f"check {len(calls)}", T1, {}),)

    def writing(workspace: str) -> bool:
        return git_operation_in_progress(workspace, just_written=GIT_SETTLE)

    engine = Engine(Options(staleness="mtime"), detect=detect, git_busy=writing)
    ws = engine.add_workspace(str(repo.path))
    _index_written_long_ago(repo)
    engine.scan(ws)
    assert calls == [STORY]
    repo.write("src.txt", "work\n")
    repo.git("add", "src.txt")  # git at work: the index just written
    write_epic(repo.path, "0049", tasks={STORY: {T1: {"status": "DONE"}}})
    engine.touch(ws, STATE)
    entry = engine.lookup(str(repo.path), STATE, STORY)
    assert entry is not None and entry.unit.tasks[0].status == "DONE"  # the new read
    assert calls == [STORY]  # no detector ran on it
    assert [f.message for f in entry.findings] == ["check 1"]  # the last findings kept
    assert engine.take_deferred() == {str(repo.path)}  # checked again once git settles
    _index_written_long_ago(repo)
    engine.recheck(ws)
    entry = engine.lookup(str(repo.path), STATE, STORY)
    assert entry is not None and [f.message for f in entry.findings] == ["check 2"]
