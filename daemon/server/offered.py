"""A background read's big parse, offered to the misses that read the same bytes.

While the warm-up or a refresh reads a big state file (one parse, ~70 ms at 10,000
stories, then seconds of building its units), every miss on that file read the file
and parsed it again: at 10,000 stories each miss was a whole parse, 180-400 ms while
warming with the pass beside it. Now a miss that read bytes equal to those of the
background read's parse uses that parse's tree (or waits for it, when it is under
way), and builds its one unit from it.

The seed's epic file (the 10,000-story case above) is now read a story at a time
(storyd.core.jsonstream), with no tree to offer: each reader scans it, the background
giving way while a query reads. Offers stay for the big files parsed whole.

Equal bytes give an equal tree, so the miss answers what its own parse would have
given, from bytes it read itself, under the writers' lock, after it arrived: never older.
The tree is read-only to every reader (tests/test_parse_untouched.py holds that no
format changes the document it parsed).

The offer lasts as long as the background read that made it (`offering`), and only
misses take it (`taking`): no tree outlives its own reader but by a miss's one unit.
An earlier design (issue 43, second round) shared every big parse both ways and kept a
finished one for a second after its last use; kept trees left the heap fragmented
(RSS after 12 rereads of a 2.8 MB file +12-18 MB, against +7-10: tests/
test_memory_bigread.py), and it was taken out.

One tree is kept past its reader: a miss's, made before any whole read of its file
(the start-up, a new watch; `taking(keep=True)`). The misses that follow read the same
bytes while the warm-up has not parsed them yet (it gives way to them), and each parsed
the 5.3 MB file again at 10,000 stories: 90-150 ms each, the slowest answers of the
warm-up. The kept tree serves them, and the background read of equal bytes takes it
over in place of its own parse: one tree made instead of five. It goes when the
background read ends, when another miss keeps a tree, or `KEEP` seconds after it was
made (`expire`, at the verification tick).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Offers"]

_WAIT = 2.0  # seconds a miss waits for an offered parse under way before parsing itself
KEEP = 5.0  # seconds a miss's tree is kept for the reads of equal bytes after it


class _Parse:
    """One offered parse: its bytes, and its tree once `done` (`ok`: it parsed)."""

    __slots__ = ("data", "done", "ok", "value")

    def __init__(self, data: bytes) -> None:
        self.data: bytes | None = data
        self.done = threading.Event()
        self.ok = False
        self.value: object = None


class Offers:
    """The big parses background reads offer now, and the misses that take them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offered: list[_Parse] = []
        self._kept: tuple[bytes, object, float] | None = None  # a miss's: bytes, tree, when
        self._role = threading.local()  # "offer", "take", "keep" or absent, per thread
        self.taken = 0  # misses answered from an offered parse (stats, tests)

    @contextmanager
    def offering(self) -> Iterator[list[_Parse]]:
        """This thread's big parses are offered until the block ends (the list it
        gives holds them: their trees live until then)."""
        made: list[_Parse] = []
        self._role.value, self._role.made = "offer", made
        try:
            yield made
        finally:
            self._role.value = self._role.made = None  # the thread keeps no tree
            with self._lock:
                self._offered = [p for p in self._offered if p not in made]
            for parse in made:  # a miss still waiting on one parses on its own
                parse.value = parse.data = None

    @contextmanager
    def taking(self, *, keep: bool = False) -> Iterator[None]:
        """This thread's big parses take an offered (or kept) tree of equal bytes;
        with `keep`, a tree it has to make is kept for the reads after it."""
        self._role.value = "keep" if keep else "take"
        try:
            yield
        finally:
            self._role.value = None

    def parse(self, data: bytes, parse: Callable[[bytes], object]) -> object:
        """`parse(data)`, offered, taken or kept as this thread's role says."""
        role = getattr(self._role, "value", None)
        if role in ("take", "keep"):
            with self._lock:
                found = next((p for p in self._offered if p.data == data), None)
            if found is not None and found.done.wait(_WAIT) and found.ok:
                value = found.value  # None once the offer ended meanwhile
                if value is not None:
                    self.taken += 1
                    return value
            value = self._from_kept(data, claim=False)
            if value is not None:
                self.taken += 1
                return value
            value = parse(data)
            if role == "keep":
                with self._lock:
                    self._kept = (data, value, time.monotonic())
            return value
        if role != "offer":
            return parse(data)
        mine = _Parse(data)
        self._role.made.append(mine)
        with self._lock:
            self._offered.append(mine)
        try:
            kept = self._from_kept(data, claim=True)  # a miss's tree: this read's now
            mine.value = parse(data) if kept is None else kept
            mine.ok = True
            return mine.value
        finally:
            mine.done.set()

    def _from_kept(self, data: bytes, *, claim: bool) -> object:
        """The kept tree when its bytes equal `data` and it is not too old (None: no
        such tree); `claim`: it is no longer kept (a background read owns it now)."""
        with self._lock:
            kept = self._kept
            if kept is None:
                return None
            if time.monotonic() - kept[2] > KEEP:
                self._kept = None
                return None
            if kept[0] != data:
                return None
            if claim:
                self._kept = None
            return kept[1]

    def expire(self) -> None:
        """Drop the kept tree once it is `KEEP` seconds old (the verification tick)."""
        with self._lock:
            if self._kept is not None and time.monotonic() - self._kept[2] > KEEP:
                self._kept = None
