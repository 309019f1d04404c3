"""A commit is seen by the daemon's answers from the moment it lands, not from the moment
its recheck ends.

The refresher notes git's stamp files when a pass has checked a workspace against git;
`list` (and so the hook op) and a detailed `resume` check git first when the stamp moved
since. It used to note the stamp as the recheck began: a stop hook asked during the
recheck found git unmoved and got the findings of before the commit (no stop held for
the session's commit; seen under the macOS stand-in, whose polling observer tells late).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest
from daemon_harness import DaemonProcess
from epic_state_harness import STATE, STORY, task_id
from git_harness import GitWorkspace

from storyd.api.answers import Options
from storyd.server import gitseen
from storyd.server.assembly import build_daemon
from storyd.server.changes import Changes
from storyd.server.engine import Engine
from storyd.server.refresher import Refresher
from storyd.server.service import Settings
from storyd.server.store import Workspace

T3 = task_id(STORY, 3)


def _repo(tmp_path: Path) -> GitWorkspace:
    """A base commit and two task commits recorded DONE; task 3 pending."""
    repo = GitWorkspace(tmp_path / "ws").init()
    repo.commit("base", {"README": "hello\n"})
    repo.record({STORY: repo.tasks_commits(STORY, 2)})
    return repo


def _commit_task_3(repo: GitWorkspace) -> str:
    return repo.commit(f"{T3} step 3", {f"src/{STORY}/3.txt": "3\n"})


Checked = tuple[GitWorkspace, Engine, Workspace, Refresher]


def _checked(tmp_path: Path, changes: Changes | None = None) -> Checked:
    """A workspace read as a watch reads it (checked against git), git unmoved since."""
    repo = _repo(tmp_path)
    engine = Engine(Options(staleness="mtime"), changes=changes)
    ws = engine.add_workspace(str(repo.path))
    refresher = Refresher(engine)  # not started: its passes run here
    assert refresher.git_moved(ws.path), "a workspace never checked against git"
    refresher.against_git(ws, partial(engine.scan, ws))
    assert not refresher.git_moved(ws.path)
    return repo, engine, ws, refresher


def _in_a_recheck(refresher: Refresher, ws: Workspace,
                  meanwhile: Callable[[], None]) -> None:  # fmt: skip
    """Run `meanwhile` while a pass against git is under way on another thread."""
    entered, release = threading.Event(), threading.Event()

    def recheck() -> None:
        entered.set()
        assert release.wait(10)

    thread = threading.Thread(target=refresher.against_git, args=(ws, recheck))
    thread.start()
    try:
        assert entered.wait(10)
        meanwhile()
    finally:
        release.set()
        thread.join(10)
    assert not thread.is_alive()


def test_git_stays_moved_until_the_recheck_that_saw_it_ends(tmp_path: Path) -> None:
    repo, _engine, ws, refresher = _checked(tmp_path)
    _commit_task_3(repo)
    assert refresher.git_moved(ws.path)
    seen: list[bool] = []
    _in_a_recheck(refresher, ws, lambda: seen.append(refresher.git_moved(ws.path)))
    assert seen == [True], "a query during the recheck must wait for it (its sync)"
    assert not refresher.git_moved(ws.path)


def test_a_commit_during_the_recheck_still_counts(tmp_path: Path) -> None:
    repo, _engine, ws, refresher = _checked(tmp_path)
    _commit_task_3(repo)
    _in_a_recheck(refresher, ws, lambda: repo.commit("later", {"later.txt": "x\n"}))
    assert refresher.git_moved(ws.path), "the stamp noted is the one taken before the pass"


@pytest.fixture
def queue() -> Iterator[Changes]:
    """The daemon's own inotify queue (closed after the test)."""
    changes = Changes()
    if not changes.available:
        pytest.skip("no inotify here: every check is a stat")
    yield changes
    changes.close()


def test_the_change_queue_vouches_for_git_without_a_stat(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, queue: Changes) -> None:  # fmt: skip
    """Where the change queue watches git's folders, an unmoved git costs a compare."""
    repo, _engine, ws, refresher = _checked(tmp_path, queue)
    stats: list[str] = []
    real = gitseen.stamp_files

    def counted(workspace: str) -> gitseen.Stamp:
        stats.append(workspace)
        return real(workspace)

    monkeypatch.setattr(gitseen, "stamp_files", counted)
    assert [refresher.git_moved(ws.path) for _ in range(3)] == [False] * 3
    assert stats == []
    _commit_task_3(repo)
    assert refresher.git_moved(ws.path)
    assert stats == [ws.path]


def test_a_pass_that_ran_no_detector_notes_nothing(tmp_path: Path) -> None:
    """A warm-up's first read (the workspace not yet checked) is not a check against git."""
    repo = _repo(tmp_path)
    engine = Engine(Options(staleness="mtime"))
    ws = engine.add_workspace(str(repo.path), checked=False)
    refresher = Refresher(engine)
    assert refresher.against_git(ws, partial(engine.scan, ws)) == 1  # the pass's result
    assert refresher.git_moved(ws.path)


def test_a_detailed_resume_right_after_a_commit_has_its_finding(
        tmp_path: Path, spawn_daemon: Callable[..., DaemonProcess]) -> None:  # fmt: skip
    """Asked before the daemon's recheck of the commit (its watch waits for git to
    settle), the answer is read with the detectors rather than served from before."""
    repo = _repo(tmp_path)
    proc = spawn_daemon([repo.path])
    request = {"op": "resume", "workspace": str(repo.path), "stateFile": STATE, "unit": STORY}
    before = proc.request(request)
    assert before["ok"] is True, before
    assert "unrecorded" not in [f["code"] for f in before["findings"]]  # type: ignore[union-attr, index]
    sha = _commit_task_3(repo)
    after = proc.request(request)
    codes = {f["code"]: f for f in after["findings"]}  # type: ignore[union-attr, index]
    assert "unrecorded" in codes, after
    assert codes["unrecorded"]["evidence"]["commit"] == sha  # type: ignore[index]
    assert proc.request(request)["findings"] == after["findings"]  # and so it stays


def test_an_unwatch_forgets_the_note(tmp_path: Path) -> None:
    """A workspace unwatched is no longer known to have been checked against git."""
    repo = _repo(tmp_path)
    daemon = build_daemon(Settings(staleness="mtime", verify_interval=3600.0))
    daemon.start([])
    try:
        path = daemon.canonical(str(repo.path))
        assert daemon.watch(path).result(10) >= 1
        assert not daemon.refresher.git_moved(path)  # the watch's read checked it
        assert daemon.unwatch(path).result(10) is True
        assert daemon.refresher.git_moved(path)
    finally:
        daemon.stop()
