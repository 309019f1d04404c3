"""The event log: the generation clock, the replay history and the sinks.

Every event goes through `publish`: unit events from the engine, and `reconciled`
events from reconcile, so a `subscribe {since}` client replays both. A generation is
taken with `advance` before the change it names is installed; the event is published
after, so a subscriber that reacts to an event and queries sees the change.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from storyd.server import protocol
from storyd.server.listeners import Listeners

if TYPE_CHECKING:
    from storyd.core.wire import UnitEvent

__all__ = ["HISTORY", "EventLog", "Sink"]

HISTORY = 10_000


class Sink(Protocol):
    """Hears every event: unit events from the engine, and reconcile's. Called on the
    thread that published it (the refresher, a pool thread, reconcile's worker): a
    sink only queues, never waits."""

    def __call__(self, event: Mapping[str, object], line: bytes, /) -> None:
        """One event, as a mapping and as its wire line."""


class EventLog:
    """Generations, the history kept for replay, and the sinks every event reaches."""

    def __init__(self, history: int = HISTORY, instance: str | None = None) -> None:
        """An empty log; its sinks are attached before the daemon runs, then frozen.
        `instance`: the one the early door already answered with (server/early.py)."""
        self.instance = instance or os.urandom(4).hex()
        self.generation = 0
        # the newest generation with a line not in the history (a warm-up's first sight,
        # or dropped at the cap); lines of later generations are all there
        self.lost_before = 0
        self.history: deque[tuple[int, str, bytes]] = deque(maxlen=history)
        self.sinks: Listeners[Sink] = Listeners("event sinks")
        self.count = 0
        self._lock = threading.Lock()

    def clock(self) -> str:
        """`<instance>:<generation>`, carried by every answer and event."""
        return f"{self.instance}:{self.generation}"

    def advance(self) -> int:
        """A new generation, for a change about to be installed."""
        with self._lock:
            self.generation += 1
            return self.generation

    def publish(self, event: UnitEvent | dict[str, object], *, keep: bool = True) -> None:
        """Send one event (its `generation` already set) to the history and the sinks.

        Without `keep` (a warm-up's first sight of every unit: 4.7 MB of lines at 10,000
        units) the line is not kept for replay, and a `since` from before it gets the
        full list instead.
        """
        generation = event["generation"]
        assert isinstance(generation, int)
        event["clock"] = f"{self.instance}:{generation}"
        line = protocol.event_line(event)
        with self._lock:
            self.count += 1
            if not keep:
                self.lost_before = max(self.lost_before, generation)
            else:
                if len(self.history) == self.history.maxlen:  # the oldest is dropped now
                    self.lost_before = max(self.lost_before, self.history[0][0])
                self.history.append((generation, str(event.get("workspace")), line))
        for sink in self.sinks:
            sink(event, line)

    def publish_new(self, event: dict[str, object]) -> None:
        """Publish an event that is a change of its own (`reconciled`): a new generation."""
        event["generation"] = self.advance()
        self.publish(event)

    def mark_lost(self) -> None:
        """Events may have been missed: a `since` from before now replays nothing."""
        with self._lock:
            self.lost_before = self.generation

    def replay(self, since: str, workspace: str | None) -> list[bytes] | None:
        """Event lines after clock `since`, or None when they cannot all be replayed."""
        instance, _, gen_text = since.partition(":")
        if instance != self.instance or not gen_text.isdigit():
            return None
        generation = int(gen_text)
        # a clock from the future was never this instance's: its view cannot be trusted
        if generation < self.lost_before or generation > self.generation:
            return None
        return [
            line
            for gen, ws, line in list(self.history)
            if gen > generation and (workspace is None or ws == workspace)
        ]
