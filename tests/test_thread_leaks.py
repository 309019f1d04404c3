"""The thread guard: the leak check counts daemon threads, and a Daemon leaves none.

Nearly every thread storyd starts is a daemon thread (the refresher, the detectors'
worker, watchdog's observer, its inotify reader and emitters; only the read pool's
workers are not, as concurrent.futures makes them), so a guard that skipped daemon
threads would check almost nothing. In process, with a real Daemon on real folders and
a real git repository.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import suppress
from pathlib import Path

import pytest
from daemon_harness import wait_for
from epic_state_harness import STORY, write_epic
from git_harness import GitWorkspace
from threads_harness import leaked_threads
from watchdog.observers.api import BaseObserver

from storyd.api.detection import build_detect, tips_held_by
from storyd.config.values import Config
from storyd.server.assembly import build_daemon
from storyd.server.service import Daemon, Settings

PENDING = {"story-0049-0001": {"TASK-1": {"status": "pending"}}}


@pytest.fixture
def before() -> set[threading.Thread]:
    """The threads alive when the test starts (daemon threads included)."""
    return set(threading.enumerate())


@pytest.fixture
def parked() -> Iterator[tuple[threading.Thread, threading.Event]]:
    """A daemon thread that runs until its event is set (set and joined at teardown)."""
    release = threading.Event()
    thread = threading.Thread(target=release.wait, name="parked-daemon", daemon=True)
    thread.start()
    yield thread, release
    release.set()
    thread.join(timeout=5)


def _storyd_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t is not threading.main_thread()]


def _stop_emitters(observer: BaseObserver) -> None:
    """End the emitter threads a stopped observer was left with (their inotify file is
    closed already: stopping one may fail, but its loop ends all the same)."""
    for emitter in list(observer.emitters):
        with suppress(OSError):
            emitter.stop()
        if emitter.ident is not None:
            emitter.join(timeout=5.0)


def _stopped_cleanly(daemon: Daemon, before: set[threading.Thread]) -> list[str]:
    daemon.stop()
    return leaked_threads(before, grace=10.0)


class TestLeakedThreads:
    """The helper the autouse guard uses."""

    def test_a_daemon_thread_still_running_is_reported(
        self, before: set[threading.Thread], parked: tuple[threading.Thread, threading.Event]
    ) -> None:
        thread, _release = parked
        assert thread.daemon
        assert leaked_threads(before, grace=0.05) == ["parked-daemon"]

    def test_a_thread_that_ends_within_the_grace_is_not_reported(
        self, before: set[threading.Thread], parked: tuple[threading.Thread, threading.Event]
    ) -> None:
        thread, release = parked
        release.set()  # it ends while leaked_threads waits for it
        assert leaked_threads(before, grace=5.0) == []
        assert not thread.is_alive()

    def test_a_thread_from_before_the_snapshot_is_not_counted(
        self, parked: tuple[threading.Thread, threading.Event]
    ) -> None:
        thread, _release = parked
        assert thread in set(threading.enumerate())
        assert leaked_threads(set(threading.enumerate()), grace=0.05) == []


class TestDaemonThreads:
    """A Daemon started and stopped in process leaves no thread behind."""

    def test_start_then_stop_leaves_none(
        self, tmp_path: Path, before: set[threading.Thread]
    ) -> None:
        workspace = tmp_path / "ws"
        write_epic(workspace, "0049", tasks=PENDING)
        daemon = build_daemon(Settings(staleness="mtime", verify_interval=0.1))
        daemon.start([str(workspace)])
        try:
            wait_for(lambda: daemon.warm.done, 10.0, "the warm-up")
            # a direct read's pool thread, as a cache miss would start
            pool = daemon.executor.submit(lambda: threading.current_thread().name)
            assert pool.result(timeout=5).startswith("storyd-direct")
            started = [t for t in _storyd_threads() if t not in before]
            names = {t.name for t in started}
            assert {"storyd-refresher"} <= names and any(
                n.startswith("storyd-direct") for n in names
            ), names
            assert len(started) >= 4, names  # refresher, pool, observer, emitter(s)
            # a guard that skipped daemon threads would miss all but the pool's
            daemonic = {t.name for t in started if t.daemon}
            assert "storyd-refresher" in daemonic and len(daemonic) >= 3, daemonic
        finally:
            still = _stopped_cleanly(daemon, before)
        assert still == [], f"Daemon.stop left threads running: {still}"

    def test_stop_during_the_warm_up_leaves_no_watch_and_no_thread(
        self, tmp_path: Path, before: set[threading.Thread]
    ) -> None:
        """Stop while the warm-up reads its first workspace, held there by a writer's lock
        that is let go once the observer has ended: the warm-up must not watch anything
        more. (A watch scheduled in the moment the observer is ending starts an emitter
        thread that is never stopped: too narrow a window to hit every time, so this
        asserts the watches, which are left behind every time, and the threads too.)"""
        paths = []
        for n in range(4):
            workspace = tmp_path / f"ws{n}"
            write_epic(workspace, "0049", tasks=PENDING)
            paths.append(str(workspace))
        daemon = build_daemon(Settings(staleness="mtime", lock_timeout=10.0))
        observer = daemon.watcher.observer
        with open(Path(paths[0]) / "plans" / "epic-0049" / "execution-state.json", "rb") as held:
            fcntl.flock(held, fcntl.LOCK_EX)  # the first read waits for it

            def let_go_once_the_observer_ends() -> None:
                observer.join(timeout=20.0)
                fcntl.flock(held, fcntl.LOCK_UN)

            releaser = threading.Thread(target=let_go_once_the_observer_ends)
            daemon.start(paths)
            try:
                wait_for(lambda: observer.emitters, 10.0, "the first workspace's watches")
                releaser.start()
                daemon.stop()
                left = sorted(str(e.watch.path) for e in observer.emitters)
                still = leaked_threads(before, grace=10.0)
            finally:
                fcntl.flock(held, fcntl.LOCK_UN)
                if releaser.ident is not None:
                    releaser.join(timeout=20.0)
                _stop_emitters(observer)  # so that only this test reports what it left
        assert left == [], f"watches scheduled on the stopped observer: {left}"
        assert still == [], f"Daemon.stop during the warm-up left threads running: {still}"

    def test_an_unwatched_workspace_takes_its_watch_threads_along(
        self, tmp_path: Path, before: set[threading.Thread]
    ) -> None:
        first, second = tmp_path / "one", tmp_path / "two"
        write_epic(first, "0049", tasks=PENDING)
        write_epic(second, "0050", tasks=PENDING)
        daemon = build_daemon(Settings(staleness="mtime"))
        daemon.start([str(first)])
        try:
            wait_for(lambda: daemon.warm.done, 10.0, "the warm-up")
            running = set(threading.enumerate())
            canonical = os.path.realpath(second)
            assert daemon.watch(canonical).result(timeout=10) == 1
            assert [t for t in threading.enumerate() if t not in running], (
                "watching a second workspace started no emitter: nothing to check"
            )
            assert daemon.unwatch(canonical).result(timeout=10) is True
            gone = leaked_threads(running, grace=10.0)
            assert gone == [], f"unwatch left the workspace's threads running: {gone}"
        finally:
            still = _stopped_cleanly(daemon, before)
        assert still == [], f"Daemon.stop left threads running: {still}"

    def test_detectors_on_a_git_workspace_leave_none(
        self, tmp_path: Path, before: set[threading.Thread]
    ) -> None:
        """As `serve` runs it: the Runner's worker and git views, closed after the Daemon."""
        repo = GitWorkspace(tmp_path / "ws").init()
        shas = repo.tasks_commits(STORY, 2)
        repo.record({STORY: shas})
        detect, runner = build_detect(Config(), "git")
        drift = threading.Event()

        def sink(event: Mapping[str, object], _line: bytes) -> None:
            if event["event"] == "drift":
                drift.set()

        try:
            daemon = build_daemon(
                Settings(staleness="git", verify_interval=0.1), detect, tips_held_by(runner)
            )
            daemon.engine.log.sinks.append(sink)
            daemon.start([str(repo.path)])
            try:
                wait_for(lambda: daemon.warm.done, 20.0, "the warm-up")
                repo.git("reset", "-q", "--hard", "HEAD~1")
                assert drift.wait(20.0), "no drift after the reset: the detectors did not run"
                assert any(t.name == "storyd-detectors" for t in _storyd_threads())
            finally:
                daemon.stop()
        finally:
            runner.close()
        still = leaked_threads(before, grace=10.0)
        assert still == [], f"the Daemon and its Runner left threads running: {still}"
