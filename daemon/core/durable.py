"""Steps every careful writer of a state file takes: read the whole file behind the
descriptor it holds the lock on, make its bytes durable, and make a rename or an unlink
in a folder durable.

`fsync` is the one call for "on the disk": on macOS fsync(2) only hands the data to the
drive, whose cache may lose it at a power cut; fcntl(F_FULLFSYNC) asks the drive to
write it out, and is used wherever the system has it (a file system that refuses it
gets fsync(2), as SQLite does).
"""

from __future__ import annotations

import os

__all__ = ["fsync", "fsync_dir", "read_fd"]


def read_fd(fd: int) -> bytes:
    """The whole file behind a descriptor, from its start."""
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def fsync_dir(folder: str) -> None:
    """fsync(2) the folder itself, so that a rename, link or unlink in it survives a
    crash (the file's own fsync does not cover its directory entry)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fsync(fd)
    finally:
        os.close(fd)


def fsync(fd: int) -> None:
    """Make what was written through `fd` durable: F_FULLFSYNC where the system has it
    (macOS), else (or when the file system refuses it) fsync(2)."""
    import fcntl  # built in; not on a path that never writes

    full = vars(fcntl).get("F_FULLFSYNC")  # macOS only: Linux's fcntl has no such name
    if full is not None:
        try:
            fcntl.fcntl(fd, full)
        except OSError:  # ENOTSUP, EINVAL: a file system without it (smbfs, some FUSE)
            pass
        else:
            return
    os.fsync(fd)
