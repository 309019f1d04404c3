"""Where the watcher cannot trust its events, it polls: a workspace on an untrusted mount,
every workspace under an observer that is not inotify's (macOS's FSEvents or kqueue,
watchdog's PollingObserver), and FSEvents' "events were lost" flags ask for a rescan
(watchdog's emitter drops them; FSEvents.h's flag values through a fake fsevents module)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
from watchdog.observers.polling import PollingObserver

from storyd.server import observers
from storyd.server.observers import rescan_flagged
from storyd.server.watcher import Watcher


class FakeRefresher:
    """What the watcher asks of the refresher: scans (recorded)."""

    def __init__(self) -> None:
        self.scans: list[tuple[str, bool]] = []

    def request_scan(self, workspace: str, *, lost: bool = False) -> None:
        self.scans.append((workspace, lost))

    def request(self, *args: object, **kwargs: object) -> None:
        """Not asked here."""

    def request_git(self, workspace: str) -> None:
        """Not asked here."""


def _watcher() -> tuple[Watcher, FakeRefresher]:
    refresher = FakeRefresher()
    return Watcher([], refresher), refresher  # type: ignore[arg-type]


def _mountinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, untrusted: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(f"1 0 254:0 / / rw - ext4 /dev/vda rw\n"
                    f"2 1 0:56 / {untrusted} rw - 9p C:\\134 rw,aname=drvfs\n")  # fmt: skip
    monkeypatch.setenv("STORYD_MOUNTINFO", str(info))


class TestPolled:
    """Which workspaces the verification tick scans."""

    def test_untrusted_mount_only(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        drvfs, local = tmp_path / "c", tmp_path / "home"
        drvfs.mkdir()
        local.mkdir()
        _mountinfo(tmp_path, monkeypatch, drvfs)
        watcher, _ = _watcher()
        watcher.start()
        try:
            watcher.watch(str(drvfs))
            watcher.watch(str(local))
            # without inotify (the macOS stand-in) every workspace is polled anyway
            assert sorted(watcher.polled()) == ([str(drvfs)] if watcher.native
                                                else sorted([str(drvfs), str(local)]))  # fmt: skip
            assert "9p mount" in watcher.untrusted()[str(drvfs)]
            watcher.unwatch(str(drvfs))
            assert watcher.untrusted() == {}
            assert watcher.polled() == ([] if watcher.native else [str(local)])
        finally:
            watcher.stop()

    def test_every_workspace_without_inotify(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(observers, "Observer", PollingObserver)
        watcher, _ = _watcher()
        watcher.start()
        try:
            watcher.watch(str(tmp_path))
            assert not watcher.native
            assert watcher.polled() == [str(tmp_path)]
        finally:
            watcher.stop()


class NativeEvent:
    """watchdog's _fsevents.NativeEvent as macOS delivers it: a path and its flags."""

    def __init__(self, path: str, flags: int) -> None:
        self.path, self.flags = path, flags


# kFSEventStreamEventFlag values, from FSEvents.h
MUST_SCAN, USER_DROPPED, KERNEL_DROPPED = 0x1, 0x2, 0x4
ITEM_CREATED, ITEM_MODIFIED, ITEM_IS_FILE = 0x100, 0x1000, 0x10000


class TestFSEvents:
    """The flags that say events were lost ask the watcher for a rescan."""

    @pytest.mark.parametrize(
        ("flags", "lost"),
        [(MUST_SCAN, True), (USER_DROPPED | MUST_SCAN, True), (KERNEL_DROPPED | MUST_SCAN, True),
         (ITEM_CREATED | ITEM_IS_FILE, False), (ITEM_MODIFIED | ITEM_IS_FILE, False)],
    )  # fmt: skip
    def test_flags(self, flags: int, lost: bool) -> None:
        assert rescan_flagged([NativeEvent("/Users/me/ws/plans", flags)]) is lost

    def test_emitter_asks_for_a_rescan(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """With a stand-in watchdog.observers.fsevents (this is not macOS), the emitter
        the watcher makes reports a lost batch, then hands it on to watchdog's."""
        handed: list[list[object]] = []

        class FSEventsEmitter:
            def queue_events(self, timeout: float, events: list[object]) -> None:
                handed.append(events)

        class FSEventsObserver:
            def __init__(self) -> None:
                self._emitter_class: type = FSEventsEmitter

        fake = types.ModuleType("watchdog.observers.fsevents")
        fake.FSEventsEmitter = FSEventsEmitter  # type: ignore[attr-defined]
        fake.FSEventsObserver = FSEventsObserver  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "watchdog.observers.fsevents", fake)
        lost: list[bool] = []
        observer = observers._fsevents_observer(lambda: lost.append(True))
        assert observer is not None
        emitter = observer._emitter_class()
        emitter.queue_events(0.1, [NativeEvent("/ws", ITEM_MODIFIED | ITEM_IS_FILE)])
        assert lost == []
        emitter.queue_events(0.1, [NativeEvent("/ws", MUST_SCAN | KERNEL_DROPPED)])
        assert lost == [True] and len(handed) == 2

    def test_absent_here(self) -> None:
        if sys.platform == "darwin":
            pytest.skip("FSEvents is there on macOS")
        assert observers._fsevents_observer(lambda: None) is None

    def test_overflow_rescans_each_workspace(self, tmp_path: Path) -> None:
        watcher, refresher = _watcher()
        watcher.start()
        try:
            watcher.watch(str(tmp_path))
            watcher.overflowed()
            assert refresher.scans == [(str(tmp_path), True)]
        finally:
            watcher.stop()
