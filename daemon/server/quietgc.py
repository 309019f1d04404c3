"""Garbage collection held off while a big state file is parsed, and the heap given back.

CPython 3.11 collects from inside whichever allocation crosses a threshold, even in
the middle of a C call: orjson's parse of a 4.6 MB state file (43-52 ms, one call,
the interpreter lock held) made some 285 collections, among them generation-2 passes
over the whole heap (34-84 ms of CPU), so every other client waited for both at once,
over 100 ms (issue 29). Held off for the parse, the parse is one pause. The collection
the first allocation after it would then make (a generation-0 pass over the whole
parsed tree: 9-12 ms at 10,000 stories, 13-25 ms under load, in a miss's answer when a
query parsed) is not made: the last holder out freezes what is alive (`freeze`, below),
which leaves the tree out of every collection; refcounting frees it as before, and a
JSON tree holds no cycles. Only the parse: held over the units' build and install as
well, the deferred pass walked every object they made (worse maxima, measured). From
3.12 collections wait for the evaluation loop, so the hold costs nothing there.

`gc.disable()` is process-wide: holders are counted, so the first one in turns the
collector off and the last one out turns it back on (when it was on before), on error
too. Cycles are not lost, only collected once the parse is over; refcounting frees
everything else meanwhile. (`gc.freeze()` alone, for the parse, would keep the frozen
heap's cyclic garbage for good in a process that never forks: the freeze below comes
with a full collection once idle.)

glibc keeps the heap a big read freed (the file's bytes, the old snapshot's objects)
until asked: `trim` asks (`malloc_trim(0)`, as the warm-up does), at most once a
`TRIM_EVERY` seconds, off the event loop; ctypes releases the interpreter lock around it.
A big answer served from a kept view (server/epicviews.py) makes a trim due too (`due`).

malloc_trim cannot give back everything: glibc raises its mmap threshold to the size of
each big block freed (up to 32 MiB, and the trim threshold to twice that), so after one
8 MB answer the next ones come from a thread's heap, whose free top malloc_trim leaves
alone (15 MB stayed after five views of a 100,000-task epic). `fix_malloc_thresholds`
pins the threshold at `MMAP_BYTES` at start-up: every block of 1 MiB or more is mapped
and unmapped on its own. bench_probe: RSS after the rewrite load 150 -> 94 MB (after
the warm-up 105 -> 89). Parsing big files with the `_json` scanner instead of orjson
(no key cache: see fastjson.py) held the lock 10 ms longer a parse: 26-28 probes over
50 ms, not kept.
Sharing one big parse between readers of equal bytes (a write's miss and the
refresher's read) was tried for issue 43 (write to visible 276 -> 171 ms at 10,000
stories under load) and taken out: trees kept alive across threads' allocations left
the heap fragmented, and RSS after 12 rereads of a 2.8 MB file grew 12-18 MB instead of
7-10 (tests/test_memory_bigread.py, bound 14 MB).
The survivors frozen (issue 43): at 10,000 stories the daemon keeps ~1.5 million
objects, and a full collection over them held the lock 50-270 ms, from whichever
thread allocated last, in the middle of a warm-up's build or right after a write's
answer was computed but before the event loop could send it. `freeze` moves every
object alive now to the permanent generation (`gc.freeze`, a list splice) after each
background read and every `Priority.FREEZE_EVERY` units of a pass, so collections look
at young objects only. Cycles among frozen objects that die meanwhile are found by
`collect_idle`: at a verification tick with no miss and no big parse since the last,
or once the heap has grown past `REFREEZE_GROWTH` times its size after the last full
collection (a bound on what waits), it unfreezes, collects and freezes again. The heap's
size is `sys.getallocatedblocks()` (a walk of the arenas: 0.6 ms at 1.4 million
objects), never `gc.get_freeze_count()`, which walks every frozen object with the lock
held (24 ms at 1.4 million): called at every tick and every `stats`, it took 60% of the
daemon's time while a client polled `stats` through a warm-up.
References: https://docs.python.org/3/library/gc.html,
https://github.com/python/cpython/blob/3.11/Modules/gcmodule.c (`_PyObject_GC_Link`),
https://man7.org/linux/man-pages/man3/malloc_trim.3.html,
https://man7.org/linux/man-pages/man3/mallopt.3.html (M_MMAP_THRESHOLD).
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
import time
from collections.abc import Callable, Iterator

from storyd.server.offered import Offers

__all__ = ["BIG_BYTES", "MMAP_BYTES", "TRIM_EVERY", "QuietGC", "fix_malloc_thresholds"]

BIG_BYTES = 1024 * 1024
"""A document at least this big is parsed with the collector held off (1 MiB parses in
about 10 ms; below that a collection in the middle costs little)."""
MMAP_BYTES = 1024 * 1024
"""Blocks this big or bigger are mmapped and unmapped when freed (fix_malloc_thresholds)."""
_M_MMAP_THRESHOLD = -3  # malloc.h
TRIM_EVERY = 1.0
"""Seconds between two heap trims (a file rewritten ten times a second: one a second)."""
REFREEZE_GROWTH = 3
"""The frozen heap may grow to this many times its size after the last full collection
before one runs, idle or not (see the module docstring)."""

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
        self.big_reads = 0  # big state files read so far, whole or a story at a time
        self.trims = 0
        self.full = 0  # full collections `collect_idle` ran (stats, tests)
        self.freezes = 0  # freeze calls so far (stats)
        self._frozen_since = False  # objects frozen since the last full collection
        self._heap_base = sys.getallocatedblocks()  # after the last full collection (or now)
        self.offers = Offers()  # a background read's parse, offered to misses (offered.py)

    def parsing(
        self, loads: Callable[[bytes], object], big: Callable[[bytes], object] | None = None
    ) -> Callable[[bytes], object]:
        """`loads`, with the collector held off for a document of `big_bytes` or more,
        which `big` parses when given."""
        big_loads = big or loads

        def held(data: bytes) -> object:
            with self.hold():
                return big_loads(data)

        def parse(data: bytes) -> object:
            if len(data) < self.big_bytes:
                return loads(data)
            return self.offers.parse(data, held)

        return parse

    def freeze(self) -> None:
        """Move every object alive now out of the collector's view (see the docstring)."""
        gc.freeze()
        self.freezes += 1
        self._frozen_since = True

    def collect_idle(self, *, idle: bool) -> bool:
        """A full collection of the frozen heap, once objects were frozen since the last,
        when the daemon is `idle` or the heap grew too much to wait; the survivors are
        frozen again. True if it ran."""
        if not self._frozen_since:  # nothing frozen since the last one
            return False
        if not idle and sys.getallocatedblocks() <= REFREEZE_GROWTH * max(self._heap_base,
                                                                          200_000):
            return False
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self._frozen_since = False
        self._heap_base = sys.getallocatedblocks()
        self.full += 1
        return True

    def read_big(self) -> None:
        """A big state file was read (whole, or a story at a time: jsonstream.py): the
        heap its text and scratch took is trimmed with the next trim."""
        self.big_reads += 1
        self._trim_due = True

    def due(self) -> None:
        """A big answer was served: its freed heap is trimmed with the next trim."""
        self._trim_due = True

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
                if self._holders == 0:
                    self.freeze()  # the parsed tree: no collection pass over it (below)
                    if self._restore:
                        gc.enable()
                self._trim_due = True

    def stats(self) -> dict[str, object]:
        """For `stats`: big parses held so far, big files read, heap trims so far,
        whether one is due."""
        return {"bigParses": self.held, "bigReads": self.big_reads, "trims": self.trims,
                "trimDue": self._trim_due, "offeredTaken": self.offers.taken,
                "freezes": self.freezes,
                "fullCollections": self.full}

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


def fix_malloc_thresholds(mmap_bytes: int = MMAP_BYTES) -> None:
    """Serve blocks of `mmap_bytes` or more from mmap, always (glibc's mallopt; elsewhere
    nothing to ask): see the module docstring."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, mmap_bytes)


def give_back_freed_memory() -> None:
    """Return the heap freed so far to the system (glibc's malloc_trim; elsewhere, musl
    or macOS, there is nothing to ask)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)
