"""The `hook` op: an agent's hook answered by the daemon (bin/storyd-hook's fast path).

The answer is storyd.api.hooks.answer's, the function `storyd hook` calls, so the bytes
and the exit code are the same; only the units come from this daemon's cache (what its
`list` op would answer `storyd hook`, read-your-writes included) instead of a request.
Whatever the in-process hook would do differently here (a workspace this daemon
declines to watch, a cache still warming, a payload file it cannot read) is an error
answer: the launcher then runs `storyd hook`, which decides in its own words.

The payload file is read on the worker (`run`), never on the event loop: a FIFO or a
device named there is refused at once (storyd.core.regular), and a slow disk holds up
only this hook, not every other client's answer.

Unlike `storyd hook`, the daemon also renews and releases the session's fleet claims
and judges a fleet unit's `claim-lost` by the bucket (`answer(..., fleet=True)`): it may
hold the fleet's connection already, and `nats` stays off the hooks' own path.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
import time
from collections.abc import Callable

import orjson

from storyd.api.hooks.answer import EVENTS, answer
from storyd.api.hooks.hookio import MAX_INPUT, parse_payload
from storyd.api.hooks.payload import AGENTS
from storyd.core.errors import StorydError, UsageError
from storyd.core.regular import FileTooLarge, read_regular
from storyd.server.protocol import cli_frame, field
from storyd.server.service import Daemon

__all__ = ["Request", "run"]

# the configuration, the sessions; where Claude Code's task lists are (claude_ties)
_HOMES = ("HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "CLAUDE_CONFIG_DIR",
          "CLAUDE_CODE_TASK_LIST_ID")
_WAIT = 30.0  # a first watch of a large workspace takes seconds; the launcher bounds us


class Unanswered(StorydError):
    """The daemon leaves this hook to `storyd hook` (the launcher runs it)."""

    code = 75
    name = "EX_TEMPFAIL"


class Request:
    """A `hook` request's fields, checked: event, agent, the payload (`payload`, base64,
    as bytes in `data`; or `file`, an absolute path the launcher wrote, read by
    `payload()` on the worker), `storyd` (the argv a printed fix names: the storyd the
    launcher would run) and `env`."""

    __slots__ = ("agent", "data", "env_file", "event", "file", "storyd")
    # `env`: the launcher's HOME, XDG_CONFIG_HOME and XDG_STATE_HOME; where they differ
    # from the daemon's, the hook would read another configuration or other session
    # records than `storyd hook` there: Unanswered

    def __init__(self, request: dict[str, object]) -> None:
        event = field(request, "event", str, required=True)
        if event not in EVENTS:
            raise UsageError(f"field 'event' must be one of {', '.join(EVENTS)}")
        agent = field(request, "agent", str)
        if agent is not None and agent not in AGENTS:
            raise UsageError(f"field 'agent' must be one of {', '.join(AGENTS)}")
        storyd = field(request, "storyd", str, required=True)
        if not os.path.isabs(str(storyd)):
            raise UsageError("field 'storyd' must be an absolute path")
        env = field(request, "env", dict, required=True)
        assert isinstance(env, dict)
        for name in _HOMES:
            if (env.get(name) or "") != os.environ.get(name, ""):
                raise Unanswered(f"the hook's {name} is not the daemon's")
        self.event = str(event)
        self.agent = None if agent is None else str(agent)
        self.storyd = str(storyd)
        self.data, self.file = _payload(request)
        given = env.get("CLAUDE_ENV_FILE")  # session-start leaves the owner there (issue 45)
        self.env_file = given if isinstance(given, str) and os.path.isabs(given) else None

    def payload(self) -> bytes | None:
        """The payload's bytes (the file read now: on a worker, never on the event loop);
        None when larger than a hook reads (then it says nothing, as `storyd hook`)."""
        if self.file is None:
            return self.data
        try:
            return read_regular(self.file, MAX_INPUT)
        except FileTooLarge:
            return None
        except OSError as exc:  # absent, a FIFO, a device: `storyd hook` decides
            raise Unanswered(f"cannot read the payload file {self.file}: {exc.strerror}") from None


def _payload(request: dict[str, object]) -> tuple[bytes | None, str | None]:
    """(the payload's bytes, None) or (None, the absolute path of the file holding it)."""
    encoded = field(request, "payload", str)
    if encoded is not None:
        try:
            return base64.b64decode(str(encoded), validate=True), None
        except (binascii.Error, ValueError) as exc:
            raise UsageError(f"field 'payload' is not base64: {exc}") from None
    path = field(request, "file", str, required=True)
    if not os.path.isabs(str(path)):
        raise UsageError("field 'file' must be an absolute path")
    return None, str(path)


def _on_loop(loop: asyncio.AbstractEventLoop, call: Callable[[], object]) -> object:
    """Run `call` on the event loop (the engine's and the watch's thread); its result."""

    async def run() -> object:
        return call()

    return asyncio.run_coroutine_threadsafe(run(), loop).result(_WAIT)


UnitsOf = Callable[[str], list[dict[str, object]]]  # a workspace -> its units in flight


def cached_units(daemon: Daemon, loop: asyncio.AbstractEventLoop,
                 declines: Callable[[str], str | None]) -> UnitsOf:  # fmt: skip
    """A workspace's units in flight as the `list` op gives them to `storyd hook`: watched
    first (as a query would), files changed since their read read again first."""
    engine = daemon.engine

    def units(workspace: str) -> list[dict[str, object]]:
        path = str(_on_loop(loop, lambda: daemon.canonical(workspace)))
        reason = _on_loop(loop, lambda: declines(path))
        if reason is not None:
            raise Unanswered(f"the daemon does not watch {path} ({reason})")
        _on_loop(loop, lambda: daemon.watch(path, auto=True)).result(_WAIT)  # type: ignore[attr-defined]
        if _on_loop(loop, lambda: daemon.warm_progress()["warming"]):
            raise Unanswered("the daemon's cache is still warming")
        arrived = time.time_ns()
        stale = _on_loop(loop, lambda: engine.stale_files(path))
        if stale or daemon.refresher.git_moved(path):  # or a commit no watch has told yet
            _on_loop(loop, lambda: daemon.sync(stale, [path], arrived)).result(_WAIT)  # type: ignore[attr-defined, arg-type]
        found = _on_loop(loop, lambda: engine.summaries(path, detail=True, in_flight=True))
        copied: list[dict[str, object]] = orjson.loads(orjson.dumps(found))
        return copied  # as the client reads the list op's

    return units


def cached_unreadable(daemon: Daemon, loop: asyncio.AbstractEventLoop) -> UnitsOf:
    """A workspace's state files that no longer parse, as the `list` op's `unreadable`
    gives them (asked after `cached_units`, which watched and synced the workspace)."""

    def unreadable(workspace: str) -> list[dict[str, object]]:
        path = str(_on_loop(loop, lambda: daemon.canonical(workspace)))
        found = _on_loop(loop, lambda: daemon.engine.unreadable(path))
        copied: list[dict[str, object]] = orjson.loads(orjson.dumps(found))
        return copied

    return unreadable


def run(hook: Request, units: UnitsOf, unreadable: UnitsOf | None = None) -> bytes:
    """The hook's answer framed as `resume-cli`'s (protocol.cli_frame): stdout, `!`
    stderr lines, `=code version`."""
    from storyd import config

    data = hook.payload()
    if data is None:
        return cli_frame(0, b"")
    payload = parse_payload(data)
    if payload is None:
        return cli_frame(0, b"")
    try:
        cfg = config.load(None)
        out, code = answer(hook.event, payload, hook.agent, cfg, units, [hook.storyd],
                           unreadable, hook.env_file, fleet=True)  # this process may reach it
    except Unanswered:
        raise
    except Exception as exc:  # `storyd hook` says nothing then: say it in its words
        raise Unanswered(f"{type(exc).__name__}: {exc}") from None
    if out is None:
        return cli_frame(code, b"")
    if code == 2:
        return cli_frame(code, b"", (out,))
    return cli_frame(code, (out + "\n").encode())
