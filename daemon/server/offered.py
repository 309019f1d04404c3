"""A background read's big parse, offered to the misses that read the same bytes.

While the warm-up or a refresh reads a big state file (one parse, ~70 ms at 10,000
stories, then seconds of building its units), every miss on that file read the file
and parsed it again: at 10,000 stories each miss was a whole parse, 180-400 ms while
warming with the pass beside it. Now a miss that read bytes equal to those of the
background read's parse uses that parse's tree (or waits for it, when it is under
way), and builds its one unit from it.

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
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Offers"]

_WAIT = 2.0  # seconds a miss waits for an offered parse under way before parsing itself


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
        self._role = threading.local()  # "offer", "take" or absent, per thread
        self.taken = 0  # misses answered from an offered parse (stats, tests)

    @contextmanager
    def offering(self) -> Iterator[None]:
        """This thread's big parses are offered until the block ends."""
        made: list[_Parse] = []
        self._role.value, self._role.made = "offer", made
        try:
            yield
        finally:
            self._role.value = self._role.made = None  # the thread keeps no tree
            with self._lock:
                self._offered = [p for p in self._offered if p not in made]
            for parse in made:  # a miss still waiting on one parses on its own
                parse.value = parse.data = None

    @contextmanager
    def taking(self) -> Iterator[None]:
        """This thread's big parses take an offered tree of equal bytes."""
        self._role.value = "take"
        try:
            yield
        finally:
            self._role.value = None

    def parse(self, data: bytes, parse: Callable[[bytes], object]) -> object:
        """`parse(data)`, offered or taken as this thread's role says."""
        role = getattr(self._role, "value", None)
        if role == "take":
            with self._lock:
                found = next((p for p in self._offered if p.data == data), None)
            if found is not None and found.done.wait(_WAIT) and found.ok:
                value = found.value  # None once the offer ended meanwhile
                if value is not None:
                    self.taken += 1
                    return value
            return parse(data)
        if role != "offer":
            return parse(data)
        mine = _Parse(data)
        self._role.made.append(mine)
        with self._lock:
            self._offered.append(mine)
        try:
            mine.value = parse(data)
            mine.ok = True
            return mine.value
        finally:
            mine.done.set()
