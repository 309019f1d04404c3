"""The socket's transport: binding, framing, peers, ordering, back-pressure, shutdown.

asyncio Protocols rather than streams: a cached `resume` is parsed, looked up and
answered inside one `data_received` call, with no task or coroutine per request.
Answers leave in request order; a request that must read files (a cache miss, a
`watch`) holds its place in the connection's queue while a thread pool works, so it
never blocks other connections. A client that stops reading pauses only its own
connection (asyncio's write-buffer high-water mark); a subscriber that falls further
behind than `subscriber_buffer` bytes is dropped and can resume with `since`.

What each request does is `ops.py`'s business: this module hands a parsed request to
`Transport.ops[op]` and writes back the bytes it returns (or the future of them).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, TypeVar

import fasteners
import orjson

from daemon.errors import StorydError, UsageError
from daemon.server import log
from daemon.server.protocol import EX_NOPERM, error_body, error_of, finish, id_suffix

if TYPE_CHECKING:
    from daemon.server.service import Settings

__all__ = ["AlreadyRunning", "Connection", "Op", "Transport", "bind_socket"]

_T = TypeVar("_T")
_MAX_PENDING = 64
_SHUTDOWN_GRACE = 5.0


class AlreadyRunning(StorydError):
    """Another daemon answers on this socket."""

    code = 1
    name = "ALREADY_RUNNING"


def _prepare_directory(path: str) -> None:
    """Create the socket's directory 0700, or check that an existing one is ours and private."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, mode=0o700, exist_ok=True)
    st = os.stat(folder)
    if st.st_uid != os.getuid():
        msg = f"{folder} belongs to uid {st.st_uid}, not to this user; refusing to use it"
        raise UsageError(msg)
    if st.st_mode & 0o077:
        os.chmod(folder, 0o700)


