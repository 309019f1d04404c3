"""Open only regular files: a FIFO, socket or device in a workspace never blocks storyd.

open(2) of a FIFO waits for a writer for ever, and a read of a character device may
never end. Every read of a workspace-controlled path goes through here: the file is
opened with O_NONBLOCK (which makes open(2) of a FIFO return at once), fstat'd, refused
unless it is a regular file, then set back to blocking for the read.

    open_regular(path)            a descriptor (the caller closes it)
    read_regular(path, limit)     the whole file (at most `limit` bytes, else FileTooLarge)
    NotRegularFile                an OSError (EINVAL): callers that handle OSError keep working
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat

__all__ = ["FileTooLarge", "NotRegularFile", "open_regular", "read_regular"]


class NotRegularFile(OSError):
    """The path names a FIFO, socket, device or folder, not a regular file."""

    def __init__(self, path: str, mode: int) -> None:
        kind = _kind(mode)
        super().__init__(errno.EINVAL, f"not a regular file ({kind})", path)


class FileTooLarge(OSError):
    """The file is larger than the reader accepts."""

    def __init__(self, path: str, limit: int) -> None:
        super().__init__(errno.EFBIG, f"larger than {limit} bytes", path)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return name
    return "not a file"


def open_regular(path: str, flags: int = os.O_RDONLY) -> int:
    """A blocking descriptor on `path` when it is a regular file; NotRegularFile otherwise."""
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, mode)
        status = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, status & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str, limit: int | None = None) -> bytes:
    """The bytes of a regular file (FileTooLarge past `limit`, NotRegularFile if not one)."""
    fd = open_regular(path)
    try:
        if limit is not None and os.fstat(fd).st_size > limit:
            raise FileTooLarge(path, limit)
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, 1 << 20):
            total += len(chunk)
            if limit is not None and total > limit:
                chunks.clear()
                raise FileTooLarge(path, limit)
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
