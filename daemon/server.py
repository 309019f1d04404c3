"""The Unix socket server: binding, framing, peers, ordering, subscribers, shutdown.

asyncio Protocols rather than streams: a cached `resume` is parsed, looked up and
answered inside one `data_received` call, with no task or coroutine per request.
Answers leave in request order; a request that must read files (a cache miss, a
`watch`) holds its place in the connection's queue while a thread pool works, so it
never blocks other connections. A client that stops reading pauses only its own
connection (asyncio's write-buffer high-water mark); a subscriber that falls further
behind than `subscriber_buffer` bytes is dropped and can resume with `since`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

import fasteners
import orjson

from daemon import __version__, direct, log
from daemon.config import Config
from daemon.errors import StorydError, StoryNotInState, UsageError
from daemon.flags import HelpRequested
from daemon.formats.epic import epic_of_folder, epic_state_file
from daemon.ids import normalize_epic_id, normalize_story_id
from daemon.protocol import EX_NOPERM, error_body, error_of, field, finish, id_suffix
from daemon.query import Output, from_argv
from daemon.service import Daemon

__all__ = ["AlreadyRunning", "Server", "bind_socket"]

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


def _frame(output: Output) -> bytes:
    """The `resume-cli` reply: `!stderr` lines, stdout as is, then `=code version`."""
    err = "".join(f"!{part}\n" for line in output.stderr for part in line.split("\n"))
    return (
        err.encode("utf-8", "replace") + output.stdout + f"={output.code} {__version__}\n".encode()
    )


class Connection(asyncio.Protocol):
    """One client: NDJSON framing, ordered replies, and optionally an event stream."""

    def __init__(self, server: Server) -> None:
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
        limit = self.server.max_line
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
        message = f"line longer than {self.server.max_line} bytes; discarded"
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


class Server:
    """The protocol's ops over a Daemon, on one listening socket."""

    def __init__(self, daemon: Daemon, *, max_connections: int = 1024) -> None:
        self.daemon = daemon
        self.engine = daemon.engine
        self.settings = daemon.settings
        self.max_line = daemon.settings.max_line_bytes
        self.max_connections = max_connections
        self.connections: set[Connection] = set()
        self.subscribers: set[Connection] = set()
        self.counters = {"requests": 0, "refused": 0, "dropped_subscribers": 0}
        self.log = log.get("server")
        self.loop: asyncio.AbstractEventLoop | None = None
        self.ops: dict[
            str,
            Callable[[Connection, dict[str, object], bytes], bytes | asyncio.Future[bytes] | None],
        ] = {
            "ping": self.op_ping,
            "resume": self.op_resume,
            "resume-cli": self.op_resume_cli,
            "list": self.op_list,
            "watch": self.op_watch,
            "unwatch": self.op_unwatch,
            "subscribe": self.op_subscribe,
            "stats": self.op_stats,
            "epic": self.op_epic,
            "reconcile": self.op_reconcile,  # daemon/reconcile (issue 11)
            "reconciled": self.op_reconciled,
        }
        self.reconcile_config: Config | None = None  # set by the runtime; None: config.load()

    def clock(self) -> bytes:
        """The engine's clock as bytes."""
        return f"{self.engine.instance}:{self.engine.generation}".encode()

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

    # -- ops -----------------------------------------------------------------

    def op_ping(self, conn: Connection, request: dict[str, object], suffix: bytes) -> bytes:
        body = (
            b'{"ok":true,"version":"'
            + __version__.encode()
            + b'","pid":'
            + str(os.getpid()).encode()
        )
        return finish(
            body + b',"instance":"' + self.engine.instance.encode() + b'"', self.clock(), suffix
        )

    def _target(self, path: str, request: dict[str, object]) -> tuple[str, str | None, str]:
        """(state file, unit key, message when the unit is absent) of a resume request."""
        state_file = field(request, "stateFile", str)
        if state_file is None:
            epic = normalize_epic_id(str(field(request, "epic", str, required=True)))
            story = normalize_story_id(str(field(request, "story", str, required=True)))
            return (
                self._epic_file(path, epic),
                story,
                "Story not in execution-state.json",
            )
        unit = field(request, "unit", str)
        relpath = _relative(path, str(state_file))
        if unit is None:
            ws = self.engine.workspaces.get(path)
            state = ws.files.get(relpath) if ws and relpath else None
            if state is not None and len(state.keys) == 1:
                unit = state.keys[0]
        return (
            relpath or str(state_file),
            None if unit is None else str(unit),
            f"unit {unit!r} not in {relpath}",
        )

    def _epic_file(self, path: str, epic: str) -> str:
        """The epic's state file: from the cache's known files, or (before the workspace
        is read) from the folder itself."""
        known = self.engine.epic_file(path, epic)
        return known if known is not None else epic_state_file(path, epic)

    def op_resume(
        self, conn: Connection, request: dict[str, object], suffix: bytes
    ) -> bytes | asyncio.Future[bytes]:
        daemon = self.daemon
        daemon.counters["queries"] += 1
        path = daemon.canonical(request.get("workspace"))
        relpath, key, missing = self._target(path, request)
        entry = self.engine.lookup(path, relpath, key) if key is not None else None
        if entry is not None:
            daemon.counters["hits"] += 1
            return finish(entry.answer_body, self.clock(), suffix)
        if key is not None and self._known_absent(path, relpath):
            daemon.counters["hits"] += 1
            return finish(error_of(StoryNotInState(missing)), self.clock(), suffix)
        daemon.counters["misses"] += 1
        daemon.auto_watch(path)
        if daemon.watching(path):
            daemon.refresher.request(path, relpath)
        state_file = request.get("stateFile")
        unit = request.get("unit")

        def read() -> direct.Answer:
            if state_file is None:
                epic = epic_of_folder(relpath.split("/")[1]) or ""
                result = direct.resume_epic(path, epic, str(key), daemon.options)
            else:
                unit_key = None if unit is None else str(unit)
                result = direct.resume_unit(path, str(state_file), unit_key, daemon.options)
            return direct.with_detectors(path, result, self.engine.detect)

        def render(answer: direct.Answer) -> bytes:
            body = orjson.dumps(
                {
                    "ok": True,
                    "envelope": answer.envelope,
                    "findings": [f.as_dict() for f in answer.findings],
                    "source": "direct",
                    "generation": None,
                }
            )
            return finish(body[:-1], self.clock(), suffix)

        return self.later(daemon.executor.submit(read), render, suffix)

    def op_epic(
        self, conn: Connection, request: dict[str, object], suffix: bytes
    ) -> asyncio.Future[bytes]:
        """The epic-level view (daemon/epicview.py), read on a worker thread."""
        from daemon.epicview import epic_view

        path = self.daemon.canonical(request.get("workspace"))
        epic = normalize_epic_id(str(field(request, "epic", str, required=True)))
        self.daemon.auto_watch(path)

        def render(view: dict[str, object]) -> bytes:
            return finish(orjson.dumps({"ok": True, "view": view})[:-1], self.clock(), suffix)

        timeout = self.daemon.options.lock_timeout
        future = self.daemon.executor.submit(epic_view, path, epic, timeout)
        return self.later(future, render, suffix)

    def _known_absent(self, path: str, relpath: str) -> bool:
        ws = self.engine.workspaces.get(path)
        state = ws.files.get(relpath) if ws else None
        return bool(state and state.signature and state.unreadable_since is None)

    def op_resume_cli(
        self, conn: Connection, request: dict[str, object], suffix: bytes
    ) -> bytes | asyncio.Future[bytes]:
        conn.one_shot = True
        argv = field(request, "argv", list, required=True)
        cwd = field(request, "cwd", str, required=True)
        if (
            not isinstance(argv, list)
            or not all(isinstance(a, str) for a in argv)
            or not os.path.isabs(str(cwd))
        ):
            raise UsageError("'argv' must be a list of strings and 'cwd' an absolute path")
        daemon = self.daemon
        daemon.counters["queries"] += 1
        try:
            query = from_argv(list(argv), str(cwd))
        except HelpRequested as exc:  # `storyd-resume --help`: what `storyd resume` prints
            return _frame(Output(0, exc.text().encode()))
        except UsageError as exc:
            return _frame(Output(exc.code, b"", (exc.message,)))
        same_mode = (query.staleness or daemon.settings.staleness) == daemon.settings.staleness
        entry = None
        if same_mode:
            try:
                path = daemon.canonical(query.workspace)
            except StorydError:
                path = None
            if path is not None:
                if query.state_file is None:
                    relpath: str | None = self._epic_file(path, str(query.epic))
                    key = query.story
                else:
                    relpath, key, _ = self._target(
                        path, {"stateFile": query.state_file, "unit": query.unit}
                    )
                entry = (
                    self.engine.lookup(path, relpath, key, checked=query.detail)
                    if key and relpath
                    else None
                )
                if entry is None:
                    daemon.auto_watch(path)
        if entry is not None:
            daemon.counters["hits"] += 1
            if not query.detail:
                return entry.cli_body
            if entry.error is not None:
                return _frame(Output(entry.error.code, b"", (entry.error.message,)))
            line = direct.detail_line(entry.envelope, entry.findings, "cache")  # type: ignore[arg-type]
            return _frame(Output(0, line, entry.warnings))
        daemon.counters["misses"] += 1
        default = daemon.settings.staleness
        future = daemon.executor.submit(direct.run, query, default, self.engine.detect)
        return self.later(future, _frame, suffix)

    def _workspace_filter(self, request: dict[str, object]) -> str | None:
        raw = request.get("workspace")
        return None if raw is None else self.daemon.canonical(raw)

    def summaries(
        self, workspace: str | None, *, detail: bool = False, in_flight: bool = False
    ) -> list[dict[str, object]]:
        """Unit summaries in a stable order (workspace, state file, unit)."""
        units = [e.summary(detail=detail) for e in self.engine.entries(workspace)]
        if in_flight:
            units = [u for u in units if u["resumePoint"] != "all-done"]
        units.sort(key=lambda u: (str(u["workspace"]), str(u["stateFile"]), str(u["unit"])))
        return units

    def op_list(self, conn: Connection, request: dict[str, object], suffix: bytes) -> bytes:
        workspace = self._workspace_filter(request)
        in_flight = bool(field(request, "inFlight", bool, default=False))
        detail = bool(field(request, "detail", bool, default=False))
        units = self.summaries(workspace, detail=detail, in_flight=in_flight)
        body: dict[str, object] = {"ok": True, "units": units}
        warm = self.daemon.warm_progress()
        if warm["warming"]:
            body["warm"] = warm  # the list may be partial until the warm-up ends
        return finish(orjson.dumps(body)[:-1], self.clock(), suffix)

    def _declines(self, path: str) -> str | None:
        """Why a query may not start watching `path` (the auto_watch rules), or None."""
        settings = self.daemon.settings
        if self.daemon.watching(path):
            return None
        if not settings.auto_watch:
            return "auto_watch is off"
        if len(self.engine.workspaces) >= settings.max_workspaces:
            return f"already watching {settings.max_workspaces} workspaces, the cap"
        return None

    def op_watch(
        self, conn: Connection, request: dict[str, object], suffix: bytes
    ) -> bytes | asyncio.Future[bytes]:
        path = self.daemon.canonical(request.get("workspace"))
        if field(request, "auto", bool, default=False):
            reason = self._declines(path)
            if reason is not None:
                body = orjson.dumps(
                    {"ok": True, "workspace": path, "watching": False, "reason": reason}
                )
                return finish(body[:-1], self.clock(), suffix)

        def render(units: int) -> bytes:
            body = orjson.dumps({"ok": True, "workspace": path, "watching": True, "units": units})
            return finish(body[:-1], self.clock(), suffix)

        return self.later(self.daemon.watch(path), render, suffix)

    def op_unwatch(
        self, conn: Connection, request: dict[str, object], suffix: bytes
    ) -> asyncio.Future[bytes]:
        path = self.daemon.canonical(request.get("workspace"))

        def render(was: bool) -> bytes:
            body = orjson.dumps({"ok": True, "workspace": path, "watching": False, "was": was})
            return finish(body[:-1], self.clock(), suffix)

        return self.later(self.daemon.unwatch(path), render, suffix)

    def op_subscribe(self, conn: Connection, request: dict[str, object], suffix: bytes) -> bytes:
        since = field(request, "since", str)
        workspace = self._workspace_filter(request)
        if len(self.subscribers) >= self.settings.max_subscribers:
            message = f"too many subscribers ({self.settings.max_subscribers})"
            return finish(error_body(75, "EX_TEMPFAIL", message), self.clock(), suffix)
        conn.subscribed = True
        conn.sub_workspace = workspace
        self.subscribers.add(conn)
        answer: dict[str, object] = {"ok": True, "subscribed": True, "freshInstance": False}
        replay: list[bytes] = []
        if since is not None:
            found = self.engine.replay(str(since), workspace)
            if found is None:
                answer["freshInstance"] = True
                answer["units"] = self.summaries(workspace)
            else:
                replay = found
        if replay:
            last = orjson.loads(replay[-1])["generation"]
            conn.replayed_gen = last
            conn.replayed_tail = {
                line for line in replay if orjson.loads(line)["generation"] == last
            }
        reply = finish(orjson.dumps(answer)[:-1], self.clock(), suffix)
        return reply + b"".join(replay)

    def op_stats(self, conn: Connection, request: dict[str, object], suffix: bytes) -> bytes:
        daemon = self.daemon
        counters = daemon.counters
        body = {
            "ok": True,
            "version": __version__,
            "pid": os.getpid(),
            "uptime": daemon.uptime(),
            "queries": counters["queries"],
            "hits": counters["hits"],
            "misses": counters["misses"],
            "requests": self.counters["requests"],
            "refreshes": self.engine.counters["refreshes"],
            "unreadable": self.engine.counters["unreadable"],
            "events": self.engine.counters["events"],
            "workspaces": sorted(self.engine.workspaces),
            "stories": sum(len(ws.entries) for ws in list(self.engine.workspaces.values())),
            "connections": len(self.connections),
            "subscribers": len(self.subscribers),
            "droppedSubscribers": self.counters["dropped_subscribers"],
            "refusedPeers": self.counters["refused"],
            "watchedDirs": daemon.watcher.watched_dirs(),
            "generation": self.engine.generation,
            "staleness": self.settings.staleness,
            "limits": self.limits(),
            "warm": daemon.warm_progress(),
        }
        return finish(orjson.dumps(body)[:-1], self.clock(), suffix)

    def limits(self) -> dict[str, object]:
        """The limits in force (after any reload), in the configuration's units."""
        settings = self.settings
        return {
            "max_workspaces": settings.max_workspaces,
            "max_line_bytes": self.max_line,
            "lock_timeout": self.daemon.options.lock_timeout,
            "verify_interval": self.daemon.refresher.verify_interval,
            "settle_ms": round(self.daemon.refresher.settle * 1000),
            "max_subscribers": settings.max_subscribers,
            "subscriber_buffer": settings.subscriber_buffer,
        }

    # -- reconcile (issue 11): a read-only plan, and the CLI apply's notice -------------

    def _watched(self, request: dict[str, object]) -> str:
        path = self.daemon.canonical(request.get("workspace"))
        if not self.daemon.watching(path):
            raise UsageError(f"workspace {path} is not watched; watch it first")
        return path

    def op_reconcile(
        self, conn: Connection, request: dict[str, object], suffix: bytes
    ) -> asyncio.Future[bytes]:
        from daemon.reconcile.auto import plan_request

        path = self._watched(request)
        cfg = self.reconcile_config

        def plan() -> dict[str, object]:
            from daemon import config

            return plan_request(path, request, cfg or config.load())

        def render(body: dict[str, object]) -> bytes:
            return finish(orjson.dumps({"ok": True, **body})[:-1], self.clock(), suffix)

        return self.later(self.daemon.executor.submit(plan), render, suffix)

    def op_reconciled(self, conn: Connection, request: dict[str, object], suffix: bytes) -> bytes:
        from daemon.reconcile.auto import reconciled_notice

        path = self._watched(request)
        files = reconciled_notice(self.engine, path)
        return finish(orjson.dumps({"ok": True, "events": files})[:-1], self.clock(), suffix)

    # -- events --------------------------------------------------------------

    def broadcast(self, event: dict[str, object], line: bytes) -> None:
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

    def sink(self, event: dict[str, object], line: bytes) -> None:
        """The engine's sink: hop from the refresher thread to the loop."""
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
        self.engine.sinks.append(self.sink)
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


def _relative(workspace: str, state_file: str) -> str | None:
    """A state file as a normalised workspace-relative path, None when it may leave it."""
    if os.path.isabs(state_file):
        if not state_file.startswith(workspace + "/"):
            return None
        state_file = state_file[len(workspace) + 1 :]
    rel = os.path.normpath(state_file)
    if rel.startswith("..") or rel.startswith("/") or rel == ".":
        return None
    return rel
