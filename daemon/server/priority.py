"""Queries first: the background's long passes give way while a query reads (issue 43).

A warm-up's or a refresh's pass over a big file's units (their builds, their
detectors) and a query's miss (one file parsed, one unit built) share the interpreter:
side by side, each runs at half speed, so the miss waited on the pass's share. The
pass calls `give_way()` between units; while a query is `asking()`, it waits, and the
query runs alone. The wait is bounded: `MAX_WAIT` for the queries asking now, after
which the pass goes on without waiting again until another query starts (a query that
waits on the pass itself then costs `MAX_WAIT` once, never a wait per unit). A query
about to block on something a pass may hold (a torn file's miss waiting for the file's
lock) says so first (`waiting`): it stops counting as asking until it has it, so the
pass is not kept waiting on a query that waits on it.

The bound was 0.1 s, shorter than a miss at 10,000 stories (parse ~70 ms, then the
unit's git checks): the pass came back in the middle of every such miss, and each of the
miss's git round trips and stats then waited for the interpreter lock behind it (5 ms a
system call: 800 ms misses while warming, profiled). `MAX_WAIT` is now 1 s.

A pass also pauses (`PAUSE`, 0.1 ms) every `PAUSE_EVERY` units, whether a query reads or
not. Its units each make a few fast system calls (a story file's `stat`), and each one
lets the interpreter lock go and takes it back within microseconds: a thread waiting
for the lock (the event loop with a client's request, a query's miss) is woken, finds
it taken again, and its claim on it starts over, so it never asks the pass to hand it
over. Measured: a Python loop with one `stat` per 60 us held a socket echo on another
thread for 118 ms median, 223 ms at worst (a plain loop without the `stat`: 10 and 31
ms); with this pause every 64 turns, 0.06 and 5.6 ms. In the daemon, `ping` during a
10,000-story warm-up took up to 100-400 ms. The pauses cost a 10,000-unit pass ~40 ms.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["FREEZE_EVERY", "MAX_WAIT", "PAUSE", "PAUSE_EVERY", "Priority"]

MAX_WAIT = 1.0  # seconds one `give_way` may wait for the queries in flight
FREEZE_EVERY = 2048  # units of a pass between two calls of `on_stretch`
PAUSE_EVERY = 32  # units of a pass between two pauses (a multiple of it: FREEZE_EVERY)
PAUSE = 0.0001  # seconds a pause lasts (see the module docstring)


class Priority:
    """How many queries read now; the background waits while any does."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.asking_now = 0
        self._askers: dict[int, int] = {}  # threads asking now: never wait on themselves
        self.gave_way = 0  # turns a pass waited (stats, tests)
        self._started = 0  # queries started so far
        self._outwaited = -1  # `_started` when a wait last ran out: no wait until it moves
        self._passed = 0  # units passed since `on_stretch` last ran
        self._awaited = 0  # queries waiting for a turn of the background's thread
        # called every FREEZE_EVERY units of the background's passes (Reads binds the
        # collector's freeze: a long build's survivors leave the collector's view)
        self.on_stretch: Callable[[], None] = lambda: None

    @property
    def started(self) -> int:
        """Queries that read so far (misses): a count that moves while clients ask."""
        return self._started

    @contextmanager
    def asking(self) -> Iterator[None]:
        """A query's read: the background gives way until it ends."""
        me = threading.get_ident()
        with self._cond:
            self.asking_now += 1
            self._started += 1
            self._askers[me] = self._askers.get(me, 0) + 1
        try:
            yield
        finally:
            with self._cond:
                self.asking_now -= 1
                left = self._askers.pop(me) - 1
                if left:
                    self._askers[me] = left
                if not self.asking_now:
                    self._cond.notify_all()

    def asking_here(self) -> bool:
        """Whether this thread is a query's read."""
        return threading.get_ident() in self._askers

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """A query's read is about to block on what a pass may hold: it counts as
        asking again once the block ends (a thread that is not asking: nothing)."""
        me = threading.get_ident()
        with self._cond:
            mine = self._askers.pop(me, 0)
            self.asking_now -= mine
            if mine and not self.asking_now:
                self._cond.notify_all()
        try:
            yield
        finally:
            if mine:
                with self._cond:
                    self.asking_now += mine
                    self._askers[me] = self._askers.get(me, 0) + mine

    def awaited(self, change: int) -> None:
        """+1: a query waits for a turn of the background's own thread (Refresher.sync),
        which comes only once the pass on it ends, so no pass gives way meanwhile (nor
        goes on waiting); -1 when that turn begins."""
        with self._cond:
            self._awaited += change
            if change > 0:
                self._cond.notify_all()

    def give_way(self) -> None:
        """Between two units of a background pass: wait while a query reads (bounded)."""
        self._passed += 1
        if self._passed % PAUSE_EVERY == 0 and threading.get_ident() not in self._askers:
            time.sleep(PAUSE)  # a thread waiting for the interpreter lock takes it now
        if self._passed >= FREEZE_EVERY:
            self._passed = 0
            self.on_stretch()
        if not self.asking_now:  # one attribute read: the common case
            return
        if threading.get_ident() in self._askers or self._awaited:  # a query's own read,
            return  # or a query waits for the pass to end (`awaited`)
        deadline = time.monotonic() + MAX_WAIT
        with self._cond:
            if self._outwaited == self._started:  # these queries were waited for once
                return
            self.gave_way += 1
            while self.asking_now and not self._awaited:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._outwaited = self._started
                    return
                self._cond.wait(left)
