"""No child outlives the storyd process that started it (issue 39): storyd.core.children.

The git on PATH is a shim that logs its pid and then sleeps for minutes in place of
git (`exec sleep`, so the pid stays the child's). A real daemon, a real one-shot
`storyd hook` and a plain Python process start it through storyd's own spawning code;
then the process ends in each way it can: SIGKILL, SIGTERM, an exception, the alarm
of an inline detector. Each time every shim must stop running within 2 s. After a
SIGKILL the child cannot be reaped by its parent, so "stopped" is "gone from /proc or
a zombie" (init reaps it; this sandbox's pid 1 may not); where storyd itself survives
to the end, its children must be gone from /proc altogether (reaped).
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from agents_harness import AgentsEnv, demo_workspace, hook_payload
from cli_harness import STORYD
from daemon_harness import DaemonProcess, wait_for

from storyd.core import children

GONE_WITHIN = 2.0


class SleepingGit:
    """A `git` first on PATH that writes its pid to a log and sleeps for 5 minutes."""

    def __init__(self, root: Path) -> None:
        shims = root / "shims"
        shims.mkdir()
        self.log = root / "git-pids.log"
        self.path = shims / "git"
        self.path.write_text(f'#!/bin/sh\necho "$$" >> {self.log}\nexec sleep 300\n')
        self.path.chmod(self.path.stat().st_mode | stat.S_IXUSR)
        self.dir = shims

    def env(self, env: dict[str, str]) -> dict[str, str]:
        """`env` with the shim first on PATH and git's deadline far away."""
        return dict(env, PATH=f"{self.dir}{os.pathsep}{env['PATH']}", STORYD_GIT_TIMEOUT="120")

    def pids(self) -> list[int]:
        """The pids of the shims started so far."""
        if not self.log.exists():
            return []
        return [int(line) for line in self.log.read_text().split()]

    def first(self) -> list[int]:
        """Wait for a shim to start; the pids started by then."""
        return wait_for(self.pids, 30, "git (the shim) to start")


def state(pid: int) -> str | None:
    """The process's state letter in /proc (None: no such process)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text.rpartition(")")[2].split()[0]


def our_children() -> list[int]:
    """This process's children (zombies too) but the guard, from /proc."""
    me = str(os.getpid())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat_line = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except (FileNotFoundError, NotADirectoryError, ProcessLookupError, PermissionError):
            continue
        if stat_line.rpartition(")")[2].split()[1] == me and children.GUARD.encode() not in cmdline:
            found.append(int(entry.name))
    return found


def running(pid: int) -> bool:
    return state(pid) not in (None, "Z", "X")


@pytest.fixture
def git(tmp_path: Path) -> Iterator[SleepingGit]:
    shim = SleepingGit(tmp_path)
    yield shim
    for pid in shim.pids():  # the old code leaves them sleeping: don't leave them to us
        if running(pid):
            os.kill(pid, signal.SIGKILL)


pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


@pytest.mark.slow
class TestDaemon:
    """A daemon's git children end with the daemon, however it ends."""

    @pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
    def test_git_ends_with_the_daemon(self, tmp_path: Path, git: SleepingGit,
                                      signum: int) -> None:  # fmt: skip
        ws = demo_workspace(tmp_path)
        env = git.env(AgentsEnv(tmp_path).env)
        proc = DaemonProcess(tmp_path, socket_path=tmp_path / "run" / "storyd.sock",
                             workspaces=[ws], env=env)  # fmt: skip
        proc.start(warm=False)
        try:
            started = git.first()
            assert all(running(pid) for pid in started)
            proc.signal(signum)
            assert proc.proc is not None
            proc.proc.wait(15)
            wait_for(lambda: not any(running(pid) for pid in git.pids()), GONE_WITHIN,
                     f"the daemon's git children to end after signal {signum}")  # fmt: skip
            if signum == signal.SIGTERM:  # the daemon lived to reap them
                wait_for(lambda: all(state(pid) is None for pid in git.pids()), GONE_WITHIN,
                         "the daemon's git children to be reaped")  # fmt: skip
        finally:
            proc.close()


@pytest.mark.slow
class TestHook:
    """A one-shot `storyd hook` killed while git runs leaves no git behind."""

    @pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
    def test_git_ends_with_the_hook(self, tmp_path: Path, git: SleepingGit,
                                    signum: int) -> None:  # fmt: skip
        ws = demo_workspace(tmp_path)
        env = git.env(AgentsEnv(tmp_path).env)
        payload = orjson.dumps(hook_payload("SessionStart", ws, source="startup"))
        hook = subprocess.Popen([STORYD, "hook", "session-start"], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=env, cwd=ws)  # fmt: skip
        try:
            assert hook.stdin is not None
            hook.stdin.write(payload)
            hook.stdin.close()
            started = git.first()
            assert all(running(pid) for pid in started)
            hook.send_signal(signum)
            hook.wait(15)
            wait_for(lambda: not any(running(pid) for pid in git.pids()), GONE_WITHIN,
                     f"the hook's git children to end after signal {signum}")  # fmt: skip
        finally:
            if hook.poll() is None:
                hook.kill()
                hook.wait()


_RAISES = """\
import sys
from storyd.detectors.gitview.proc import start
from storyd.core.storytime import _spawn
first = start([sys.argv[1], "status"], sys.argv[2])
second = _spawn(sys.argv[2], ("status",), 300.0)
assert second is not None
print(first.pid, second[0], flush=True)
raise RuntimeError("the caller failed with its git children running")
"""


class TestOrdinaryExits:
    """A process that ends by an exception or an alarm kills and reaps its children."""

    def test_an_exception_kills_and_reaps(self, tmp_path: Path, git: SleepingGit) -> None:
        env = git.env(dict(os.environ))
        done = subprocess.run([sys.executable, "-c", _RAISES, str(git.path), str(tmp_path)],
                              env=env, capture_output=True, timeout=30, check=False)  # fmt: skip
        assert done.returncode == 1 and b"RuntimeError" in done.stderr, done.stderr
        pids = [int(pid) for pid in done.stdout.split()]  # the shims may not have logged yet
        assert len(pids) == 2, done.stdout
        wait_for(lambda: all(state(pid) is None for pid in pids), GONE_WITHIN,
                 "both children killed and reaped at the exception's exit")  # fmt: skip

    def test_the_alarm_kills_and_reaps(self, tmp_path: Path, git: SleepingGit,
                                       monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
        from storyd.core import storytime
        from storyd.detectors import alarm
        from storyd.detectors.gitview import proc

        monkeypatch.setenv("PATH", git.env(dict(os.environ))["PATH"])
        for call in (lambda: proc.run([str(git.path), "status"], str(tmp_path)),
                     lambda: storytime._git(str(tmp_path), "status", timeout=300.0)):  # fmt: skip
            assert our_children() == []
            with pytest.raises(alarm.TimeUp):
                alarm.within(0.2, call)
            assert our_children() == []  # killed and reaped before the alarm's error left
        assert len(git.pids()) <= 2

    def test_release_kills_and_reaps_what_is_left(self, tmp_path: Path,
                                                  git: SleepingGit) -> None:  # fmt: skip
        from storyd.detectors.gitview.proc import start

        child = start([str(git.path), "status"], str(tmp_path))
        try:
            wait_for(git.pids, 5, "the shim to start")
            guard = children.group()
            assert guard is not None and os.getpgid(child.pid) == guard
            children.release()
            assert state(child.pid) is None and state(guard) is None
        finally:
            child.close()
