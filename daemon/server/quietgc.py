"""Garbage collection held off while a big state file is parsed, and the heap given back.

CPython 3.11 collects from inside whichever allocation crosses a threshold, even in
the middle of a C call: orjson's parse of a 4.6 MB state file (43-52 ms, one call,
the interpreter lock held) made some 285 collections, among them generation-2 passes
over the whole heap (34-84 ms of CPU), so every other client waited for both at once,
over 100 ms (issue 29). Held off for the parse, the parse is one pause and the one
collection after it (a generation-0 pass over the parsed tree, 13-25 ms) is another,
the lock handed over in between (`time.sleep(0)`). Only the parse: held over the
units' build and install as well, that one deferred pass walked every object they made
(worse maxima, measured). From 3.12 collections wait for the evaluation loop, so the
hold costs nothing there.

`gc.disable()` is process-wide: holders are counted, so the first one in turns the
collector off and the last one out turns it back on (when it was on before), on error
too. Cycles are not lost, only collected once the parse is over; refcounting frees
everything else meanwhile. (`gc.freeze()` was the other way: it would keep the frozen
heap's cyclic garbage for good in a process that never forks.)

glibc keeps the heap a big read freed (the file's bytes, the old snapshot's objects)
until asked: `trim` asks (`malloc_trim(0)`, as the warm-up does), at most once a
`TRIM_EVERY` seconds, off the event loop; ctypes releases the interpreter lock around it.
References: https://docs.python.org/3/library/gc.html,
https://github.com/python/cpython/blob/3.11/Modules/gcmodule.c (`_PyObject_GC_Link`),
https://man7.org/linux/man-pages/man3/malloc_trim.3.html.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections.abc import Callable, Iterator

__all__ = ["BIG_BYTES", "TRIM_EVERY", "QuietGC"]

BIG_BYTES = 1024 * 1024
"""A document at least this big is parsed with the collector held off (1 MiB parses in
about 10 ms; below that a collection in the middle costs little)."""
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
        self.held = 0  # parses held so far (tests)
        self.trims = 0

    def parsing(self, loads: Callable[[bytes], object]) -> Callable[[bytes], object]:
        """`loads`, with the collector held off for a document of `big_bytes` or more."""

        def parse(data: bytes) -> object:
            if len(data) < self.big_bytes:
                return loads(data)
            with self.hold():
                return loads(data)

        return parse

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """The collector off for the block; a trim is due after it."""
        with self._lock:
            if self._holders == 0:
                self._restore = gc.isenabled()
                gc.disable()
            self._holders += 1
            self.held += 1
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                if self._holders == 0 and self._restore:
                    gc.enable()
                self._trim_due = True
            time.sleep(0)  # hand the interpreter lock over before the deferred collection

    def trim(self, *, force: bool = False) -> bool:
        """Give the freed heap back to the system when a big parse made a trim due and
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
