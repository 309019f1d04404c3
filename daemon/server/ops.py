"""The protocol's ops over a Daemon: what each request reads, and the bytes it answers.

The socket side (framing, ordering, back-pressure, subscribers' writes) is
`transport.py`; the cache is read only through the engine's query methods (`lookup`,
`epic_file`, `sole_unit`, `known_absent`, `summaries`, `stats`, `replay`), and every
answer's bytes come from `protocol.py`.
"""

from __future__ import annotations

import asyncio
import os

import orjson

from daemon import __version__, answers
from daemon.config import Config
from daemon.errors import StorydError, StoryNotInState, UsageError
from daemon.flags import HelpRequested
from daemon.formats.epic import epic_state_file
from daemon.ids import normalize_epic_id, normalize_story_id
from daemon.query import Output, from_argv
from daemon.server.protocol import (
    answer_body,
    cli_frame,
    error_body,
    error_of,
    field,
    findings_json,
    finish,
    reply,
)
from daemon.server.service import Daemon
from daemon.server.transport import Connection, Transport

__all__ = ["Server", "Target"]


class Target:
    """What a `resume` request names: the state file, the unit (None: ask the file),
    the epic when it named one, and the message for a unit that is not there."""

    __slots__ = ("epic", "key", "missing", "relpath")

    def __init__(self, relpath: str, key: str | None, missing: str, epic: str | None) -> None:
        self.relpath = relpath
        self.key = key
        self.missing = missing
        self.epic = epic


def _frame(output: Output) -> bytes:
    return cli_frame(output.code, output.stdout, output.stderr)


