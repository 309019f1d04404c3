"""A Source that keeps the state file's bytes it read, their signature and when.

A miss's one-unit read (Reads.read_one) and the early door's (early.py) keep them, so
that a file torn afterwards answers from them (Reads.keep_newer, `replay_one`): never
an answer older than one already given, nor an error where a good answer was given.
"""

from __future__ import annotations

import time

from storyd.core.formats.base import Source

__all__ = ["KeepingSource"]


class KeepingSource(Source):
    """Reads as a Source does; the state file `relpath`'s bytes are kept in `data`, its
    signature in `sig` and the wall-clock time its read began in `read_ns`."""

    __slots__ = ("data", "read_ns", "sig", "state")

    def __init__(self, workspace: str, lock_timeout: float, relpath: str) -> None:
        super().__init__(workspace, lock_timeout)
        self.state = relpath
        self.data: bytes | None = None
        self.sig: tuple[int, int, int, int, int] | None = None
        self.read_ns = 0

    def read(self, relpath: str, name: str = "", *, git: bool = False) -> bytes:
        if relpath != self.state:
            return super().read(relpath, name, git=git)
        began = time.time_ns()
        data = super().read(relpath, name, git=git)
        self.data, self.sig, self.read_ns = data, self.seen.get(relpath), began
        return data
