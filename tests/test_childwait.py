"""Waiting for a child's exit by whatever the system offers (storyd.core.childwait): each
way on real children where this system has it, kqueue through a fake `select.kqueue`
that records what it is asked (this is not macOS), and git's views on a system with
neither pidfd_open nor waitid (macOS on Python 3.11 and 3.12)."""

from __future__ import annotations

import errno
import os
import select
import subprocess
import time
from pathlib import Path

import pytest

from storyd.core import childwait
from storyd.core.paths import which
from storyd.detectors.gitview import proc

# macOS's values (<sys/event.h>); Linux's select module has no kqueue at all
KQ_FILTER_PROC, KQ_EV_ADD, KQ_EV_ONESHOT, KQ_NOTE_EXIT = -5, 0x1, 0x10, 0x80000000


def _child(seconds: float) -> int:
    """A real child that sleeps (0: exits at once), not reaped."""
    return os.posix_spawn("/bin/sleep", ["sleep", str(seconds)], os.environ)


def _reap(pid: int) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _only(monkeypatch: pytest.MonkeyPatch, *keep: str) -> None:
    """Leave only the ways in `keep` (and poll, always there)."""
    if "pidfd" not in keep:
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    if "waitid" not in keep:
        monkeypatch.delattr(os, "waitid", raising=False)
    if "kqueue" not in keep:
        monkeypatch.delattr(select, "kqueue", raising=False)


class FakeKqueue:
    """select.kqueue as macOS answers it: records every control call; the registration
    of an exited process fails with ESRCH, an exit is one event."""

    calls: list[tuple[object, int, float | None]]

    def __init__(self, *, exits_after: float | None, registered_late: bool = False) -> None:
        self.calls = []
        self.exits_after = exits_after
        self.registered_late = registered_late
        self.closed = False

    def __call__(self) -> FakeKqueue:
        return self

    def control(self, changes: object, nevents: int, timeout: float | None = None) -> list[object]:
        self.calls.append((changes, nevents, timeout))
        if changes is not None:
            if self.registered_late:
                raise ProcessLookupError(errno.ESRCH, "No such process")
            return []
        if self.exits_after is not None and timeout is not None and timeout >= self.exits_after:
            return ["exit"]
        return []

    def close(self) -> None:
        self.closed = True


class FakeKevent:
    def __init__(self, ident: int, *, filter: int, flags: int, fflags: int) -> None:
        self.ident, self.filter, self.flags, self.fflags = ident, filter, flags, fflags


def _fake_kqueue(monkeypatch: pytest.MonkeyPatch, queue: FakeKqueue) -> None:
    _only(monkeypatch, "kqueue")
    monkeypatch.setattr(select, "kqueue", queue, raising=False)
    monkeypatch.setattr(select, "kevent", FakeKevent, raising=False)
    for name, value in (
        ("KQ_FILTER_PROC", KQ_FILTER_PROC),
        ("KQ_EV_ADD", KQ_EV_ADD),
        ("KQ_EV_ONESHOT", KQ_EV_ONESHOT),
        ("KQ_NOTE_EXIT", KQ_NOTE_EXIT),
    ):
        monkeypatch.setattr(select, name, value, raising=False)


class TestMethods:
    """The ways are read from the running system, best first."""

    def test_macos_311_offers_poll_only(self, monkeypatch: pytest.MonkeyPatch) -> None:
        _only(monkeypatch)
        assert childwait.methods() == ["poll"]

    def test_kqueue_before_waitid(self, monkeypatch: pytest.MonkeyPatch) -> None:
        _fake_kqueue(monkeypatch, FakeKqueue(exits_after=0))
        monkeypatch.setattr(os, "waitid", lambda *a: None, raising=False)
        assert childwait.methods() == ["kqueue", "waitid", "poll"]


