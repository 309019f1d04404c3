"""The socket's transport: binding, framing, peers, ordering, back-pressure, shutdown.

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
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, TypeVar

import orjson

from storyd.core import log
from storyd.core.caps import answer_too_large
from storyd.core.errors import StorydError, UsageError
from storyd.core.peercred import peer
from storyd.server.protocol import EX_NOPERM, error_body, error_of, finish, id_suffix
from storyd.server.subscribers import Subscribers, Subscription

if TYPE_CHECKING:
    from storyd.server.service import Settings

__all__ = ["Connection", "Op", "Transport"]

_T = TypeVar("_T")
_MAX_PENDING = 64
_SHUTDOWN_GRACE = 5.0
REFUSAL_LINGER = 1.0  # seconds a refused client may take to read its line and hang up
LINES_PER_TURN = 16  # lines one connection answers before the loop serves the others


class Connection(asyncio.Protocol):
    """One client: NDJSON framing, ordered replies, and optionally an event stream.

    Back-pressure (docs/service.md, "Limits and failure modes"): request lines are
    answered only while the connection's unsent output (asyncio's write buffer plus
    answers queued behind a deferred one) stays under `limits.connection_buffer`, and,
    once every connection's unsent output together passes `limits.total_buffer`, only
    while the connection has nothing unsent at all. A connection that must wait keeps
    its unanswered lines, stops being read, and goes on when its client has read.
    """

    def __init__(self, server: Transport, first: bytes = b"") -> None:
        self.server = server
        self.first = first  # bytes read before it was ours (the early door's): read first
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.scanned = 0  # bytes at the start of `buffer` known to hold no newline
        self.discarding = False
        self.queue: deque[bytes | asyncio.Future[bytes]] = deque()
        self.deferred = 0  # futures in `queue`
        self.queued = 0  # bytes in `queue`
        self.counted = 0  # this connection's share of server.unsent
        self.subscription: Subscription | None = None  # set by Transport.subscribe
        self.closing = False
        self.one_shot = False
        self.paused = False  # asyncio's pause_writing: the write buffer is over its mark
        self.held = False  # reading stopped until the client reads what it was sent
        self.squeezed = False  # the write mark lowered to 0 by the total bound
        self.active = 0.0  # monotonic time of the last byte in or out (the idle timeout)
        self.eof = False  # the client half-closed while its lines waited
        self.yielded = False  # lines wait for the next loop turn (LINES_PER_TURN)

    # -- asyncio callbacks ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)  # a stream socket's transport
        self.transport = transport
        uid = os.getuid()
        found = peer(transport.get_extra_info("socket"))
        if found != uid:  # another user, or one the system cannot name: refused alike
            self.server.counters["refused"] += 1
            if isinstance(found, str):
                message = f"the peer's uid is unknown ({found}); refused"
                self.server.log.warning("peer_refused", reason=found)
            else:
                message = f"peer uid {found} is not the daemon's uid {uid}; refused"
            self._refuse(error_body(EX_NOPERM, "EX_NOPERM", message))
            return
        if len(self.server.connections) >= self.server.max_connections:
            self._refuse(error_body(75, "EX_TEMPFAIL", "too many connections"))
            return
        self.server.connections.add(self)
        transport.set_write_buffer_limits(high=self.server.settings.limits.connection_buffer)
        self.active = time.monotonic()
        if self.first:  # before any byte of the socket's: asyncio calls this first
            self.data_received(self.first)

    def _refuse(self, body: bytes) -> None:
        """Send one error line, shut down writing, and ignore the client's input until it
        hangs up (or REFUSAL_LINGER passes): a client that sent its request first still
        reads the line, then a clean end of file rather than a reset."""
        transport = self.transport
        assert transport is not None
        self.closing = True
        transport.write(finish(body, self.server.clock(), b""))
        transport.write_eof()
        if self.server.loop is not None:
            self.server.loop.call_later(REFUSAL_LINGER, transport.abort)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.server.unsubscribe(self)
        self.server.unsent -= self.counted
        self.counted = 0
        for item in self.queue:
            if isinstance(item, asyncio.Future):
                item.cancel()
        self.queue.clear()
        self.buffer = bytearray()

    def eof_received(self) -> bool:
        """The client half-closed (nc -N, socat): finish the replies in flight, then close."""
        if self.subscription is not None:
            return False
        if self.held and not self.closing:
            self.eof = True  # lines still wait for the client to read; close after them
            return True
        self.close_after_replies()
        return True

    def pause_writing(self) -> None:
        self.paused = True
        if self.subscription is None:
            self._hold()

    def resume_writing(self) -> None:
        self.paused = False
        self.active = time.monotonic()
        if self.squeezed and self.transport is not None:
            self.squeezed = False
            self.transport.set_write_buffer_limits(high=self.server.settings.limits.connection_buffer)
        self._account()
        self._go_on()

    def data_received(self, data: bytes) -> None:
        if self.closing or self.subscription is not None:
            return
        self.active = time.monotonic()
        if (  # the common case: one whole request, nothing buffered, nothing held back
            not self.buffer
            and data.find(b"\n") == len(data) - 1
            and not self.discarding
            and not self.paused
            and not self.deferred
            and not self.queued
            and self.transport is not None
            and not self.transport.get_write_buffer_size()
            and len(data) <= self.server.settings.limits.max_line_bytes
        ):
            self._handle(data[:-1])
            return
        if self.discarding:  # the rest of an oversized line: look for its end only
            end = data.find(b"\n")
            if end < 0:
                return
            self.discarding = False
            data = data[end + 1 :]
        self.buffer += data
        self._answer_lines()

    # -- lines ---------------------------------------------------------------

    def _answer_lines(self) -> None:
        """Answer the buffered complete lines while back-pressure allows; keep the rest.

        Each newline is searched for once: `scanned` marks how far the buffer is known
        to hold none, so a line drip-fed in small pieces costs its length, not its
        length times the number of pieces.
        """
        buf = self.buffer
        start = handled = 0
        limit = self.server.settings.limits.max_line_bytes  # read per chunk: a reload may change it
        while not self.closing:
            if self._must_wait():
                self._hold()
                break
            end = buf.find(b"\n", max(start, self.scanned))
            if end < 0:
                self.scanned = len(buf)
                break
            if handled == LINES_PER_TURN and self.server.loop is not None:
                self.scanned = start  # a burst of lines: let the other connections in first
                self.yielded = True
                if not self.held and self.transport is not None:
                    self.held = True  # not counted in `holds`: it is not the client's doing
                    self.transport.pause_reading()
                self.server.loop.call_soon(self._go_on)
                break
            handled += 1
            line = buf[start:end]
            start = end + 1
            self.scanned = start
            if len(line) > limit:
                self._line_too_long()
                continue
            self._handle(line)
        if start:
            del buf[:start]
            self.scanned = max(0, self.scanned - start)
        if self.scanned == len(buf) and len(buf) > limit:
            # no newline in sight and already too long: answer now, drop it as it comes
            self._line_too_long()
            self.discarding = True
            buf.clear()
            self.scanned = 0

    def _must_wait(self) -> bool:
        """Whether the next line must wait for the client to read (see the class doc)."""
        if self.paused or self.deferred >= _MAX_PENDING:
            return True
        transport = self.transport
        if transport is None:
            return True
        settings = self.server.settings
        if self.queued > settings.limits.connection_buffer:
            return True
        mine = transport.get_write_buffer_size() + self.queued
        if mine and self.server.unsent > settings.limits.total_buffer:
            self.server.recount()  # the total may be stale: drains go unreported
            if self.server.unsent > settings.limits.total_buffer:
                if not self.squeezed:  # resume_writing once everything sent has been read
                    self.squeezed = True
                    transport.set_write_buffer_limits(high=0)
                return True
        return False

    def _hold(self) -> None:
        if not self.held and self.transport is not None and not self.closing:
            self.held = True
            self.server.counters["held"] += 1
            self.transport.pause_reading()

    def _go_on(self) -> None:
        """Output drained or a deferred answer left: answer what waits, then read again."""
        if self.closing or self.subscription is not None or self.transport is None:
            return
        self.yielded = False
        if self.buffer:
            self._answer_lines()
        if self.held and not self.yielded and not self.closing and not self._must_wait():
            self.held = False
            if self.eof:
                self.close_after_replies()
                return
            self.transport.resume_reading()

    def _account(self) -> None:
        """Bring this connection's share of the server's unsent total up to date."""
        if self.transport is None:
            return
        size = self.transport.get_write_buffer_size() + self.queued
        if size != self.counted:
            self.server.unsent += size - self.counted
            self.counted = size

    # -- replies -------------------------------------------------------------

    def _line_too_long(self) -> None:
        message = f"line longer than {self.server.settings.limits.max_line_bytes} bytes; discarded"
        self.push(finish(error_body(64, "EX_USAGE", message), self.server.clock(), b""))

    def push(self, item: bytes | asyncio.Future[bytes]) -> None:
        """Queue a reply; bytes go out at once when nothing is pending ahead of them."""
        if self.transport is None:
            return
        if not self.queue and isinstance(item, bytes):
            self.transport.write(item)
            if self.counted or self.transport.get_write_buffer_size():
                self._account()
            return
        self.queue.append(item)
        if isinstance(item, asyncio.Future):
            self.deferred += 1
            item.add_done_callback(lambda _f: self._flush())
        else:
            self.queued += len(item)
            self._account()

    def _flush(self) -> None:
        while self.queue and self.transport is not None:
            head = self.queue[0]
            if isinstance(head, asyncio.Future):
                if not head.done():
                    break
                self.queue.popleft()
                self.deferred -= 1
                data = b"" if head.cancelled() else head.result()
            else:
                self.queue.popleft()
                self.queued -= len(head)
                data = head
            self.transport.write(data)
        if self.transport is None:
            return
        self.active = time.monotonic()
        self._account()
        if self.closing and not self.queue:
            self.transport.close()
            return
        self._go_on()

    def answer_once(self) -> None:
        """The request being answered is the connection's last: close after its reply
        (the one-shot `resume-cli`)."""
        self.one_shot = True

    def close_after_replies(self) -> None:
        """Close once every queued reply is written (one-shot `resume-cli`)."""
        self.closing = True
        if not self.queue and self.transport is not None:
            self.transport.close()

    def idle_for(self, now: float) -> float:
        """Seconds without traffic, or 0 while subscribed or waiting on a deferred answer.

        A closing connection counts too: a one-shot client that never reads its answer
        would otherwise hold close() (which waits for the buffer to drain) for ever.
        """
        if self.subscription is not None or self.deferred:
            return 0.0
        return now - self.active

    def _handle(self, line: bytes | bytearray) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line.strip():
            return
        server = self.server
        server.counters["requests"] += 1
        suffix = b""
        try:
            try:
                request = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                reason = "invalid UTF-8" if "UTF-8" in str(exc) else f"malformed JSON: {exc}"
                raise UsageError(reason) from None
            if type(request) is not dict:
                raise UsageError("a request must be a JSON object with an 'op'")
            suffix = id_suffix(request)
            op = request.get("op")
            handler = server.ops.get(op) if isinstance(op, str) else None
            if handler is None:
                names = ", ".join(sorted(server.ops))
                raise UsageError(f"unknown op {op!r}; ops: {names}")
            reply = handler(self, request, suffix)
        except StorydError as exc:
            reply = finish(error_of(exc), server.clock(), suffix)
        except Exception:
            shown = bytes(line[:200]).decode("utf-8", "replace")
            server.log.exception("handler_error", request=shown)
            reply = finish(
                error_body(70, "INTERNAL_ERROR", "internal error; see the daemon's log"),
                server.clock(),
                suffix,
            )
        if reply is not None:
            self.push(reply)
        if self.one_shot:
            self.close_after_replies()


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


