"""A file `storyd install` edits, found, read and replaced so that a hostile repository
cannot steer the edit, and an agent's own edit made meanwhile is never lost.

    MAX_BYTES              the largest file read (4 MiB): settings files are kilobytes
    resolve(path, project) the file's real path; DataError when a project's file resolves
                           outside the project (a committed symlink to ~/.bashrc, /dev/zero)
    read(real, shown)      its bytes, None when absent; non-blocking and bounded
                           (core/regular.py): DataError for a FIFO, a device, a folder or
                           a file over MAX_BYTES, never a hang
    swap(real, shown, compute, before)
                           compare-and-swap: under flock(2) on the file's folder, the
                           new bytes are computed from `before`, the file is read again,
                           and only when it still holds `before` is it replaced (a same-
                           folder temp file renamed over it, file and folder fsynced); when
                           a writer changed it, the edit is computed again from its bytes
                           (TRIES times, then LockTimeout, exit 75)
    Outcome                what one computed edit does: its lines, said before and after
    Planned                a file's edit computed from the bytes read, nothing written:
                           every file of a command is planned (and any refused) before
                           the first is committed

A user's file may be a dotfile manager's symlink: `resolve` follows it wherever it goes.
The test hook `wait-before-write:FLAG` of STORYD_RECONCILE_HOOK (reconcile/atomic.py)
holds a swap, lock taken and edit computed, until FLAG exists.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from storyd.core.errors import DataError, LockTimeout, StorydError

__all__ = ["LOCK_TIMEOUT", "MAX_BYTES", "TRIES", "Outcome", "Planned", "read", "resolve", "swap"]

MAX_BYTES = 4 << 20
TRIES = 5
LOCK_TIMEOUT = 10.0  # another `storyd install` holding the folder: it takes milliseconds

T = TypeVar("T")
Compute = Callable[[bytes | None], tuple[bytes | None, T]]  # (what the file should hold, T)


def resolve(path: str, project: str | None) -> str:
    """The path with every symlink followed; a project's file must stay inside it."""
    real = os.path.realpath(path)
    if project is not None:
        root = os.path.realpath(project)
        if os.path.commonpath([root, real]) != root:
            msg = f"{path}: resolves outside the project (to {real}); storyd will not edit it"
            raise DataError(msg)
    return real


def read(real: str, shown: str) -> bytes | None:
    """The file's bytes (None: absent); DataError when it is no regular file or too big."""
    from storyd.core.regular import FileTooLarge, NotRegularFile, read_regular

    try:
        return read_regular(real, MAX_BYTES)
    except FileNotFoundError:
        return None
    except (NotRegularFile, FileTooLarge) as exc:
        raise DataError(f"{shown}: {exc.strerror}; storyd will not edit it") from None
    except OSError as exc:
        raise DataError(f"{shown}: cannot read: {exc.strerror}") from None


@contextlib.contextmanager
def _folder_locked(folder: str, shown: str) -> Iterator[None]:
    """flock(2) LOCK_EX on the folder itself: no lock file is left in the user's tree."""
    from storyd.core.locking import flock_wait

    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            flock_wait(fd, fcntl.LOCK_EX, folder, LOCK_TIMEOUT, time.monotonic() + LOCK_TIMEOUT)
        except LockTimeout:
            msg = (f"{shown}: another storyd install has held its folder for more than "
                   f"{LOCK_TIMEOUT:g} s; nothing written, try again")  # fmt: skip
            raise LockTimeout(msg) from None
        yield
    finally:
        os.close(fd)


def _write(real: str, data: bytes | None) -> None:
    from storyd.api.reconcile.atomic import replace
    from storyd.core.durable import fsync_dir

    if data is None:
        os.unlink(real)
        fsync_dir(os.path.dirname(real))
        return
    replace(real, data, hooked=False)  # its temp is made O_EXCL | O_NOFOLLOW


def swap(real: str, shown: str, compute: Compute[T], before: bytes | None) -> T:
    """Write what `compute` makes of the file's bytes, unless they changed meanwhile (then
    compute again from the new ones); `compute`'s second item, from the bytes written."""
    from storyd.api.reconcile.atomic import wait_hook

    folder = os.path.dirname(real)
    try:
        os.makedirs(folder, exist_ok=True)
        with _folder_locked(folder, shown):
            for _ in range(TRIES):
                wanted, result = compute(before)
                if wanted == before:
                    return result
                wait_hook()
                now = read(real, shown)  # just before the rename: the compare of the swap
                if now == before:
                    _write(real, wanted)
                    return result
                before = now
    except OSError as exc:
        raise StorydError(f"cannot write {shown}: {exc.strerror}") from None
    msg = f"{shown}: changed {TRIES} times while storyd edited it; nothing written, try again"
    raise LockTimeout(msg)


class Outcome:
    """What an edit computed from some bytes does: `lines` (a dry run's, prefixed `would:`
    when `changed`), `done` (said once written) and `after` (run once written)."""

    def __init__(self, lines: list[str], *, changed: bool = True, done: tuple[str, ...] = (),
                 after: Callable[[], None] | None = None) -> None:  # fmt: skip
        self.lines = lines
        self.changed = changed
        self.done = done
        self.after = after


class Planned:
    """One file's edit, computed (and so checked) from the bytes read; nothing written."""

    def __init__(self, shown: str, real: str, raw: bytes | None,
                 compute: Compute[Outcome]) -> None:  # fmt: skip
        self.shown = shown
        self.real = real
        self.raw = raw
        self.compute = compute
        self.outcome = compute(raw)[1]  # a refusal is raised here, before any file is written

    def preview(self) -> list[str]:
        """What the edit would do (a dry run)."""
        prefix = "would: " if self.outcome.changed else ""
        return [f"{self.shown}: {prefix}{line}" for line in self.outcome.lines]

    def commit(self) -> list[str]:
        """Swap the edit in (made again if a writer changed the file); what it did."""
        outcome = swap(self.real, self.shown, self.compute, self.raw)
        if outcome.after is not None:
            outcome.after()
        return [f"{self.shown}: {line}" for line in (*outcome.lines, *outcome.done)]
