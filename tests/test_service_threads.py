"""Where the daemon's threads meet: the watch count `stats` reads, the workspace aliases.

In process, with a real Daemon (engine, refresher, watchdog observer) on real folders.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_harness import wait_for
from epic_state_harness import write_epic

from storyd.server.assembly import build_daemon
from storyd.server.service import Daemon, Settings

STORY = {"story-0049-0001": {"TASK-1": {"status": "pending"}}}


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[Daemon, Path]]:
    """A started Daemon (mtime staleness: no git needed) on one epic workspace."""
    workspace = tmp_path / "ws"
    write_epic(workspace, "0049", tasks=STORY)
    (workspace / "plans" / "epic-0049" / "notes").mkdir()
    daemon = build_daemon(Settings(staleness="mtime", verify_interval=0.1))
    daemon.start([str(workspace)])
    try:
        wait_for(lambda: daemon.warm.done, 10.0, "the warm-up")
        yield daemon, Path(os.path.realpath(workspace))
    finally:
        daemon.stop()


def _dirs_under(path: Path) -> int:
    return sum(1 for _ in os.walk(path))


class TestWatchCount:
    """Defect 9: `stats` walked every watched tree on the event loop, under the lock."""

    def test_reading_the_count_walks_nothing(
        self, running: tuple[Daemon, Path], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        daemon, _workspace = running
        walkers: list[str] = []
        real_walk = os.walk

        def spy(*args: object, **kwargs: object) -> Iterator[tuple[str, list[str], list[str]]]:
            walkers.append(threading.current_thread().name)
            return real_walk(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "walk", spy)
        me = threading.current_thread().name  # stands for the event loop's thread
        assert daemon.watcher.watched_dirs() > 0
        assert me not in walkers, "watched_dirs() walked a tree on the caller's thread"

    def test_the_count_is_the_watched_trees(self, running: tuple[Daemon, Path]) -> None:
        daemon, workspace = running
        # the top folder, .plans tree (plans, epic-0049, notes); no git here
        expected = 1 + _dirs_under(workspace / "plans")
        assert daemon.watcher.watched_dirs() == expected

    def test_the_count_follows_new_and_removed_folders(
        self, running: tuple[Daemon, Path]
    ) -> None:
        daemon, workspace = running
        first = daemon.watcher.watched_dirs()
        # one folder at a time: watchdog 7.1's recursive watch warns (RuntimeWarning, an
        # error under pytest, which kills its emitter thread) when `mkdir -p` creates a
        # folder inside one it is still adding
        folder = workspace / "plans"
        for added, name in enumerate(("epic-0050", "a", "b"), start=1):
            folder /= name
            folder.mkdir()
            wait_for(lambda n=added: daemon.watcher.watched_dirs() == first + n, 5.0, f"+{added}")
        os.rmdir(workspace / "plans" / "epic-0050" / "a" / "b")
        assert wait_for(lambda: daemon.watcher.watched_dirs() == first + 2, 5.0, "+2")
        assert daemon.watcher.watched_dirs() == first + 2

    def test_an_unwatched_workspace_leaves_the_count(self, running: tuple[Daemon, Path]) -> None:
        daemon, workspace = running
        assert daemon.unwatch(str(workspace)).result(timeout=5)
        assert daemon.watcher.watched_dirs() == 0

    @pytest.mark.slow
    def test_an_idle_tick_does_not_recount(
        self, running: tuple[Daemon, Path], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Nothing changed: the refresher's ticks (every 0.1 s here) walk no tree."""
        daemon, _workspace = running
        ticked = threading.Event()
        walked = threading.Event()
        real_walk = os.walk

        def spy(*args: object, **kwargs: object) -> Iterator[tuple[str, list[str], list[str]]]:
            walked.set()
            return real_walk(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "walk", spy)
        original = daemon.refresher.on_tick

        def tick() -> None:
            original()
            ticked.set()

        daemon.refresher.on_tick = tick
        for _ in range(3):
            ticked.clear()
            assert ticked.wait(5.0), "the refresher did not tick"
        assert not walked.is_set()


