"""Read a state file under a shared flock(2) lock, as util-linux `flock -s` does.

Why flock(2) and not fasteners: fasteners' interprocess locks are fcntl/lockf record
locks, and on Linux those neither block nor are blocked by flock(2) locks, which is
what the orchestrators' writers take (`flock -x FILE ...`). fasteners stays in use for
storyd's own single-instance lock beside the socket.

The wait is bounded: a writer that holds `flock -x` past the bound gives LockTimeout
(exit 75). A writer that replaces the file by rename while we wait is detected by
comparing the locked descriptor's inode with the path's, and the read starts again on
the new file, so the old inode's content is never returned.
"""

from __future__ import annotations

import fcntl
import os
import stat
import time

from storyd.core import redo
from storyd.core.errors import DataError, LockTimeout, StateFileMissing
from storyd.core.switches import CONFIG

__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "LockedRead",
    "flock_wait",
    "read_locked",
    "same_file",
    "too_large",
]

DEFAULT_LOCK_TIMEOUT = 5.0
_FIRST_DELAY = 0.0005
_MAX_DELAY = 0.01


class LockedRead:
    """What one locked read saw: the bytes and the identity of the file they came from."""

    __slots__ = ("ctime_ns", "data", "inode", "mtime_ns", "redo", "size")

    def __init__(self, data: bytes, st: os.stat_result) -> None:
        self.data = data
        self.redo: str | None = None  # core/redo.py `pending`: "pending", "foreign"
        self.inode = (st.st_dev, st.st_ino)
        self.mtime_ns = st.st_mtime_ns
        self.ctime_ns = st.st_ctime_ns
        self.size = st.st_size

    @property
    def signature(self) -> tuple[int, int, int, int, int]:
        """The file's identity as `pipeline.signature` states it (fstat, under the lock)."""
        dev, ino = self.inode
        return (dev, ino, self.size, self.mtime_ns, self.ctime_ns)


def _open_regular(path: str, name: str) -> int:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise StateFileMissing(f"{name} not found") from None
    except NotADirectoryError:
        raise StateFileMissing(f"{name} not found") from None
    except OSError as exc:
        raise StateFileMissing(f"{name} not readable: {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise StateFileMissing(f"{name} not found")
    return fd


def same_file(fd: int, path: str) -> bool:
    try:
        current = os.stat(path)
    except OSError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (current.st_dev, current.st_ino)


def _read_all(fd: int, path: str) -> bytes:
    """The whole file, refusing one over the state-file cap (switches.CONFIG.max_state_bytes).

    A file whose size already says so is refused before a byte is read; one that grows
    past the limit while read drops its chunks before the error is raised, so that the
    error's traceback (which keeps this frame) never keeps up to the cap alive.
    """
    cap = CONFIG.max_state_bytes
    size = os.fstat(fd).st_size
    if size > cap:
        raise DataError(too_large(path, size, cap))
    # one read at the size fstat gave, and one more byte, sees the end in one system
    # call: each call hands the interpreter lock over and waits to take it back (behind
    # a 70 ms parse on another thread, a 1 MiB-chunked read of a 5 MB file took 80 ms)
    first = os.read(fd, size + 1)
    if len(first) == size:
        return first
    chunks: list[bytes] = [first]  # it grew (or shrank) since: read on to the end
    total = len(first)
    while total <= cap and (chunk := os.read(fd, 1 << 20)):
        total += len(chunk)
        chunks.append(chunk)
    if total > cap:
        chunks.clear()
        first = chunk = b""
        raise DataError(too_large(path, total, cap))
    return b"".join(chunks)


def too_large(path: str, size: int, cap: int) -> str:
    """The error of a state file over the cap: its size, the cap and how to raise it."""
    return (
        f"{path}: {size:,} bytes, larger than the {cap:,}-byte state-file cap; refusing "
        "to read (raise limits.max_state_bytes in storyd's configuration, at most 64 MiB)"
    )


def flock_wait(fd: int, operation: int, path: str, timeout: float, deadline: float) -> None:
    """flock(2) `operation` (LOCK_SH or LOCK_EX) on `fd`, polling until `deadline`
    (time.monotonic()); LockTimeout (exit 75) names `path` and `timeout` when it passes."""
    delay = _FIRST_DELAY
    while True:
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                msg = (
                    f"{path}: a writer has held an exclusive lock for more than "
                    f"{timeout:g} s; try again, or raise --lock-timeout"
                )
                raise LockTimeout(msg) from None
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, _MAX_DELAY)


def read_locked(path: str, timeout: float = DEFAULT_LOCK_TIMEOUT, name: str = "") -> LockedRead:
    """Read `path` whole under `flock -s`, waiting at most `timeout` seconds for writers.

    `name` is how errors call the file (the seed says "execution-state.json not found").
    A reader never writes: a killed reconcile's redo record for the file is only noted
    (`LockedRead.redo`, core/redo.py); reconcile finishes it.
    """
    name = name or os.path.basename(path)
    deadline = time.monotonic() + timeout
    while True:
        fd = _open_regular(path, name)
        try:
            flock_wait(fd, fcntl.LOCK_SH, path, timeout, deadline)
            if same_file(fd, path):
                st = os.fstat(fd)
                got = LockedRead(_read_all(fd, path), st)
                got.redo = redo.pending(path, st)
                return got
        finally:
            os.close(fd)  # closing the descriptor releases the flock
