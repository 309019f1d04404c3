"""One git process with pipes, started by os.posix_spawn: what the views took from
subprocess.Popen, without its import (subprocess, locale, signal and selectors: ~2.4 ms
of a hook's start without a daemon) and with posix_spawn's cheaper start.

    Process(argv, cwd, stdin=DEVNULL|PIPE|fd, stdout=..., stderr=...)
        .pid, .stdin/.stdout/.stderr (a pipe's end in this process, or None)
        .communicate(timeout)  every pipe read to its end, then the exit: (out, err)
        .poll(), .wait(timeout), .kill(), .close()

The work tree is given to git as `-C cwd` (posix_spawn has no chdir); a missing folder
is the OSError Popen raised. A timeout raises TimeoutError and leaves the process to
the caller (kill it, then communicate or wait), as subprocess.TimeoutExpired did.
Pipes and /dev/null are opened close-on-exec, so the child gets only 0, 1 and 2.
Each child joins storyd.core.children's guarded group: it dies with this process,
however this process ends. A wait with a timeout is storyd.core.childwait's: a pidfd,
a kqueue, waitid or a waitpid poll, whichever this system offers (macOS has no pidfd,
and no os.waitid before Python 3.13).
"""

from __future__ import annotations

import errno
import os
import select
import time

__all__ = ["DEVNULL", "PIPE", "Process"]

DEVNULL = -3
PIPE = -1
_CHUNK = 65536


class Process:
    """A started git process and this side of its pipes (raw descriptors)."""

    __slots__ = ("pid", "returncode", "stderr", "stdin", "stdout")

    def __init__(self, argv: list[str], cwd: str, env: dict[str, str], *,
                 stdin: int = DEVNULL, stdout: int = PIPE, stderr: int = PIPE) -> None:  # fmt: skip
        from storyd.core.children import spawn  # the child ends with this process

        if not os.path.isdir(cwd):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), cwd)
        self.returncode: int | None = None
        ends: list[int | None] = [None, None, None]  # this side of each pipe
        given: list[int] = []  # the child's copies, closed here once it started
        null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        given.append(null)
        actions = []
        try:
            for target, spec in enumerate((stdin, stdout, stderr)):
                if spec == PIPE:
                    read_end, write_end = os.pipe()
                    child, ends[target] = (read_end, write_end) if target == 0 else (
                        write_end, read_end)  # fmt: skip
                    given.append(child)
                else:
                    child = null if spec == DEVNULL else spec
                actions.append((os.POSIX_SPAWN_DUP2, child, target))
            self.pid = spawn(argv[0], [argv[0], "-C", cwd, *argv[1:]], env, actions)
        except BaseException:
            for end in ends:
                if end is not None:
                    os.close(end)
            raise
        finally:
            for fd in given:
                os.close(fd)
        self.stdin, self.stdout, self.stderr = ends

    def poll(self) -> int | None:
        """The exit status once the process has ended (reaped here), else None."""
        if self.returncode is None:
            self._reap(os.WNOHANG)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit status; TimeoutError when it has not ended within `timeout`."""
        if self.returncode is None and timeout is not None:
            from storyd.core.childwait import await_exit  # by what this system offers

            status = await_exit(self.pid, timeout)
            if status is not None:  # the only way left reaped it
                self.returncode = os.waitstatus_to_exitcode(status)
        if self.returncode is None:
            self._reap(0)
        assert self.returncode is not None, "a blocking waitpid reaps"
        return self.returncode

    def _reap(self, flags: int) -> None:
        try:
            pid, status = os.waitpid(self.pid, flags)
        except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored): as subprocess, 0
            self.returncode = 0
            return
        if pid:
            self.returncode = os.waitstatus_to_exitcode(status)

    def kill(self) -> None:
        """SIGKILL, unless it has already been reaped."""
        if self.returncode is None:
            try:  # noqa: SIM105 (contextlib imports collections, functools...: a hook's start)
                os.kill(self.pid, 9)
            except ProcessLookupError:
                pass

    def communicate(self, timeout: float | None = None) -> tuple[bytes, bytes]:
        """Close stdin, read stdout and stderr to their ends, wait for the exit; all within
        `timeout` (TimeoutError: what was read is dropped, the pipes stay open)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._close("stdin")
        chunks: dict[int, list[bytes]] = {fd: [] for fd in (self.stdout, self.stderr)
                                          if fd is not None}  # fmt: skip
        open_fds = list(chunks)
        while open_fds:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError
            ready, _, _ = select.select(open_fds, [], [], left)
            if not ready:
                raise TimeoutError
            for fd in ready:
                data = os.read(fd, _CHUNK)
                if data:
                    chunks[fd].append(data)
                else:
                    open_fds.remove(fd)
        out = b"".join(chunks.get(self.stdout, [])) if self.stdout is not None else b""
        err = b"".join(chunks.get(self.stderr, [])) if self.stderr is not None else b""
        self._close("stdout")
        self._close("stderr")
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return out, err

    def close(self) -> None:
        """Close this side of every pipe (the process is left as it is)."""
        for name in ("stdin", "stdout", "stderr"):
            self._close(name)

    def _close(self, name: str) -> None:
        fd = getattr(self, name)
        if fd is not None:
            setattr(self, name, None)
            os.close(fd)
