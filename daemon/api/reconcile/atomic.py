"""Replace a state file the way its writers agree to: under their `flock -x`, atomically.

    locked(path, timeout)   the writers' exclusive flock(2) on the file, with a bounded
                            wait (LockTimeout, exit 75); re-taken when a writer renamed a
                            new file over the path while we waited
    overwrite(fd, path, data)  a state file's new bytes written INTO the locked file
                            (same inode), so a writer queued on the lock with its own
                            descriptor, or one that renames without the lock, never
                            loses its update; the redo record (core/redo.py) is
                            written first, then `data` padded with blanks to the old
                            length, fsync, truncate, fsync
    recover(fd, path)       finish what a killed overwrite left, from storyd's own redo
                            record for that file (torn mid-write included), exactly once
    replace(path, data)     a temporary file in the same folder, written and fsynced,
                            renamed over the path, then the folder fsynced (`.bak`
                            files, undo records, settings): a crash at any moment
                            leaves the old file or the new one, never a mix

STORYD_RECONCILE_HOOK (tests only) makes the writer SIGKILL itself at a named point:
`kill-before-rename` (temp written and fsynced, not renamed or written over the file)
or `kill-after-rename` (the file holds the new bytes); `wait-before-write:FLAG` holds
the locks, plan compared, until the file FLAG exists (at most 30 s: racing-writer tests);
or `kill-at-N`: at the N-th system call that changes the disk (each open of a temp
file, write, fsync, rename and unlink of apply and undo, undo records included, and
each 64 KiB piece of an in-place write), so a test can kill at every one of them in
turn, mid-write included.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import stat
import time
from collections.abc import Iterator

from storyd.core import redo
from storyd.core.durable import fsync, fsync_dir, read_fd
from storyd.core.locking import flock_wait, same_file
from storyd.core.regular import open_regular
from storyd.core.switches import CONFIG

__all__ = [
    "HOOK_ENV",
    "TEMP_MARK",
    "clean_temps",
    "locked",
    "overwrite",
    "recover",
    "replace",
    "step",
    "unlink",
    "wait_hook",
]

HOOK_ENV = "STORYD_RECONCILE_HOOK"
_CHUNK = 64 * 1024  # bytes of an in-place write between two steps (kill-at-N can tear it)
TEMP_MARK = ".storyd-reconcile."


def _hook(point: str) -> None:
    if os.environ.get(HOOK_ENV) == f"kill-{point}":
        os.kill(os.getpid(), signal.SIGKILL)


def wait_hook() -> None:
    """`wait-before-write:FLAG` (tests only): wait, holding the locks, until FLAG exists."""
    spec = os.environ.get(HOOK_ENV, "")
    if spec.startswith("wait-before-write:"):
        flag = spec.split(":", 1)[1]
        deadline = time.monotonic() + 30
        while not os.path.exists(flag) and time.monotonic() < deadline:
            time.sleep(0.005)


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
        # never through a final link (ELOOP), and a FIFO would block open(2) for ever
        fd = open_regular(path, os.O_RDWR | os.O_NOFOLLOW)
        try:
            flock_wait(fd, fcntl.LOCK_EX, path, timeout, deadline)
            if same_file(fd, path):  # else a writer renamed a new file over it: lock that
                yield fd
                return
        finally:
            os.close(fd)  # releases the lock


def replace(path: str, data: bytes, *, hooked: bool = True) -> None:
    """Write `data` to a same-folder temp file, fsync, rename over `path`, fsync the folder.

    The file's permission bits are kept. `hooked`: the test hook may fire (state files).
    """
    folder = os.path.dirname(os.path.abspath(path))
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mode = 0o644
    temp = _temp(path)
    _write_temp(temp, data, mode)
    if hooked:
        _hook("before-rename")
    os.replace(temp, path)
    step()
    if hooked:
        _hook("after-rename")
    fsync_dir(folder)
    step()


def _temp(path: str) -> str:
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f".{name}{TEMP_MARK}{os.getpid()}.tmp")


def _create(temp: str, mode: int) -> int:
    """A new file at `temp`, never through a link: one already there (a dead run's, or a
    repository's link to somewhere else) is removed first, not followed."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(temp, flags, mode)
    except FileExistsError:
        os.unlink(temp)  # unlink(2) removes a link itself, never what it leads to
        return os.open(temp, flags, mode)


def _write_temp(temp: str, data: bytes, mode: int) -> None:
    fd = _create(temp, mode)
    try:
        step()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
            step()
        fsync(fd)
        step()
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    os.close(fd)


def overwrite(fd: int, path: str, data: bytes) -> bool:
    """Write `data` into the file behind `fd` (held under `flock -x`): same inode, so no
    writer holding its own descriptor on it loses an update. False when the path no
    longer names that file afterwards (a writer renamed its own over it without the
    lock: its version stands, ours is not in the file).

    The redo record (core/redo.py: the old bytes and the new, in storyd's private
    folder, bound to this file) is written and fsynced first; then `data`, padded with
    blanks to the old length, in `_CHUNK` pieces, fsync, truncate, fsync; then the
    record goes. A kill at any point leaves the old bytes, the new ones, or a torn file
    and its record, which the next apply, undo or `reconcile --recover` finishes
    (`recover`); readers only report it.
    """
    before = read_fd(fd)
    redo.prepare_dir()
    record = redo.record_path(os.fstat(fd))
    _write_temp(record, redo.encode(path, os.fstat(fd), before, data), 0o600)
    fsync_dir(os.path.dirname(record))
    step()
    _hook("before-rename")
    padded = data + b" " * (len(before) - len(data))
    try:
        _write_in_place(fd, padded)
    except OSError:
        _roll_back(fd, before, record)  # a file that could not grow (ENOSPC) stays whole
        raise
    if len(data) < len(before):
        os.ftruncate(fd, len(data))
        step()
        fsync(fd)
        step()
    unlink(record)
    _hook("after-rename")
    return same_file(fd, path)


def _write_in_place(fd: int, padded: bytes) -> None:
    view, offset = memoryview(padded), 0
    while offset < len(padded):
        offset += os.pwrite(fd, view[offset : offset + _CHUNK], offset)
        step()
    fsync(fd)
    step()


def _roll_back(fd: int, before: bytes, record: str) -> None:
    """A write into the file failed part-way (ENOSPC while it grew, EIO): put the old
    bytes back (they fit the blocks the file already had), then drop the record. When
    that fails too, the record stays: `reconcile --recover` finishes the write later."""
    try:
        _write_in_place(fd, before)
        os.ftruncate(fd, len(before))
        fsync(fd)
        os.unlink(record)
    except OSError:
        return


def recover(fd: int, path: str) -> str | None:
    """Under `flock -x` on `path`: finish a killed overwrite from storyd's own redo
    record for this file (core/redo.py), then remove dead temps beside it (never read:
    a temp in a workspace folder may be a repository's). What redo.recover did."""
    outcome = redo.recover(fd, path)
    clean_temps(path)
    return outcome


def _dead_temps(folder: str, prefix: str) -> list[str]:
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    dead = []
    for entry in names:
        if entry.startswith(prefix) and entry.endswith(".tmp"):
            pid = entry[len(prefix) : -len(".tmp")]
            if not (pid.isdigit() and int(pid) != os.getpid() and _alive(int(pid))):
                dead.append(entry)
    return dead


def clean_temps(path: str) -> list[str]:
    """Remove temp files a killed reconcile left beside `path` (their pid is gone)."""
    folder, name = os.path.split(os.path.abspath(path))
    removed: list[str] = []
    for entry in _dead_temps(folder, f".{name}{TEMP_MARK}"):
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
