"""Every machine's units, kept current from the fleet's bucket for `storyd top --fleet`.

One thread runs an asyncio loop that watches the key-value bucket (names.BUCKET, a
JetStream stream): its stored values first, then each put or delete as the server
pushes it, never a poll. `read()` hands the view the units as they stand. When the
server goes away the feed says so, connects again (0.1 s, then up to every 2 s) and
reads the bucket afresh, as the daemon's follower does (storyd.tui.follow).

Imports `nats` (the fleet extra); the command line builds it and gives it to the view.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any

import orjson

from storyd.core.errors import StorydError
from storyd.fleet import names
from storyd.fleet.config import Fleet

__all__ = ["FleetFeed"]

_RETRY = (0.1, 0.2, 0.5, 1.0, 2.0)  # seconds between attempts to reach the server


class FleetFeed:
    """`start(on_event, on_state)`, `read()`, `stop()`: the view's source of units."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.on_event: Callable[[dict[str, object]], None] = lambda event: None
        self.on_state: Callable[[str], None] = lambda text: None
        self._lock = threading.Lock()
        self._units: dict[str, dict[str, Any]] = {}
        self._machines: dict[str, dict[str, Any]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="storyd-top-fleet", daemon=True)

    def bind(self, on_event: Callable[[dict[str, object]], None],
             on_state: Callable[[str], None]) -> None:  # fmt: skip
        """Who hears of a change (`on_event`) and of the link (`on_state`)."""
        self.on_event, self.on_state = on_event, on_state

    def start(self) -> None:
        """Start following the bucket."""
        self._thread.start()

    def stop(self) -> None:
        """Stop following: the loop closes its connection and ends."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            loop.call_soon_threadsafe(stop.set)

    def read(self) -> tuple[list[dict[str, Any]], str]:
        """(every unit summary now, `fleet, N machines`)."""
        with self._lock:
            units = [dict(u) for u in self._units.values()]
            machines = len(self._machines)
        for unit in units:
            unit.setdefault("error", None)
        return units, source_line(machines)

    def _main(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        attempt = 0
        while not self._stop.is_set():
            try:
                await self._follow()
                attempt = 0
                if not self._stop.is_set():
                    self.on_state(f"lost {self.fleet.url}: reconnecting")
            except StorydError as exc:
                self.on_state(f"{exc.message}; retrying")
                attempt += 1
            delay = _RETRY[min(attempt, len(_RETRY) - 1)]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)

    async def _follow(self) -> None:
        """Watch the bucket until the connection ends (or `stop`)."""
        import nats
        import nats.js.errors

        from storyd.fleet.connect import describe, options
        from storyd.fleet.reader import FleetUnavailable

        assert self._stop is not None
        lost = asyncio.Event()

        async def closed() -> None:
            lost.set()

        async def quiet(exc: Exception) -> None:  # instead of nats-py's traceback
            return None

        try:
            nc = await nats.connect(**options(self.fleet, reconnect=False), error_cb=quiet,
                                    disconnected_cb=closed, closed_cb=closed)  # fmt: skip
        except Exception as exc:
            raise FleetUnavailable(describe(exc, self.fleet)) from None
        try:
            try:
                kv = await nc.jetstream(timeout=5.0).key_value(names.BUCKET)
                watcher = await kv.watch(">")
            except nats.js.errors.BucketNotFoundError:
                raise FleetUnavailable(
                    f"{self.fleet.url} has no bucket {names.BUCKET}: no storyd has published "
                    "there yet"
                ) from None
            except StorydError:
                raise
            except Exception as exc:
                raise FleetUnavailable(describe(exc, self.fleet)) from None
            await self._watch(watcher, lost)
        finally:
            await nc.close()

    async def _watch(self, watcher: Any, lost: asyncio.Event) -> None:
        assert self._stop is not None
        fresh: dict[str, Any] | None = {}  # the stored values, until their end marker
        ends = [asyncio.ensure_future(lost.wait()), asyncio.ensure_future(self._stop.wait())]
        try:
            while True:
                entry_ = asyncio.ensure_future(watcher.updates(timeout=None))
                done, _ = await asyncio.wait([entry_, *ends], return_when=asyncio.FIRST_COMPLETED)
                if entry_ not in done:
                    entry_.cancel()
                    return
                entry = entry_.result()
                if entry is None:  # the stored values are all in: show them
                    self._replace(fresh or {})
                    fresh = None
                    self.on_state("live")
                    self.on_event({"event": "fleet"})
                elif fresh is not None:
                    fresh[entry.key] = entry
                elif self._apply(entry):
                    self.on_event({"event": "fleet", "key": entry.key})
        finally:
            for end in ends:
                end.cancel()

    def _replace(self, entries: dict[str, Any]) -> None:
        with self._lock:
            self._units.clear()
            self._machines.clear()
        for entry in entries.values():
            self._apply(entry)

    def _apply(self, entry: Any) -> bool:
        """Take one bucket entry in; whether the units shown changed."""
        key = str(entry.key)
        gone = entry.operation in ("DEL", "PURGE") or entry.value is None
        value = None
        if not gone:
            try:
                value = orjson.loads(entry.value)
            except orjson.JSONDecodeError:
                return False  # not ours: another writer's value
            if not isinstance(value, dict):
                return False
        with self._lock:
            if key.startswith("m."):
                machine = key[2:]
                new = machine not in self._machines
                if value is None:
                    return self._machines.pop(machine, None) is not None
                self._machines[machine] = value
                return new  # a heartbeat of a known machine changes no row
            if not key.startswith("u."):
                return False
            if value is None:
                return self._units.pop(key, None) is not None
            self._units[key] = value
            return True


def source_line(machines: int) -> str:
    """A fleet frame's source: 'fleet, 1 machine', 'fleet, 3 machines'."""
    return f"fleet, {machines} machine{'s' * (machines != 1)}"
