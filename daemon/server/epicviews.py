"""The `epic` op's views, kept while what they were read from is unchanged.

An epic view depends on more than its state file: the external epics' state files it
read, which files the epic's and those epics' ids resolve to (a folder added or renamed),
the older copy under docs/stories/, git (HEAD, the branch's ref, packed-refs, the
index: `storytime.stamp_files`) and the workspace folder itself. A kept view answers
only while all of that holds, by the rule every cached answer follows (store.Proof: the
change queue, else `stat` and git's racy rule), the ids resolved afresh (`places`, a
listing of two folders) and the workspace's identity compared: a write that finished
before the question is never answered from before it. Otherwise the view is read again,
one read of an epic at a time (the others wait for it and take it).

A 100,000-task epic's view is 8.2 MB of JSON and took 120-130 ms to read (a 4.6 MB
parse, 100,000 rows); kept, it is a few stats and listings. Views of `COMPRESS_BYTES`
or more are kept zlib-compressed (8.2 MB -> 0.3 MB; 11 ms to inflate, the interpreter
lock released), so a kept view costs the daemon's memory next to nothing.
"""

from __future__ import annotations

import os
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

import orjson

from storyd.api.epicview import places, read_epic
from storyd.core.caps import check_answer
from storyd.core.errors import LockTimeout, StorydError
from storyd.core.formats.epic import epic_state_file
from storyd.core.storytime import stamp_files
from storyd.core.switches import CONFIG
from storyd.server.store import Proof, folder_identity

if TYPE_CHECKING:
    from storyd.server.changes import Changes

__all__ = ["COMPRESS_BYTES", "KEPT_VIEWS", "EpicViews"]

KEPT_VIEWS = 64
"""Views kept at most (the least recently asked goes first)."""
COMPRESS_BYTES = 256 * 1024
"""A view's answer of this many bytes or more is kept compressed."""

_Key = tuple[str, str]


class _Kept:
    """One kept answer line and what proves it still the answer."""

    __slots__ = ("cap", "compressed", "externals", "identity", "line", "places", "proof")

    def __init__(self, line: bytes, proof: Proof, places: tuple[object, ...],
                 externals: tuple[str, ...], identity: tuple[int, int] | None) -> None:
        self.cap = CONFIG.max_state_bytes  # a reload that lowers it refuses what it read
        self.compressed = len(line) >= COMPRESS_BYTES
        self.line = zlib.compress(line, 1) if self.compressed else line
        self.proof = proof
        self.places = places
        self.externals = externals
        self.identity = identity

    def holds(self, workspace: str, epic_id: str, changes: Changes | None) -> bool:
        """Whether a read now would answer exactly this line."""
        if CONFIG.max_state_bytes != self.cap or folder_identity(workspace) != self.identity:
            return False
        if changes is not None:
            changes.drain()
        if not self.proof.holds(changes):
            return False
        try:
            return places(workspace, epic_id, self.externals) == self.places
        except (StorydError, OSError):
            return False

    def answer(self) -> bytes:
        """The answer line as it was rendered."""
        return zlib.decompress(self.line) if self.compressed else self.line


class EpicViews:
    """The kept views, keyed (workspace, epic id); any thread may ask (`line`)."""

    def __init__(self, changes: Changes | None, served_big: Callable[[], None] | None = None,
                 file_lock: Callable[[str, str], AbstractContextManager[object]] | None = None,
                 limit: int = KEPT_VIEWS) -> None:
        self.changes = changes
        self.file_lock = file_lock  # the lock the cache's reads of a state file take
        self.served_big = served_big  # a big kept view was inflated: trim the heap soon
        self.limit = limit
        self._kept: OrderedDict[_Key, _Kept] = OrderedDict()
        self._lock = threading.Lock()  # guards _kept and _reading
        self._reading: dict[_Key, threading.Lock] = {}
        self.reads = 0  # views read (each a parse of the epic's state file)
        self.served = 0  # answers from a kept view

    def line(self, workspace: str, epic_id: str, lock_timeout: float, cap: int) -> bytes:
        """The `epic` op's answer line (`{"ok":true,"view":...`, no closing brace):
        the kept one while it holds, else read now (and kept); StorydError as a read."""
        key = (workspace, epic_id)
        with self._lock:
            if len(self._reading) > 4 * self.limit and key not in self._reading:
                self._reading.clear()  # a lock still held only loses its single flight
            reading = self._reading.setdefault(key, threading.Lock())
        # one read of an epic at a time; who waited takes its view. A waiter waits at
        # most the lock bound (a read that failed does not make the next one queue
        # behind it, each holding a worker): then 75, as a held writers' lock gives
        if not reading.acquire(timeout=max(lock_timeout, 0.0)):
            msg = f"epic {epic_id}: another read of it did not end within {lock_timeout:g} s"
            raise LockTimeout(msg)
        try:
            kept = self._kept.get(key)
            if kept is not None and kept.holds(workspace, epic_id, self.changes):
                with self._lock:
                    self.served += 1
                    if key in self._kept:
                        self._kept.move_to_end(key)
                if kept.compressed and self.served_big is not None:
                    self.served_big()
                return kept.answer()
            return self._read(key, lock_timeout, cap)
        finally:
            reading.release()

    def _read(self, key: _Key, lock_timeout: float, cap: int) -> bytes:
        workspace, epic_id = key
        changes = self.changes
        old = self._kept.get(key)
        if changes is not None and old is not None:  # the last read's folders, watched
            for folder in old.proof.folders:
                changes.watch(folder)
        seq = changes.drain() if changes is not None else 0
        started = time.time_ns()
        identity = folder_identity(workspace)
        git = stamp_files(workspace) or ((os.path.join(workspace, ".git"), None),)
        with self._lock:
            self._kept.pop(key, None)
            self.reads += 1
        if self.file_lock is None:
            got = read_epic(workspace, epic_id, lock_timeout)
        else:  # never beside the cache's read of the same file: one parse tree at a time
            with self.file_lock(workspace, epic_state_file(workspace, epic_id)):
                got = read_epic(workspace, epic_id, lock_timeout)
        line = orjson.dumps({"ok": True, "view": got.view})[:-1]
        check_answer(len(line), cap)
        if got.settled:
            files = tuple((os.path.join(workspace, p), sig) for p, sig in got.seen.items())
            proof = Proof((*files, *git), seq, started)
            if changes is not None:  # the next read of the same files is covered
                for folder in proof.folders:
                    changes.watch(folder)
            kept = _Kept(line, proof, got.places, got.externals, identity)
            with self._lock:
                self._kept[key] = kept
                while len(self._kept) > self.limit:
                    self._kept.popitem(last=False)
        return line

    def stats(self) -> dict[str, int]:
        """How many views were read, served kept, and are kept now."""
        with self._lock:
            return {"reads": self.reads, "served": self.served, "kept": len(self._kept)}
