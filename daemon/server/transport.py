"""The socket's transport: the listening side, its connections, subscribers, counters
and shutdown (one connection's framing, peers, ordering and back-pressure: connection.py).

asyncio Protocols rather than streams: a cached `resume` is parsed, looked up and
answered inside one `data_received` call, with no task or coroutine per request.
Answers leave in request order; a request that must read files (a cache miss, a
`watch`) holds its place in the connection's queue while a thread pool works, so it
never blocks other connections. A client that stops reading pauses only its own
connection: its lines wait unanswered and it is not read until its client has read
(`limits.connection_buffer`, `limits.total_buffer`; see `Connection`); a subscriber
that falls further behind than `subscriber_buffer` bytes is dropped and can resume
with `since`. A connection idle for `limits.idle_timeout` is closed.

What each request does is `ops.py`'s business: this module hands a parsed request to
`Transport.ops[op]` and writes back the bytes it returns (or the future of them).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, TypeVar

from storyd.core import log
from storyd.core.caps import answer_too_large
from storyd.core.errors import StorydError
from storyd.server.connection import Connection
from storyd.server.protocol import error_body, error_of, finish
from storyd.server.subscribers import Subscribers, Subscription

if TYPE_CHECKING:
    from storyd.server.service import Settings

__all__ = ["Op", "Transport"]

_T = TypeVar("_T")
_SHUTDOWN_GRACE = 5.0


Op = Callable[["Connection", dict[str, object], bytes], "bytes | asyncio.Future[bytes] | None"]


class Transport:
    """One listening socket: its connections, subscribers, counters and shutdown.

    `ops` maps each op's name to its handler (ops.Server's); `clock` gives the clock
    every answer carries, errors included.
    """

    def __init__(
        self,
        settings: Settings,
        ops: Mapping[str, Op],
        clock: Callable[[], bytes],
        *,
        max_connections: int = 1024,
    ) -> None:
        self.settings = settings
        self.ops = ops
        self.clock = clock
        self.max_connections = max_connections
        self.connections: set[Connection] = set()
        self.counters = {"requests": 0, "refused": 0, "held": 0, "idle_closed": 0}
        self.unsent = 0  # bytes written or queued but not yet sent, all connections (approx.)
        self.log = log.get("server")
        self.subscribers = Subscribers(settings, self.log)
        self.loop: asyncio.AbstractEventLoop | None = None
        # events from other threads waiting for the loop, and whether it was woken for them
        self._events: deque[tuple[Mapping[str, object], bytes]] = deque()
        self._events_lock = threading.Lock()
        self._woken = False
        self._adopting: set[asyncio.Task[None]] = set()  # connections the door handed over

    def recount(self) -> None:
        """Recompute `unsent` exactly (each connection's share drifts up as buffers drain)."""
        total = 0
        for conn in self.connections:
            conn.counted = 0
            conn._account()
            total += conn.counted
        self.unsent = total

    def transport_limits(self) -> dict[str, object]:
        """The transport's limits in force, for `stats.limits` (the configuration's names)."""
        settings = self.settings
        return {
            "connection_buffer": settings.limits.connection_buffer,
            "total_buffer": settings.limits.total_buffer,
            "idle_timeout": settings.limits.idle_timeout,
        }

    def transport_stats(self) -> dict[str, object]:
        """The transport's counters, for `stats`."""
        self.recount()
        return {
            "unsentBytes": self.unsent,
            "heldConnections": sum(1 for conn in self.connections if conn.held),
            "holds": self.counters["held"],
            "idleClosed": self.counters["idle_closed"],
        }

    def close_idle(self) -> int:
        """Close the connections idle for longer than `limits.idle_timeout`; how many."""
        now = time.monotonic()
        timeout = self.settings.limits.idle_timeout
        closed = 0
        for conn in list(self.connections):
            transport = conn.transport
            if transport is None or conn.idle_for(now) <= timeout:
                continue
            closed += 1
            self.connections.discard(conn)
            if transport.get_write_buffer_size():
                transport.abort()  # a client that reads nothing would hold close() for ever
            else:
                transport.close()
        if closed:
            self.counters["idle_closed"] += closed
            self.log.info("idle_closed", connections=closed, idle_timeout=timeout)
        return closed

    async def _sweep_idle(self) -> None:
        while True:
            await asyncio.sleep(min(max(self.settings.limits.idle_timeout / 4, 0.05), 5.0))
            self.close_idle()

    def later(
        self, future: Future[_T], render: Callable[[_T], bytes], suffix: bytes
    ) -> asyncio.Future[bytes]:
        """An asyncio future of the reply bytes for work done on another thread."""
        assert self.loop is not None
        out: asyncio.Future[bytes] = self.loop.create_future()

        def done(source: asyncio.Future[_T]) -> None:
            if out.cancelled():
                return
            try:
                line = render(source.result())
                cap = self.settings.limits.max_answer_bytes
                if len(line) > cap:  # the answer cap, on every deferred answer
                    line = finish(error_of(answer_too_large(len(line), cap)), self.clock(), suffix)
                out.set_result(line)
            except StorydError as exc:
                out.set_result(finish(error_of(exc), self.clock(), suffix))
            except Exception:
                self.log.exception("deferred_error")
                out.set_result(
                    finish(error_body(70, "INTERNAL_ERROR", "internal error"), self.clock(), suffix)
                )

        asyncio.wrap_future(future, loop=self.loop).add_done_callback(done)
        return out

    # -- events --------------------------------------------------------------

    def subscribe(self, conn: Connection, workspace: str | None) -> Subscription:
        """Turn `conn` into an event stream (of one workspace, or None: all); from now on
        its input is ignored. TooManySubscribers at `limits.max_subscribers`."""
        assert conn.transport is not None
        found = self.subscribers.subscribe(conn, conn.transport, workspace)
        conn.subscription = found
        return found

    def unsubscribe(self, conn: Connection) -> None:
        """`conn` hears no more events (it closed)."""
        self.subscribers.unsubscribe(conn)

    def sink(self, event: Mapping[str, object], line: bytes) -> None:
        """An event from another thread (the engine's refresher): broadcast on the loop.

        The loop is woken once for the events that arrive before it runs, not once an
        event, and not at all while nobody subscribes (a subscriber's first answer is
        read from the cache and the event log, which hold these events already). A
        warm-up's 10,000 first sights woke it 10,000 times, each wake-up taking the
        interpreter lock from the warm-up's build and handing it back.
        """
        loop = self.loop
        if loop is None or loop.is_closed() or not len(self.subscribers):
            return
        with self._events_lock:
            self._events.append((event, line))
            if self._woken:
                return
            self._woken = True
        try:
            loop.call_soon_threadsafe(self._broadcast_waiting)
        except RuntimeError:  # the loop closed meanwhile: the daemon is stopping
            with self._events_lock:
                self._events.clear()
                self._woken = False

    def _broadcast_waiting(self) -> None:
        """On the loop: every event waiting, in the order published."""
        with self._events_lock:
            waiting = list(self._events)
            self._events.clear()
            self._woken = False
        for event, line in waiting:
            self.subscribers.broadcast(event, line)

    def adopt(self, sock: socket.socket, data: bytes) -> None:
        """A connection the early door accepted and left to the daemon (server/door.py),
        served as if accepted here, `data` (what the door read of it) first. Any thread."""
        try:
            assert self.loop is not None  # the door closes once `serve` accepts
            self.loop.call_soon_threadsafe(self._adopt, sock, data)
        except RuntimeError:  # the loop is closed: the daemon is stopping
            sock.close()

    def _adopt(self, sock: socket.socket, data: bytes) -> None:
        assert self.loop is not None
        task = self.loop.create_task(self._take(sock, data))
        self._adopting.add(task)
        task.add_done_callback(self._adopting.discard)

    async def _take(self, sock: socket.socket, data: bytes) -> None:
        assert self.loop is not None
        try:
            await self.loop.connect_accepted_socket(lambda: Connection(self, data), sock)
        except OSError:
            sock.close()

    # -- running -------------------------------------------------------------

    async def serve(
        self, sock: socket.socket, stop: asyncio.Event, ready: Callable[[], None] = lambda: None
    ) -> None:
        """Serve until `stop` is set (the runtime sets it on SIGTERM/SIGINT); then finish
        the replies in flight and return. `ready` is called once the socket accepts."""
        self.loop = asyncio.get_running_loop()
        sock.setblocking(False)
        server = await self.loop.create_unix_server(lambda: Connection(self), sock=sock)
        sweeper = self.loop.create_task(self._sweep_idle())
        ready()
        await stop.wait()
        sweeper.cancel()
        self.log.info("stopping", connections=len(self.connections))
        server.close()
        await self._drain()
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close()
        await server.wait_closed()

    async def _drain(self) -> None:
        """Let replies in flight finish, within a grace period."""
        pending = [
            item
            for conn in self.connections
            for item in conn.queue
            if isinstance(item, asyncio.Future)
        ]
        if pending:
            await asyncio.wait(pending, timeout=_SHUTDOWN_GRACE)
        await asyncio.sleep(0)