def _probe(path: str) -> bool:
    """Whether something accepts connections on the socket path."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except OSError:
        return False
    finally:
        probe.close()
    return True


def bind_socket(path: str) -> tuple[socket.socket, fasteners.InterProcessLock, tuple[int, int]]:
    """Take the single-instance lock, refuse a live socket, replace a stale one, bind 0600."""
    _prepare_directory(path)
    lock = fasteners.InterProcessLock(path + ".lock")
    if not lock.acquire(blocking=False):
        msg = f"another storyd holds {path}.lock; it serves {path}"
        raise AlreadyRunning(msg)
    try:
        if _probe(path):
            msg = f"a daemon already answers on {path}; not starting a second one"
            raise AlreadyRunning(msg)
        if os.path.lexists(path):
            os.unlink(path)  # stale: left by a daemon that was killed
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            sock.bind(path)
        finally:
            os.umask(old_umask)
        os.chmod(path, 0o600)
        sock.listen(512)
        st = os.stat(path)
    except BaseException:
        lock.release()
        raise
    return sock, lock, (st.st_dev, st.st_ino)


class Connection(asyncio.Protocol):
    """One client: NDJSON framing, ordered replies, and optionally an event stream."""

    def __init__(self, server: Transport) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.discarding = False
        self.queue: deque[bytes | asyncio.Future[bytes]] = deque()
        self.subscribed = False
        self.sub_workspace: str | None = None
        self.replayed_tail: set[bytes] = set()
        self.replayed_gen = -1
        self.closing = False
        self.one_shot = False
        self.paused = False

    # -- asyncio callbacks ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)  # a stream socket's transport
        self.transport = transport
        sock = transport.get_extra_info("socket")
        uid = os.getuid()
        try:
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _pid, peer_uid, _gid = struct.unpack("3i", creds)
        except OSError:
            peer_uid = -1
        if peer_uid != uid:
            self.server.counters["refused"] += 1
            message = f"peer uid {peer_uid} is not the daemon's uid {uid}; refused"
            transport.write(
                finish(
                    error_body(EX_NOPERM, "EX_NOPERM", message),
                    self.server.clock(),
                    b"",
                )
            )
            transport.close()
            self.closing = True
            return
        if len(self.server.connections) >= self.server.max_connections:
            transport.write(
                finish(
                    error_body(75, "EX_TEMPFAIL", "too many connections"),
                    self.server.clock(),
                    b"",
                )
            )
            transport.close()
            self.closing = True
            return
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.server.subscribers.discard(self)
        for item in self.queue:
            if isinstance(item, asyncio.Future):
                item.cancel()
        self.queue.clear()

    def eof_received(self) -> bool:
        """The client half-closed (nc -N, socat): finish the replies in flight, then close."""
        if self.subscribed:
            return False
        self.close_after_replies()
        return True

    def pause_writing(self) -> None:
        self.paused = True
        if self.transport is not None and not self.subscribed:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.paused = False
        if self.transport is not None and not self.closing and len(self.queue) < _MAX_PENDING:
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.closing or self.subscribed:
            return
        buf = self.buffer + data if self.buffer else data
        start = 0
        limit = self.server.settings.max_line_bytes  # read per chunk: a reload may change it
        while not self.closing:
            end = buf.find(b"\n", start)
            if end < 0:
                break
            line = buf[start:end]
            start = end + 1
            if self.discarding:
                self.discarding = False  # the end of an oversized line
                continue
            if len(line) > limit:
                self._line_too_long()
                continue
            self._handle(line)
        rest = buf[start:]
        if len(rest) > limit:
            if not self.discarding:
                self._line_too_long()
                self.discarding = True
            rest = b""
        self.buffer = rest

    # -- replies -------------------------------------------------------------

    def _line_too_long(self) -> None:
        message = f"line longer than {self.server.settings.max_line_bytes} bytes; discarded"
        self.push(finish(error_body(64, "EX_USAGE", message), self.server.clock(), b""))

    def push(self, item: bytes | asyncio.Future[bytes]) -> None:
        """Queue a reply; bytes go out at once when nothing is pending ahead of them."""
        if self.transport is None:
            return
        if not self.queue and isinstance(item, bytes):
            self.transport.write(item)
            return
        self.queue.append(item)
        if isinstance(item, asyncio.Future):
            item.add_done_callback(lambda _f: self._flush())
            if len(self.queue) >= _MAX_PENDING:
                self.transport.pause_reading()

    def _flush(self) -> None:
        while self.queue and self.transport is not None:
            head = self.queue[0]
            if isinstance(head, asyncio.Future):
                if not head.done():
                    return
                self.queue.popleft()
                data = b"" if head.cancelled() else head.result()
            else:
                self.queue.popleft()
                data = head
            self.transport.write(data)
        if self.transport is not None and not self.paused and not self.closing:
            self.transport.resume_reading()
        if self.closing and not self.queue and self.transport is not None:
            self.transport.close()

    def close_after_replies(self) -> None:
        """Close once every queued reply is written (one-shot `resume-cli`)."""
        self.closing = True
        if not self.queue and self.transport is not None:
            self.transport.close()

    def _handle(self, line: bytes) -> None:
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
            server.log.exception("handler_error", request=line[:200].decode("utf-8", "replace"))
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

    A subclass fills `ops` (op name -> handler) and gives the `clock`.
    """

    def __init__(self, settings: Settings, *, max_connections: int = 1024) -> None:
        self.settings = settings
        self.max_connections = max_connections
        self.connections: set[Connection] = set()
        self.subscribers: set[Connection] = set()
        self.counters = {"requests": 0, "refused": 0, "dropped_subscribers": 0}
        self.log = log.get("server")
        self.loop: asyncio.AbstractEventLoop | None = None
        self.ops: dict[str, Op] = {}

    def clock(self) -> bytes:
        """The clock every answer carries (the subclass's)."""
        raise NotImplementedError

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
                out.set_result(render(source.result()))
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

    def broadcast(self, event: Mapping[str, object], line: bytes) -> None:
        """Send one event line to every matching subscriber (on the loop thread)."""
        generation = event["generation"]
        for conn in list(self.subscribers):
            if conn.sub_workspace is not None and conn.sub_workspace != event["workspace"]:
                continue
            if generation < conn.replayed_gen or (  # type: ignore[operator]
                generation == conn.replayed_gen and line in conn.replayed_tail
            ):
                continue
            transport = conn.transport
            if transport is None or transport.is_closing():
                continue
            if transport.get_write_buffer_size() > self.settings.subscriber_buffer:
                self.counters["dropped_subscribers"] += 1
                self.subscribers.discard(conn)
                self.log.warning(
                    "subscriber_dropped",
                    reason="not reading",
                    buffered=transport.get_write_buffer_size(),
                )
                transport.abort()
                continue
            transport.write(line)

    def sink(self, event: Mapping[str, object], line: bytes) -> None:
        """An event from another thread (the engine's refresher): broadcast on the loop."""
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.broadcast, event, line)

    # -- running -------------------------------------------------------------

    async def serve(
        self,
        sock: socket.socket,
        ready: Callable[[], None] = lambda: None,
        stop: asyncio.Event | None = None,
    ) -> None:
        """Serve until SIGTERM/SIGINT (or `stop` is set); then drain and return."""
        self.loop = asyncio.get_running_loop()
        stop = stop or asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(signum, stop.set)
        sock.setblocking(False)
        server = await self.loop.create_unix_server(lambda: Connection(self), sock=sock)
        ready()
        await stop.wait()
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


