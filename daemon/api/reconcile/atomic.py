"""Replace a state file the way its writers agree to: under their `flock -x`, atomically.

    locked(path, timeout)   the writers' exclusive flock(2) on the file, with a bounded
                            wait (LockTimeout, exit 75); re-taken when a writer renamed a
                            new file over the path while we waited
    replace(path, data)     a temporary file in the same folder, written and fsynced,
                            renamed over the path, then the folder fsynced: a crash at
                            any moment leaves the old file or the new one, never a mix

STORYD_RECONCILE_HOOK (tests only) makes the writer SIGKILL itself at a named point:
`kill-before-rename` (temp written and fsynced, not renamed) or `kill-after-rename`;
or `kill-at-N`: at the N-th system call that changes the disk (each open of a temp
file, write, fsync, rename and unlink of apply and undo, undo records included), so a
test can kill at every one of them in turn.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import stat
import time
from collections.abc import Iterator

from storyd.core.locking import flock_wait, same_file
from storyd.core.regular import open_regular
from storyd.core.switches import CONFIG

__all__ = ["HOOK_ENV", "TEMP_MARK", "clean_temps", "locked", "read_fd", "replace", "step", "unlink"]

HOOK_ENV = "STORYD_RECONCILE_HOOK"
TEMP_MARK = ".storyd-reconcile."


def _hook(point: str) -> None:
    if os.environ.get(HOOK_ENV) == f"kill-{point}":
        os.kill(os.getpid(), signal.SIGKILL)


def step() -> None:
    """A disk-changing system call is done: the test hook `kill-at-N` may fire here."""
    spec = os.environ.get(HOOK_ENV, "")
    if spec.startswith("kill-at-"):
        CONFIG.disk_steps += 1  # process-wide: this process's steps so far
        if spec == f"kill-at-{CONFIG.disk_steps}":
            os.kill(os.getpid(), signal.SIGKILL)


def unlink(path: str) -> None:
    """os.unlink, counted as a step."""
    os.unlink(path)
    step()


@contextlib.contextmanager
def locked(path: str, timeout: float) -> Iterator[int]:
    """Hold `flock -x` on `path` (the descriptor is yielded); LockTimeout past `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        fd = open_regular(path)  # a FIFO would block open(2) for ever
        try:
            flock_wait(fd, fcntl.LOCK_EX, path, timeout, deadline)
            if same_file(fd, path):  # else a writer renamed a new file over it: lock that
                yield fd
                return
        finally:
            os.close(fd)  # releases the lock


def read_fd(fd: int) -> bytes:
    """The whole file behind a descriptor, from its start."""
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _fsync_dir(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace(path: str, data: bytes, *, hooked: bool = True) -> None:
    """Write `data` to a same-folder temp file, fsync, rename over `path`, fsync the folder.

    The file's permission bits are kept. `hooked`: the test hook may fire (state files).
    """
    folder, name = os.path.split(os.path.abspath(path))
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mode = 0o644
    temp = os.path.join(folder, f".{name}{TEMP_MARK}{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        step()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
            step()
        os.fsync(fd)
        step()
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    os.close(fd)
    if hooked:
        _hook("before-rename")
    os.replace(temp, path)
    step()
    if hooked:
        _hook("after-rename")
    _fsync_dir(folder)
    step()


def clean_temps(path: str) -> list[str]:
    """Remove temp files a killed reconcile left beside `path` (their pid is gone)."""
    folder, name = os.path.split(os.path.abspath(path))
    prefix = f".{name}{TEMP_MARK}"
    removed: list[str] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for entry in names:
        if not (entry.startswith(prefix) and entry.endswith(".tmp")):
            continue
        pid = entry[len(prefix) : -len(".tmp")]
        if pid.isdigit() and int(pid) != os.getpid() and _alive(int(pid)):
            continue
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(folder, entry))
            removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
