"""One client's connection to the socket: NDJSON framing, peers, ordered replies, and
back-pressure (the listening side, its counters and shutdown: transport.py).

A request line is parsed and handed to its op (`Transport.ops`, ops.py); what the op
returns, bytes or a future of them, is queued in request order and written once every
answer before it has been. A connection whose unsent output passes its bounds stops
being read until its client reads (see `Connection`).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from typing import TYPE_CHECKING

import orjson

from storyd.core.errors import StorydError, UsageError
from storyd.core.peercred import peer
from storyd.server.protocol import EX_NOPERM, error_body, error_of, finish, id_suffix

if TYPE_CHECKING:
    from storyd.server.subscribers import Subscription
    from storyd.server.transport import Transport

__all__ = ["LINES_PER_TURN", "REFUSAL_LINGER", "Connection"]

MAX_PENDING = 64  # deferred answers a connection may wait on before it is not read
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
        if self.paused or self.deferred >= MAX_PENDING:
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
