"""Which git-directory events ask for a recheck, and one recheck per git operation.

Real watchdog observers on real repositories: each git operation's events are collected
up to a sentinel written after it, then judged by `git_event_matters`. Then a real
Refresher thread with a real `.git/rebase-merge` marker: the marker's removal event ends
the wait with one recheck, and when the refresher's fallback poll sees the end first, an
event arriving just after joins that one recheck instead of causing a second.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from git_harness import GitWorkspace
from watchdog.events import DirDeletedEvent, FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from storyd.api.answers import Options
from storyd.core.gitstate import git_operation_in_progress
from storyd.server.engine import Engine, Workspace
from storyd.server.refresher import Refresher
from storyd.server.watcher import _GitHandler, git_event_matters

TIMEOUT = 10.0  # seconds to wait for an event that must come
QUIET = 0.5  # a window in which an event that must not come would have come
_SENTINEL = "storyd-sentinel-"


class _Collect(FileSystemEventHandler):
    """Keeps every event; wakes a waiter when a sentinel arrives."""

    def __init__(self) -> None:
        self.events: list[FileSystemEvent] = []
        self.arrived = threading.Condition()

    def on_any_event(self, event: FileSystemEvent) -> None:
        with self.arrived:
            self.events.append(event)
            self.arrived.notify_all()

    def until(self, sentinel: str, kind: str) -> list[FileSystemEvent]:
        """The events up to the `kind` event of `sentinel` (waits for it), sentinels' own
        events left out."""

        def seen() -> bool:
            return any(
                e.event_type == kind and os.fsdecode(e.src_path).endswith(sentinel)
                for e in self.events
            )

        with self.arrived:
            assert self.arrived.wait_for(seen, TIMEOUT), f"no {kind} event for {sentinel}"
            taken, self.events = self.events, []
        return [e for e in taken if _SENTINEL not in os.fsdecode(e.src_path)]


class _GitEvents:
    """The events a daemon's git watches see (.git flat, .git/refs recursive), per step."""

    def __init__(self, repo: GitWorkspace) -> None:
        self.repo = repo
        self.gitdir = repo.path / ".git"
        self.handlers = (_Collect(), _Collect())  # one per watch: each has its own emitter
        self.observer = Observer()
        self.observer.schedule(self.handlers[0], str(self.gitdir), recursive=False)
        self.observer.schedule(self.handlers[1], str(self.gitdir / "refs"), recursive=True)
        self.steps = 0

    def of(self, step: Callable[[], object]) -> list[FileSystemEvent]:
        """Run `step`; return every event it caused on both watches."""
        self.steps += 1
        sentinel = f"{_SENTINEL}{self.steps}"
        step()
        for folder in (self.gitdir, self.gitdir / "refs"):
            (folder / sentinel).write_text("")
        seen = [e for h in self.handlers for e in h.until(sentinel, "closed")]
        for folder in (self.gitdir, self.gitdir / "refs"):
            (folder / sentinel).unlink()
        for handler in self.handlers:
            seen += handler.until(sentinel, "deleted")  # git's late events, if any
        return seen


@pytest.fixture
def repo(tmp_path: Path) -> GitWorkspace:
    repo = GitWorkspace(tmp_path / "ws").init()
    repo.commit("one", {"a.txt": "1\n"})
    repo.commit("two", {"a.txt": "2\n"})
    return repo


@pytest.fixture
def git_events(repo: GitWorkspace) -> Iterator[_GitEvents]:
    watching = _GitEvents(repo)
    watching.observer.start()
    yield watching
    watching.observer.stop()
    watching.observer.join(TIMEOUT)


def _matter(events: list[FileSystemEvent]) -> list[str]:
    return [f"{e.event_type} {os.fsdecode(e.src_path)}" for e in events if git_event_matters(e)]


class TestWhichEventsMatter:
    def test_each_ref_head_and_index_change_asks_for_a_recheck(
        self, repo: GitWorkspace, git_events: _GitEvents
    ) -> None:
        steps: dict[str, Callable[[], object]] = {
            "update-ref": lambda: repo.git("update-ref", "refs/heads/main", "HEAD~1"),
            "reset --soft": lambda: repo.git("reset", "-q", "--soft", "HEAD@{1}"),
            "add (index)": lambda: (repo.write("b.txt", "b\n"), repo.git("add", "b.txt")),
            "commit": lambda: repo.git("commit", "-q", "-m", "three"),
            "checkout -b": lambda: repo.git("checkout", "-q", "-b", "topic"),
            "branch -D": lambda: repo.git("branch", "-q", "-D", "main"),
            "pack-refs": lambda: repo.git("pack-refs", "--all"),
            "tag": lambda: repo.git("tag", "v1"),
        }
        silent = [name for name, step in steps.items() if not _matter(git_events.of(step))]
        assert silent == [], f"no event asked for a recheck after: {silent}"

    def test_a_ref_written_through_its_lock_is_seen_by_the_rename(
        self, repo: GitWorkspace, git_events: _GitEvents
    ) -> None:
        events = git_events.of(lambda: repo.git("update-ref", "refs/heads/main", "HEAD~1"))
        ref = str(repo.path / ".git" / "refs" / "heads" / "main")
        assert [
            e
            for e in events
            if git_event_matters(e)
            and os.fsdecode(getattr(e, "dest_path", "")) == ref
            and os.fsdecode(e.src_path) == ref + ".lock"
        ], events

    def test_a_marker_asks_once_as_it_comes_and_once_as_it_goes(
        self, repo: GitWorkspace, git_events: _GitEvents
    ) -> None:
        marker = repo.path / ".git" / "rebase-merge"
        made = git_events.of(marker.mkdir)
        removed = git_events.of(marker.rmdir)
        assert [e.event_type for e in made + removed].count("modified") >= 2  # .git's own
        assert _matter(made) == [f"created {marker}"]
        assert _matter(removed) == [f"deleted {marker}"]  # the operation's end

    def test_a_lock_that_never_lands_asks_for_nothing(
        self, repo: GitWorkspace, git_events: _GitEvents
    ) -> None:
        lock = repo.path / ".git" / "refs" / "heads" / "main.lock"
        events = git_events.of(lambda: lock.write_text(repo.head() + "\n"))
        events += git_events.of(lock.unlink)
        assert {e.event_type for e in events} >= {"created", "deleted"}
        assert _matter(events) == []


