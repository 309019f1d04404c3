"""The protocol's ops over a Daemon: what each request reads, and the bytes it answers.

The socket side (framing, ordering, back-pressure, subscriptions: `Transport.subscribe`)
is `transport.py`; the cache is read only through the engine's query methods (`lookup`,
`serve`, `epic_file`, `sole_unit`, `known_absent`, `summaries`, `stats`; queries.py)
and its event log (`clock`, `replay`), and every answer's bytes come from `protocol.py`.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Mapping

from storyd import __version__
from storyd.api import answers
from storyd.api.claims_requests import ACTIONS as CLAIM_ACTIONS
from storyd.api.claims_requests import use_config
from storyd.api.claude_ties import with_lists
from storyd.config import Config
from storyd.core.errors import StorydError, StoryNotInState, UsageError
from storyd.core.flags import HelpRequested
from storyd.core.ids import normalize_epic_id
from storyd.core.query import Output, Query, from_argv, from_request
from storyd.core.wire import UnitSummary
from storyd.server.connection import Connection
from storyd.server.protocol import (
    direct_body,
    error_of,
    field,
    finish,
    output_frame,
    ping_body,
    reply,
)
from storyd.server.service import Daemon
from storyd.server.store import Entry
from storyd.server.transport import Op, Transport

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.server.epicviews import EpicViews
    from storyd.server.recorder import Recorder

__all__ = ["Server"]

_QUERIES_KEPT = 4096  # parsed `resume` queries kept (Server._query); cleared when full


def _cli_reply(hit: Entry | StoryNotInState, detail: bool, workspace: str) -> bytes:
    """A `resume-cli` hit, framed: exactly what `storyd resume` prints."""
    if isinstance(hit, StoryNotInState):
        return output_frame(Output(hit.code, b"", (hit.message,)))
    if not detail:
        return hit.cli_body
    if hit.error is not None:
        return output_frame(Output(hit.error.code, b"", (hit.error.message,)))
    line = answers.detail_line(hit.envelope, hit.findings, "cache", hit.unit, workspace)  # type: ignore[arg-type]
    return output_frame(Output(0, line, hit.warnings))


class Server:
    """The protocol's ops over a Daemon, on the socket its Transport serves.

    `cfg` is the configuration reconcile plans with (None: read it at each plan);
    `reports` names the optional parts' sections of `stats` (the fleet's) and the
    function that gives each one's current state.
    """

    def __init__(
        self,
        daemon: Daemon,
        cfg: Config | None = None,
        reports: Mapping[str, Callable[[], object]] | None = None,
        *,
        max_connections: int = 1024,
        history: Recorder | None = None,
    ) -> None:
        self.daemon = daemon
        self.history = history
        self.engine = daemon.engine
        self.settings = daemon.settings
        self.reconcile_config = cfg
        if cfg is not None and cfg.path is not None:
            use_config(cfg.path)  # issue 45: claims follow the daemon's own --config
        self.reports = dict(reports or {})
        self.ops: dict[str, Op] = {
            "ping": self.op_ping,
            "resume": self.op_resume,
            "resume-cli": self.op_resume_cli,
            "list": self.op_list,
            "watch": self.op_watch,
            "unwatch": self.op_unwatch,
            "subscribe": self.op_subscribe,
            "stats": self.op_stats,
            "epic": self.op_epic,
            "reconcile": self.op_reconcile,  # daemon/api/reconcile (issue 11)
            "reconciled": self.op_reconciled,
            "history": self.op_history,  # issue 33: a unit's versions; accept
            "hook": self.op_hook,  # bin/storyd-hook (issue 31)
            **{action: self.claims_op(action) for action in CLAIM_ACTIONS},  # issue 45
        }
        self._queries: dict[tuple[object, ...], Query] = {}  # see _query
        self._epics: EpicViews | None = None  # built at the first `epic` or `stats` op
        self._epics_lock = threading.Lock()
        self.transport = Transport(
            daemon.settings, self.ops, self.clock, max_connections=max_connections
        )
        self.later = self.transport.later

    @property
    def epics(self) -> EpicViews:
        """The kept epic views, built (and their modules imported) at first use: the
        daemon's start-up, before the socket listens, does not pay for them."""
        with self._epics_lock:
            if self._epics is None:
                from storyd.server.epicviews import EpicViews

                reads = self.engine.reads
                self._epics = EpicViews(self.daemon.changes, reads.quiet.due, reads.file_lock)
            return self._epics

    def clock(self) -> bytes:
        """The engine's clock as bytes."""
        return self.engine.log.clock().encode()

    # -- ops -----------------------------------------------------------------

    def op_ping(self, conn: Connection, request: dict[str, object], suffix: bytes) -> bytes:
        return reply(ping_body(self.engine.log.instance), self.clock(), suffix)

    def _hit(self, path: str, query: Query) -> Entry | StoryNotInState | None:
        """What the cache may answer now: the unit's entry, a unit surely not in its
        file, or None (read directly).

        An entry answers only while its files are as it read them (`Engine.serve`: read
        your writes); an absent unit only while its file is (`known_absent`).
        """
        engine = self.engine
        if query.state_file is None and engine.epic_file(path, str(query.epic)) is None:
            return None  # the workspace not read yet: its epic is found on disk by the miss,
            # on the pool while the background gives way, not by the event loop racing the
            # warm-up's build for the interpreter lock (155 ms for a listdir, profiled)
        target = self.daemon.target(path, query)
        if target.key is None:
            return None
        entry = engine.serve(path, target.relpath, target.key, checked=query.detail)
        if entry is not None:
            if query.detail and self.daemon.refresher.git_moved(path):
                return None  # its findings are of before a commit no pass checked yet
            return entry
        if engine.known_absent(path, target.relpath, target.key):
            return target.not_there()
        return None

    def _query(self, request: dict[str, object], path: str) -> Query:
        """`from_request`, kept by the fields it reads: a client asking the same unit
        again costs a dict lookup, not the fields' checks (the Query is never changed)."""
        key = (path, request.get("stateFile"), request.get("unit"), request.get("epic"),
               request.get("story"))
        try:
            query = self._queries.get(key)
        except TypeError:  # an unhashable field: from_request names what is wrong
            return from_request(request, path)
        if query is None:
            query = from_request(request, path)  # a UsageError is raised, never kept
            if len(self._queries) >= _QUERIES_KEPT:
                self._queries.clear()
            self._queries[key] = query
        return query

    def op_resume(
        self, conn: Connection, request: dict[str, object], suffix: bytes
    ) -> bytes | asyncio.Future[bytes]:
        daemon = self.daemon
        daemon.counters["queries"] += 1
        path = daemon.canonical(request.get("workspace"))
        query = self._query(request, path)
        hit = self._hit(path, query)
        if hit is not None:
            daemon.counters["hits"] += 1
            body = error_of(hit) if isinstance(hit, StoryNotInState) else hit.answer_body
            return finish(body, self.clock(), suffix)
        daemon.counters["misses"] += 1
        daemon.auto_watch(path)

        def render(answer: answers.Answer) -> bytes:
            # read directly, but the same answer as an installed generation: say which
            unit = answer.unit
            entry = self.engine.lookup(path, unit.state_file, unit.key, checked=False)
            same = entry is not None and entry.line == answer.line
            generation = entry.generation if same and entry is not None else None
            return finish(direct_body(answer, generation), self.clock(), suffix)

        arrived = time.monotonic_ns()  # a read of the file begun after this will do
        read = daemon.executor.submit(daemon.read_answer, path, query, arrived)
        return self.later(read, render, suffix)

    def op_epic(
        self, conn: Connection, request: dict[str, object], suffix: bytes
    ) -> asyncio.Future[bytes]:
        """The epic-level view (daemon/api/epicview.py) on a worker thread: kept while
        what it was read from is unchanged, else read again (server/epicviews.py)."""
        path = self.daemon.canonical(request.get("workspace"))
        epic = normalize_epic_id(str(field(request, "epic", str, required=True)))
        self.daemon.auto_watch(path)

        timeout = self.daemon.options.lock_timeout
        cap = self.settings.limits.max_answer_bytes

        def body() -> bytes:
            # rendered on the worker: a big view's dump never holds up the event loop
            return self.epics.line(path, epic, timeout, cap)

        def render(line: bytes) -> bytes:
            return finish(line, self.clock(), suffix)

        return self.later(self.daemon.executor.submit(body), render, suffix)

    def op_resume_cli(
        self, conn: Connection, request: dict[str, object], suffix: bytes
    ) -> bytes | asyncio.Future[bytes]:
        conn.answer_once()
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
            return output_frame(Output(0, exc.text().encode()))
        except UsageError as exc:
            return output_frame(Output(exc.code, b"", (exc.message,)))
        default = daemon.settings.staleness

        def read_directly() -> asyncio.Future[bytes]:
            future = daemon.executor.submit(answers.run, query, default, self.engine.detect)
            return self.later(future, output_frame, suffix)

        if (query.staleness or default) != default:  # not the cache's mode: read that way
            daemon.counters["misses"] += 1
            return read_directly()
        try:
            path = daemon.canonical(query.workspace)
            hit = self._hit(path, query)
        except StorydError:  # the direct read says it in its own words, as the CLI would
            daemon.counters["misses"] += 1
            return read_directly()
        if hit is not None:
            daemon.counters["hits"] += 1
            return _cli_reply(hit, query.detail, path)
        arrived = time.monotonic_ns()  # a read of the file begun after this will do
        daemon.counters["misses"] += 1
        daemon.auto_watch(path)

        def read() -> Output:
            try:
                result = daemon.read_answer(path, query, arrived)
            except StorydError as exc:
                if exc.code in (2, 65, 75):  # the last good read lacks it; never read well
                    return Output(exc.code, b"", (exc.message,))
                return answers.run(query, default, self.engine.detect)  # in the CLI's words
            if query.detail:
                line = answers.detail_line(result.envelope, result.findings, "direct",
                                          result.unit, path)
                return Output(0, line, tuple(result.warnings))
            return Output(0, result.line, tuple(result.warnings))

        return self.later(daemon.executor.submit(read), output_frame, suffix)

    def _workspace_filter(self, request: dict[str, object]) -> str | None:
        raw = request.get("workspace")
        return None if raw is None else self.daemon.canonical(raw)

    def op_list(
        self, conn: Connection, request: dict[str, object], suffix: bytes
    ) -> bytes | asyncio.Future[bytes]:
        workspace = self._workspace_filter(request)
        in_flight = bool(field(request, "inFlight", bool, default=False))
        detail = bool(field(request, "detail", bool, default=False))
        lists = bool(field(request, "claudeLists", bool, default=True))  # the tied task lists

        def render(units: list[UnitSummary]) -> bytes:
            body: dict[str, object] = {"ok": True, "units": units, "claudeLists": lists}
            unreadable = self.engine.unreadable(workspace)
            if unreadable:
                body["unreadable"] = unreadable
            warm = self.daemon.warm_progress()
            if warm["warming"]:
                body["warm"] = warm  # the list may be partial until the warm-up ends
            return reply(body, self.clock(), suffix)

        def summaries(_synced: object = None) -> bytes:
            found = self.engine.summaries(workspace, detail=detail, in_flight=in_flight)
            spaces = [workspace] if workspace else list(self.engine.workspaces)
            return render(with_lists(found, spaces, in_flight=in_flight, detail=detail)
                          if lists else found)

        arrived = time.time_ns()
        stale = self.engine.stale_files(workspace)
        spaces = [path for path in ([workspace] if workspace else list(self.engine.workspaces))
                  if path in self.engine.workspaces]  # fmt: skip
        # a commit no watch has told yet (FSEvents and polling tell late): git first
        moved = any(self.daemon.refresher.git_moved(path) for path in spaces)
        if not stale and not moved:
            return summaries()
        # read your writes: the files changed since their read are read again first
        return self.later(self.daemon.sync(stale, spaces, arrived), summaries, suffix)

    def _declines(self, path: str) -> str | None:
        """Why a query may not start watching `path` (the auto_watch rules), or None."""
        settings = self.daemon.settings
        if self.daemon.watching(path):
            return None
        if not settings.auto_watch:
            return "auto_watch is off"
        if self.engine.workspace_count() >= settings.limits.max_workspaces:
            return f"already watching {settings.limits.max_workspaces} workspaces, the cap"
        return None

    def op_watch(
        self, conn: Connection, request: dict[str, object], suffix: bytes
    ) -> bytes | asyncio.Future[bytes]:
        path = self.daemon.canonical(request.get("workspace"))
        if field(request, "auto", bool, default=False):
            reason = self._declines(path)
            if reason is not None:
                body = {"ok": True, "workspace": path, "watching": False, "reason": reason}
                return reply(body, self.clock(), suffix)

        def render(units: int) -> bytes:
            body = {"ok": True, "workspace": path, "watching": True, "units": units}
            return reply(body, self.clock(), suffix)

        auto = bool(field(request, "auto", bool, default=False))
        return self.later(self.daemon.watch(path, auto=auto), render, suffix)

    def op_unwatch(
        self, conn: Connection, request: dict[str, object], suffix: bytes
    ) -> asyncio.Future[bytes]:
        path = self.daemon.canonical(request.get("workspace"))

        def render(was: bool) -> bytes:
            body = {"ok": True, "workspace": path, "watching": False, "was": was}
            return reply(body, self.clock(), suffix)

        return self.later(self.daemon.unwatch(path), render, suffix)

    def op_subscribe(self, conn: Connection, request: dict[str, object], suffix: bytes) -> bytes:
        since = field(request, "since", str)
        workspace = self._workspace_filter(request)
        subscription = self.transport.subscribe(conn, workspace)  # or TooManySubscribers
        answer: dict[str, object] = {"ok": True, "subscribed": True, "freshInstance": False}
        replay: list[bytes] = []
        if since is not None:
            found = self.engine.log.replay(str(since), workspace)
            if found is None:
                answer["freshInstance"] = True
                answer["units"] = self.engine.summaries(workspace)
            else:
                replay = found
        subscription.replayed(replay)
        return reply(answer, self.clock(), suffix) + b"".join(replay)

    def op_stats(self, conn: Connection, request: dict[str, object], suffix: bytes) -> bytes:
        daemon = self.daemon
        transport = self.transport
        counters = daemon.counters
        body = {
            "ok": True,
            "version": __version__,
            "pid": os.getpid(),
            "uptime": daemon.uptime(),
            "queries": counters["queries"],
            "hits": counters["hits"],
            "misses": counters["misses"],
            "requests": transport.counters["requests"],
            **self.engine.stats(),
            "connections": len(transport.connections),
            "subscribers": len(transport.subscribers),
            "droppedSubscribers": transport.subscribers.dropped,
            "refusedPeers": transport.counters["refused"],
            **transport.transport_stats(),
            "watchedDirs": daemon.watcher.watched_dirs(),
            "unwatchedDirs": daemon.watcher.unwatched_dirs(),
            "staleness": self.settings.staleness,
            "limits": self.limits(),
            "warm": daemon.warm_progress(),
            **{name: report() for name, report in self.reports.items()},
            "watching": daemon.watch_counts(),  # issue 20: watched, auto, expired, gone
            "epicViews": self.epics.stats(),  # reads (parses), served kept, kept now
            "heap": self.engine.reads.quiet.stats(),  # big parses, trims (quietgc.py)
        }
        return reply(body, self.clock(), suffix)

    def limits(self) -> dict[str, object]:
        """The limits in force (after any reload), in the configuration's units."""
        settings = self.settings
        return {
            "max_workspaces": settings.limits.max_workspaces,
            "max_line_bytes": settings.limits.max_line_bytes,
            "lock_timeout": self.daemon.options.lock_timeout,
            "verify_interval": self.daemon.refresher.verify_interval,
            "settle_ms": round(self.daemon.refresher.settle * 1000),
            "max_subscribers": settings.limits.max_subscribers,
            "subscriber_buffer": settings.limits.subscriber_buffer,
            "git_lock_wait": settings.limits.git_lock_wait,
            "max_state_bytes": settings.limits.max_state_bytes,
            "max_answer_bytes": settings.limits.max_answer_bytes,
            **self.transport.transport_limits(),
        }

    def op_hook(
        self, conn: Connection, request: dict[str, object], suffix: bytes
    ) -> asyncio.Future[bytes]:
        """An agent's hook, answered as `storyd hook` would (server/hookop.py)."""
        from storyd.server import hookop

        conn.answer_once()
        hook = hookop.Request(request)
        assert self.transport.loop is not None
        units = hookop.cached_units(self.daemon, self.transport.loop, self._declines)
        unreadable = hookop.cached_unreadable(self.daemon, self.transport.loop)
        future = self.daemon.executor.submit(hookop.run, hook, units, unreadable)
        return self.later(future, lambda framed: framed, suffix)

    # -- reconcile (issue 11): a read-only plan, and the CLI apply's notice -------------

    def _watched(self, request: dict[str, object]) -> str:
        path = self.daemon.canonical(request.get("workspace"))
        if not self.daemon.watching(path):
            raise UsageError(f"workspace {path} is not watched; watch it first")
        return path

    def op_reconcile(
        self, conn: Connection, request: dict[str, object], suffix: bytes
    ) -> asyncio.Future[bytes]:
        from storyd.server.reconciler import plan_request

        path = self._watched(request)
        cfg = self.reconcile_config

        def plan() -> dict[str, object]:
            from storyd import config

            return plan_request(path, request, cfg or config.load())

        def render(body: dict[str, object]) -> bytes:
            return reply({"ok": True, **body}, self.clock(), suffix)

        return self.later(self.daemon.executor.submit(plan), render, suffix)

    def op_reconciled(self, conn: Connection, request: dict[str, object], suffix: bytes) -> bytes:
        from storyd.server.reconciler import reconciled_notice

        path = self._watched(request)
        files = reconciled_notice(self.engine, path)
        return reply({"ok": True, "events": files}, self.clock(), suffix)



    # -- history (issue 33): a unit's versions, read-only; accept its current one -------

    def op_history(
        self, conn: Connection, request: dict[str, object], suffix: bytes
    ) -> asyncio.Future[bytes]:
        from concurrent.futures import Future

        from storyd.api import history
        from storyd.core.target import for_state_file

        path = self.daemon.canonical(request.get("workspace"))
        state_file = field(request, "stateFile", str, required=True)
        found = for_state_file(path, str(state_file), field(request, "unit", str))  # type: ignore[arg-type]
        named = history.Named(path, found.relpath, found.key)
        recorder = self.history
        if recorder is None:
            raise UsageError("this daemon does not record history ([history] enabled = false,"
                             " or another daemon writes the database)")
        if not field(request, "accept", bool, default=False):
            since = request.get("since", 0.0)
            if not isinstance(since, (int, float)) or isinstance(since, bool):
                raise UsageError("field 'since' must be a number (epoch seconds)")
            read = self.daemon.executor.submit(
                history.versions, named, float(since), recorder.writer.path
            )
            return self.later(read, lambda v: reply({"ok": True, "versions": v},
                                                      self.clock(), suffix), suffix)  # fmt: skip
        done: Future[bool] = Future()
        engine = self.engine

        def accept() -> None:  # on the refresher: the marks are its own
            try:
                ws = engine.workspaces.get(path)
                snap = ws.files.get(named.state_file) if ws is not None else None
                keys = list(snap.keys) if snap is not None else []
                key = named.unit or (keys[0] if len(keys) == 1 else "")
                entry = engine.lookup(path, named.state_file, key, checked=False)
                if entry is not None:
                    recorder.accept(path, entry.unit)
                gone = entry is None and snap is not None and recorder.accept_gone(
                    (path, named.state_file, key), snap.adapter.name
                )  # a unit gone from the file: its lost progress is let go
                if (entry is not None or gone) and ws is not None:
                    engine.recheck(ws)
                done.set_result(entry is not None or gone)
            except Exception as exc:  # told to the client, never lost
                done.set_exception(exc)

        self.daemon.refresher.call(accept, urgent=True)

        def render(found: bool) -> bytes:
            if not found:
                raise UsageError(f"unit {named.unit!r} of {named.state_file} is not watched")
            return reply({"ok": True, "accepted": True}, self.clock(), suffix)

        return self.later(done, render, suffix)

    def claims_op(self, action: str) -> Op:
        """The op of one claims action (claim, release, claims, claim-next): the same
        answer as the MCP tools' (daemon/api/claims_requests.py), on a worker thread (the
        claims database may wait for another process's transaction)."""

        def op(conn: Connection, request: dict[str, object],
               suffix: bytes) -> asyncio.Future[bytes]:  # fmt: skip
            from storyd.api.claims_requests import answer

            work = self.daemon.executor.submit(answer, action, request)
            return self.later(work, lambda body: reply(body, self.clock(), suffix), suffix)

        return op