class _PausingDict(dict[str, str]):
    """A dict whose `items()` stops after the first item until another thread has had its
    chance to write (or 0.5 s passed): the interleaving a race needs, made certain."""

    def __init__(self) -> None:
        super().__init__()
        self.paused = threading.Event()
        self.resume = threading.Event()

    def items(self) -> Iterator[tuple[str, str]]:  # type: ignore[override]
        it = iter(super().items())
        first = next(it, None)
        if first is None:
            return
        yield first
        self.paused.set()
        self.resume.wait(0.5)
        yield from it


@pytest.mark.slow
class TestAliases:
    """Defect 5: the refresher iterated `aliases` while the event loop added to it."""

    def test_unwatch_while_a_query_adds_a_spelling(self, tmp_path: Path) -> None:
        workspace = tmp_path / "ws"
        write_epic(workspace, "0049", tasks=STORY)
        (workspace / "d").mkdir()
        daemon = build_daemon(Settings(staleness="mtime"))
        aliases = _PausingDict()
        daemon.aliases = aliases
        daemon.start([])
        try:
            daemon.canonical(f"{workspace}/.")
            daemon.canonical(f"{workspace}/d/..")
            unwatched = daemon.unwatch(os.path.realpath(workspace))  # iterates on the refresher
            assert aliases.paused.wait(5.0), "unwatch never looked at the aliases"

            def query() -> None:  # the event loop's part: a new spelling of the workspace
                daemon.canonical(f"{workspace}/./d/..")
                aliases.resume.set()

            loop = threading.Thread(target=query, name="fake-loop")
            loop.start()
            # before the fix: "dictionary changed size during iteration" on the refresher,
            # logged, and this future never resolved
            assert unwatched.result(timeout=5) is False
            loop.join(timeout=5)
            assert not loop.is_alive()
            # the spellings known before the unwatch are gone, the one added during it stays
            # (before the fix the purge died half-way with "dictionary changed size")
            spelled = {alias: path for alias, (path, _folder) in daemon.aliases.items()}
            assert spelled == {f"{workspace}/./d/..": os.path.realpath(workspace)}
        finally:
            daemon.stop()


@pytest.mark.slow
class TestWatchOwnership:
    """The watches are the refresher's: watchdog's dispatcher only queues work for it.

    The dispatcher calls our handlers inside the observer's lock. When a handler took the
    watcher's lock, and the refresher held that lock around `observer.schedule` or
    `unschedule` (its tick adds or drops the watch of a format root that came or went),
    each thread waited for the other's lock for ever: no refresh, no scan, no unwatch
    again, and `stats` on the event loop hung on the watcher's lock too.
    """

    def test_a_format_root_that_comes_and_goes_never_stops_the_refresher(
        self, tmp_path: Path
    ) -> None:
        workspace = tmp_path / "ws"
        write_epic(workspace, "0049", tasks=STORY)
        # a tick every millisecond: the refresher's ensure_roots races each event
        daemon = build_daemon(Settings(staleness="mtime", verify_interval=0.001))
        daemon.start([str(workspace)])
        try:
            wait_for(lambda: daemon.warm.done, 10.0, "the warm-up")
            root = Path(os.path.realpath(workspace)) / "agent-output"  # a format root
            # the count without the root, taken before the toggles: a count taken after
            # them may still hold the last removed root's watch (counted from the kernel's
            # own list, which lags the rmdir), and then the new root adds nothing to it
            base = daemon.watcher.watched_dirs()
            for toggle in range(1, 401):  # before the fix: stuck within 50 in every run
                root.mkdir()
                root.rmdir()
                if toggle % 25 == 0:
                    _assert_answers(daemon, f"after {toggle} toggles")
            # and the root that stays is watched: one more folder in the count
            root.mkdir()
            wait_for(lambda: daemon.watcher.watched_dirs() == base + 1, 5.0, "the root's watch")
        finally:
            daemon.stop()


def _assert_answers(daemon: Daemon, when: str) -> None:
    """The refresher runs a call, and the watch count `stats` reads answers, in bounded time."""
    ran = threading.Event()
    daemon.refresher.call(ran.set)
    assert ran.wait(5.0), f"the refresher is stuck {when}"
    counted = threading.Event()

    def count() -> None:  # on its own thread: a hung read must not hang the test
        daemon.watcher.watched_dirs()
        counted.set()

    reader = threading.Thread(target=count, name="fake-loop", daemon=True)
    reader.start()
    assert counted.wait(5.0), f"watched_dirs() is stuck {when}"
