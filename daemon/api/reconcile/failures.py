"""What an OS error while writing (apply, undo) becomes: one line, its own exit code, and
which files were and were not written.

    WriteFailed (74, EX_IOERR)   the disk is full (ENOSPC, EDQUOT), or another I/O error
    WriteDenied (77, EX_NOPERM)  a folder or file may not be written (EACCES, EPERM, EROFS)

Exit 1 already means "changes proposed", so a failed write never ends with it.
"""

from __future__ import annotations

import errno

from storyd.core.errors import StorydError

__all__ = ["Progress", "WriteDenied", "WriteFailed", "failure", "os_failure"]

_DENIED = frozenset((errno.EACCES, errno.EPERM, errno.EROFS))


class WriteFailed(StorydError):
    """A write of reconcile failed (the disk is full, or an I/O error)."""

    code = 74
    name = "WRITE_FAILED"


class WriteDenied(WriteFailed):
    """A file or folder reconcile must write is not writable (permissions, read-only)."""

    code = 77
    name = "WRITE_DENIED"


class Progress:
    """The files of one apply or undo: those done so far, and those still to do."""

    def __init__(self, todo: list[str]) -> None:
        self.todo = list(todo)
        self.done: list[str] = []

    def wrote(self, path: str) -> None:
        """`path` is written (replaced, restored or removed)."""
        self.done.append(path)
        if path in self.todo:
            self.todo.remove(path)


def os_failure(exc: OSError, step: str) -> WriteFailed:
    """The one-line error for an OS error outside the writes (a lock on a file that
    became a FIFO, an unreadable folder): nothing was written by this step."""
    where = f" ({exc.filename})" if exc.filename else ""
    cls = WriteDenied if exc.errno in _DENIED else WriteFailed
    return cls(f"{step} failed: {exc.strerror or exc}{where}; nothing was written")


def failure(exc: OSError, step: str, progress: Progress, hint: str) -> WriteFailed:
    """The one-line error for `exc`, raised during `step` (e.g. `writing the undo record`)."""
    where = f" ({exc.filename})" if exc.filename else ""
    reason = exc.strerror or str(exc)
    done = ", ".join(progress.done) or "none"
    left = ", ".join(progress.todo) or "none"
    msg = f"{step} failed: {reason}{where}; written: {done}; not written: {left}; {hint}"
    cls = WriteDenied if exc.errno in _DENIED else WriteFailed
    return cls(msg)