class Server(Transport):
    """The protocol's ops over a Daemon, on one listening socket."""

    def __init__(self, daemon: Daemon, *, max_connections: int = 1024) -> None:
        super().__init__(daemon.settings, max_connections=max_connections)
        self.daemon = daemon
        self.engine = daemon.engine
        self.ops = {
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
        self.engine.sinks.append(self.sink)  # events reach the loop once it serves

    def clock(self) -> bytes:
        """The engine's clock as bytes."""
        return self.engine.clock().encode()

    # -- ops -----------------------------------------------------------------

    def op_ping(self, conn: Connection, request: dict[str, object], suffix: bytes) -> bytes:
        body = {"ok": True, "version": __version__, "pid": os.getpid(),
                "instance": self.engine.instance}
        return reply(body, self.clock(), suffix)

    def _target(self, path: str, request: dict[str, object]) -> Target:
        """What a resume request names (epic and story, or state file and unit)."""
        state_file = field(request, "stateFile", str)
        if state_file is None:
            epic = normalize_epic_id(str(field(request, "epic", str, required=True)))
            story = normalize_story_id(str(field(request, "story", str, required=True)))
            return Target(self._epic_file(path, epic), story,
                          "Story not in execution-state.json", epic)
        unit = field(request, "unit", str)
        relpath = _relative(path, str(state_file))
        if unit is None and relpath:
            unit = self.engine.sole_unit(path, relpath)
        return Target(
            relpath or str(state_file),
            None if unit is None else str(unit),
            f"unit {unit!r} not in {relpath}",
            None,
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
        target = self._target(path, request)
        key = target.key
        entry = self.engine.lookup(path, target.relpath, key) if key is not None else None
        if entry is not None:
            daemon.counters["hits"] += 1
            return finish(entry.answer_body, self.clock(), suffix)
        if key is not None and self.engine.known_absent(path, target.relpath):
            daemon.counters["hits"] += 1
            return finish(error_of(StoryNotInState(target.missing)), self.clock(), suffix)
        daemon.counters["misses"] += 1
        daemon.auto_watch(path)
        if daemon.watching(path):
            daemon.refresher.request(path, target.relpath)
        state_file = request.get("stateFile")
        unit = request.get("unit")

        def read() -> answers.Answer:
            if target.epic is not None:
                result = answers.resume_epic(path, target.epic, str(key), daemon.options)
            else:
                unit_key = None if unit is None else str(unit)
                result = answers.resume_unit(path, str(state_file), unit_key, daemon.options)
            return answers.with_detectors(path, result, self.engine.detect)

        def render(answer: answers.Answer) -> bytes:
            body = answer_body(answer.line, findings_json(answer.findings), b"direct", None)
            return finish(body, self.clock(), suffix)

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
            return reply({"ok": True, "view": view}, self.clock(), suffix)

        timeout = self.daemon.options.lock_timeout
        future = self.daemon.executor.submit(epic_view, path, epic, timeout)
        return self.later(future, render, suffix)

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
                    target = self._target(
                        path, {"stateFile": query.state_file, "unit": query.unit}
                    )
                    relpath, key = target.relpath, target.key
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
            line = answers.detail_line(entry.envelope, entry.findings, "cache")  # type: ignore[arg-type]
            return _frame(Output(0, line, entry.warnings))
        daemon.counters["misses"] += 1
        default = daemon.settings.staleness
        future = daemon.executor.submit(answers.run, query, default, self.engine.detect)
        return self.later(future, _frame, suffix)

    def _workspace_filter(self, request: dict[str, object]) -> str | None:
        raw = request.get("workspace")
        return None if raw is None else self.daemon.canonical(raw)

    def op_list(self, conn: Connection, request: dict[str, object], suffix: bytes) -> bytes:
        workspace = self._workspace_filter(request)
        in_flight = bool(field(request, "inFlight", bool, default=False))
        detail = bool(field(request, "detail", bool, default=False))
        units = self.engine.summaries(workspace, detail=detail, in_flight=in_flight)
        body: dict[str, object] = {"ok": True, "units": units}
        warm = self.daemon.warm_progress()
        if warm["warming"]:
            body["warm"] = warm  # the list may be partial until the warm-up ends
        return reply(body, self.clock(), suffix)

    def _declines(self, path: str) -> str | None:
        """Why a query may not start watching `path` (the auto_watch rules), or None."""
        settings = self.daemon.settings
        if self.daemon.watching(path):
            return None
        if not settings.auto_watch:
            return "auto_watch is off"
        if self.engine.workspace_count() >= settings.max_workspaces:
            return f"already watching {settings.max_workspaces} workspaces, the cap"
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

        return self.later(self.daemon.watch(path), render, suffix)

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
                answer["units"] = self.engine.summaries(workspace)
            else:
                replay = found
        if replay:
            last = orjson.loads(replay[-1])["generation"]
            conn.replayed_gen = last
            conn.replayed_tail = {
                line for line in replay if orjson.loads(line)["generation"] == last
            }
        return reply(answer, self.clock(), suffix) + b"".join(replay)

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
            **self.engine.stats(),
            "connections": len(self.connections),
            "subscribers": len(self.subscribers),
            "droppedSubscribers": self.counters["dropped_subscribers"],
            "refusedPeers": self.counters["refused"],
            "watchedDirs": daemon.watcher.watched_dirs(),
            "staleness": self.settings.staleness,
            "limits": self.limits(),
            "warm": daemon.warm_progress(),
            "watching": daemon.watch_counts(),  # issue 20: watched, auto, expired, gone
        }
        return reply(body, self.clock(), suffix)

    def limits(self) -> dict[str, object]:
        """The limits in force (after any reload), in the configuration's units."""
        settings = self.settings
        return {
            "max_workspaces": settings.max_workspaces,
            "max_line_bytes": settings.max_line_bytes,
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
            return reply({"ok": True, **body}, self.clock(), suffix)

        return self.later(self.daemon.executor.submit(plan), render, suffix)

    def op_reconciled(self, conn: Connection, request: dict[str, object], suffix: bytes) -> bytes:
        from daemon.reconcile.auto import reconciled_notice

        path = self._watched(request)
        files = reconciled_notice(self.engine, path)
        return reply({"ok": True, "events": files}, self.clock(), suffix)



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
