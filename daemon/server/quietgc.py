"""Garbage collection held off while a big state file is read, and the heap given back.

Parsing a 4.6 MB state file creates some 300,000 containers. CPython (3.11) collects
from inside whichever allocation crosses a threshold, so a generation-2 pass over the
whole heap (34-71 ms) ran in the middle of orjson's parse (43-52 ms in one C call) and
of the units' build, with the interpreter lock held throughout: every other client
waited for both at once, over 100 ms (issue 29). Held off for the read, the parse is
one pause and the collection that follows is another, with the lock handed over in
between (`time.sleep(0)`).

`gc.disable()` is process-wide: holders are counted, so the first one in turns the
collector off and the last one out turns it back on (when it was on before), on error
too. Cycles are not lost, only collected once the read is over; refcounting frees
everything else meanwhile. (`gc.freeze()` was the other way: it would keep the frozen
heap's cyclic garbage for good in a process that never forks.)

glibc keeps the heap a big read freed (the file's bytes, the old snapshot's objects)
until asked: `trim` asks (`malloc_trim(0)`, as the warm-up does), at most once a
`TRIM_EVERY` seconds, off the event loop; ctypes releases the interpreter lock around it.
References: https://docs.python.org/3/library/gc.html,
https://man7.org/linux/man-pages/man3/malloc_trim.3.html.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import time
from collections.abc import Iterator

__all__ = ["BIG_BYTES", "TRIM_EVERY", "QuietGC"]

BIG_BYTES = 1024 * 1024
"""A file at least this big is read with the collector held off (a 1 MiB state file
parses in about 10 ms; below that a collection in the middle costs little)."""
TRIM_EVERY = 1.0
"""Seconds between two heap trims (a file rewritten ten times a second: one a second)."""


class QuietGC:
    """The collector's holders and the heap trims due after big reads."""

    def __init__(self, big_bytes: int = BIG_BYTES) -> None:
        self.big_bytes = big_bytes
        self._lock = threading.Lock()
        self._holders = 0
        self._restore = False  # whether the last holder out turns the collector back on
        self._trim_due = False
        self._trimmed = 0.0  # monotonic time of the last trim
        self.held = 0  # reads held so far (stats, tests)
        self.trims = 0

    def big(self, path: str) -> bool:
        """Whether the file at `path` is big enough to be read with the collector off."""
        try:
            return os.stat(path).st_size >= self.big_bytes
        except (OSError, ValueError):
            return False

    @contextlib.contextmanager
    def hold(self, path: str | None = None) -> Iterator[bool]:
        """The collector off for the block when `path` is big (or no path is given);
        yields whether it held. A big read also makes a heap trim due."""
        if path is not None and not self.big(path):
            yield False
            return
        with self._lock:
            if self._holders == 0:
                self._restore = gc.isenabled()
                gc.disable()
            self._holders += 1
            self.held += 1
        try:
            yield True
        finally:
            with self._lock:
                self._holders -= 1
                if self._holders == 0 and self._restore:
                    gc.enable()
                self._trim_due = True
            time.sleep(0)  # hand the interpreter lock over before the deferred collection

    def trim(self, *, force: bool = False) -> bool:
        """Give the freed heap back to the system when a big read made a trim due and
        the last trim is `TRIM_EVERY` seconds old (now, with `force`); True if it did."""
        now = time.monotonic()
        with self._lock:
            if not self._trim_due or (not force and now - self._trimmed < TRIM_EVERY):
                return False
            self._trim_due = False
            self._trimmed = now
            self.trims += 1
        give_back_freed_memory()
        return True


def give_back_freed_memory() -> None:
    """Return the heap freed so far to the system (glibc's malloc_trim; elsewhere, musl
    or macOS, there is nothing to ask)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)
