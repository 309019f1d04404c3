"""Two steps every careful writer of a state file takes: read the whole file behind the
descriptor it holds the lock on, and make a rename or an unlink in a folder durable."""

from __future__ import annotations

import os

__all__ = ["fsync_dir", "read_fd"]


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
        os.fsync(fd)
    finally:
        os.close(fd)