class _Rechecks:
    """Counts the refresher's rechecks; `first`, `second`, `third` are set at each."""

    def __init__(self) -> None:
        self.count = 0
        self.first = threading.Event()
        self.second = threading.Event()
        self.third = threading.Event()

    def __call__(self, _ws: Workspace) -> None:
        self.count += 1
        (self.first, self.second, self.third)[min(self.count, 3) - 1].set()


@pytest.fixture
def refresher(repo: GitWorkspace) -> Iterator[tuple[Refresher, Workspace, _Rechecks]]:
    engine = Engine(Options(staleness="mtime"))
    ws = engine.add_workspace(str(repo.path))
    thread = Refresher(engine, verify_interval=3600.0, git_settle=0.05)
    thread.operation_note = 0.2  # an operation stopped this long is noted (2 s in a daemon)
    counted = _Rechecks()
    thread.on_git_change = counted
    thread.git_busy = git_operation_in_progress
    thread.start()
    yield thread, ws, counted
    thread.stop()
    thread.join(TIMEOUT)


@pytest.mark.slow
class TestOneRecheckPerOperation:
    def test_the_markers_removal_event_ends_the_wait(
        self, repo: GitWorkspace, refresher: tuple[Refresher, Workspace, _Rechecks]
    ) -> None:
        thread, ws, counted = refresher
        thread.busy_poll = 3600.0  # no poll: only the event can end the wait
        thread.operation_note = 0.0  # noted at the first look (no poll comes later)
        marker = repo.path / ".git" / "rebase-merge"
        marker.mkdir()
        handler = _GitHandler(thread, ws.path)
        repo.git("update-ref", "refs/heads/main", "HEAD~1")  # mid-"rebase"
        thread.request_git(ws.path)  # the ref's event
        # once as the operation is first seen (its answers then say it is under way) ...
        assert counted.first.wait(TIMEOUT), "no recheck as the operation began"
        assert marker.is_dir()
        assert not counted.second.wait(QUIET), "rechecked again while .git/rebase-merge exists"
        marker.rmdir()
        handler.on_any_event(DirDeletedEvent(str(marker)))  # as watchdog delivers it
        # ... and once as it ends
        assert counted.second.wait(TIMEOUT), "no recheck once the operation ended"
        assert not counted.third.wait(QUIET), "a third recheck for one operation"
        assert counted.count == 2

    def test_an_event_just_after_the_end_joins_the_one_recheck(
        self, repo: GitWorkspace, refresher: tuple[Refresher, Workspace, _Rechecks]
    ) -> None:
        thread, ws, counted = refresher
        thread.git_settle = 0.5  # wide enough that a loaded machine still lands inside it
        thread.busy_poll = 0.05  # the poll sees the end before any event says so
        marker = repo.path / ".git" / "rebase-merge"
        marker.mkdir()
        seen_busy, ended = threading.Event(), threading.Event()
        late: list[threading.Timer] = []

        def busy(path: str) -> bool:
            found = git_operation_in_progress(path)
            if found:
                seen_busy.set()
            elif seen_busy.is_set() and not ended.is_set():  # the poll sees the end first ...
                ended.set()  # ... and the ref's event, 20 ms later, is still on its way
                late.append(threading.Timer(0.02, thread.request_git, (ws.path,)))
                late[0].start()
            return found

        thread.git_busy = busy
        thread.request_git(ws.path)
        assert seen_busy.wait(TIMEOUT), "the refresher never looked for the marker"
        assert counted.first.wait(TIMEOUT), "no recheck as the operation began"
        marker.rmdir()
        assert counted.second.wait(TIMEOUT), "no recheck once the operation ended"
        late[0].join(TIMEOUT)
        assert not counted.third.wait(QUIET + thread.git_settle), "two rechecks for one end"
        assert counted.count == 2