class TestRealChildren:
    """Each way this system has, on real children: an exit is seen, a run past the
    deadline is TimeoutError, and the status is never lost."""

    @pytest.mark.parametrize("way", ["pidfd", "waitid", "poll"])
    def test_exit_seen_and_status_kept(self, monkeypatch: pytest.MonkeyPatch, way: str) -> None:
        if way != "poll" and not hasattr(os, {"pidfd": "pidfd_open"}.get(way, way)):
            pytest.skip(f"this system has no {way}")
        _only(monkeypatch, way)
        pid = os.posix_spawn("/bin/sh", ["sh", "-c", "exit 3"], os.environ)
        status = childwait.await_exit(pid, 5.0)
        code = _reap(pid) if status is None else os.waitstatus_to_exitcode(status)
        assert code == 3
        assert (status is None) == (way != "poll")  # only the poll has to reap

    @pytest.mark.parametrize("way", ["pidfd", "waitid", "poll"])
    def test_deadline(self, monkeypatch: pytest.MonkeyPatch, way: str) -> None:
        if way != "poll" and not hasattr(os, {"pidfd": "pidfd_open"}.get(way, way)):
            pytest.skip(f"this system has no {way}")
        _only(monkeypatch, way)
        pid = _child(30)
        try:
            began = time.monotonic()
            with pytest.raises(TimeoutError):
                childwait.await_exit(pid, 0.05)
            assert time.monotonic() - began < 1.0
        finally:
            os.kill(pid, 9)
            _reap(pid)

    def test_refused_pidfd_gives_way(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """pidfd_open listed but refused (ENOSYS: an old kernel, a seccomp sandbox)."""

        def refused(pid: int) -> int:
            raise OSError(errno.ENOSYS, "Function not implemented")

        monkeypatch.setattr(os, "pidfd_open", refused, raising=False)
        pid = os.posix_spawn("/bin/sh", ["sh", "-c", "exit 4"], os.environ)
        status = childwait.await_exit(pid, 5.0)
        assert (_reap(pid) if status is None else os.waitstatus_to_exitcode(status)) == 4

    def test_reaped_elsewhere_is_exited(self, monkeypatch: pytest.MonkeyPatch) -> None:
        pid = os.posix_spawn("/bin/true", ["true"], os.environ)
        _reap(pid)
        _only(monkeypatch)
        assert childwait.await_exit(pid, 1.0) is None


class TestKqueue:
    """The kqueue way, as macOS answers it (recorded in a fake select.kqueue)."""

    def test_registers_note_exit_then_waits(self, monkeypatch: pytest.MonkeyPatch) -> None:
        queue = FakeKqueue(exits_after=0.0)
        _fake_kqueue(monkeypatch, queue)
        assert childwait.await_exit(4242, 2.0) is None
        (changes, nevents, timeout), (none, one, left) = queue.calls
        assert nevents == 0 and timeout == 0  # registration alone: errors raise
        (event,) = changes  # type: ignore[misc]
        assert (event.ident, event.filter, event.fflags) == (4242, KQ_FILTER_PROC, KQ_NOTE_EXIT)
        assert event.flags == KQ_EV_ADD | KQ_EV_ONESHOT
        assert none is None and one == 1 and left is not None and 0 < left <= 2.0
        assert queue.closed

    def test_no_event_in_time(self, monkeypatch: pytest.MonkeyPatch) -> None:
        queue = FakeKqueue(exits_after=None)
        _fake_kqueue(monkeypatch, queue)
        with pytest.raises(TimeoutError):
            childwait.await_exit(4242, 0.1)
        assert queue.closed

    def test_exited_before_registration(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """macOS refuses NOTE_EXIT on a zombie with ESRCH: it has exited."""
        queue = FakeKqueue(exits_after=None, registered_late=True)
        _fake_kqueue(monkeypatch, queue)
        assert childwait.await_exit(4242, 1.0) is None
        assert len(queue.calls) == 1

    def test_refused_kqueue_falls_to_poll(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def refused() -> object:
            raise OSError(errno.EMFILE, "Too many open files")

        _fake_kqueue(monkeypatch, FakeKqueue(exits_after=0))
        monkeypatch.setattr(select, "kqueue", refused)
        pid = os.posix_spawn("/bin/sh", ["sh", "-c", "exit 5"], os.environ)
        status = childwait.await_exit(pid, 5.0)
        assert status is not None and os.waitstatus_to_exitcode(status) == 5


class TestGitWithoutPidfdOrWaitid:
    """git's views on macOS with Python 3.11/3.12: every wait used to raise
    AttributeError (no os.waitid), and every git detector failed."""

    def test_run_and_pipe(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
        git = which("git")
        assert git is not None
        _only(monkeypatch)
        code, out, _ = proc.run([git, "rev-parse", "--git-dir"], str(tmp_path), timeout=10)
        assert (code, out.strip()) == (0, ".git")
        text = proc.piped([git, "--version"], [git, "hash-object", "--stdin"],
                          str(tmp_path), timeout=10)  # fmt: skip
        assert len(text.strip()) == 40

    def test_deadline_kills(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        git = which("git")
        assert git is not None
        _only(monkeypatch)
        fifo = tmp_path / "never"  # git blocks in open(2) for ever
        os.mkfifo(fifo)
        began = time.monotonic()
        with pytest.raises(proc.GitStuck):
            proc.run([git, "hash-object", str(fifo)], str(tmp_path), timeout=0.1)
        assert time.monotonic() - began < 2.0
