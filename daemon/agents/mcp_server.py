"""`storyd mcp`: storyd as an MCP server over stdio, built on the official `mcp` SDK (2.x,
`mcp.server.mcpserver.MCPServer`, the SDK's FastMCP renamed).

Tools (each answer's text is the exact bytes the matching CLI command prints; the
structured part adds the findings):

    resume             storyd resume [--epic-id E --story-id S | --state-file F --unit U]
    status             storyd status --in-flight --json
    epic               storyd epic --epic-id E --json
    check              storyd check (text), with every unit's findings
    reconcile_preview  storyd reconcile --json
    reconcile_apply    storyd reconcile --apply --json (annotated destructive)

Each tool builds a typed request from its arguments and calls storyd.api, the functions
the command line calls too: an argument is always a value (a story id "--help" is an
invalid id, a tool error naming `story_id`), never a flag.

Resources: `storyd://in-flight` (the status JSON) and `storyd://unit/{unit}` (one unit's
resume answer), with `subscriptions/listen` events fed by the daemon's event stream.
Every tool takes an optional `workspace` (default: $CLAUDE_PROJECT_DIR, else the
server's cwd): the server's project folder, a configured workspace, or a folder the
user owns (inside `[hooks] roots` when that is set).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations

from storyd import __version__
from storyd.agents import hookio, source
from storyd.agents.mcp_events import Follower
from storyd.core.errors import StorydError, UsageError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from storyd.api.units import Units
    from storyd.config import Config
    from storyd.core.query import Query

__all__ = ["IN_FLIGHT", "build", "serve"]

T = TypeVar("T")

IN_FLIGHT = "storyd://in-flight"
UNIT = "storyd://unit/{unit}"
_READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
_DESTRUCTIVE = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)


class Setup:
    """The server's configuration file, socket and default workspace."""

    def __init__(self, config: str | None, socket: str | None, cwd: str) -> None:
        self.config = config
        self.socket = socket
        self.cwd = cwd

    def cfg(self) -> Config:
        return source.load_config(self.config)

    def workspace(self, given: str | None) -> str:
        """The workspace a tool reads: `given` (relative to the default) or the default;
        a UsageError when it lies outside the allowed roots or holds no workspace."""
        folder = os.path.realpath(os.path.join(self.cwd, given or "."))
        trust = hookio.Trust(self.cfg(), also=(os.path.realpath(self.cwd),))
        found, why = hookio.explain(folder, trust)
        if found is None:
            if not os.path.isdir(folder):
                raise UsageError(f"workspace {folder}: not a folder")
            raise UsageError(
                f"workspace {folder}: {why.removeprefix(folder + ' is ')}; add it to "
                "[hooks] roots or workspaces in the configuration"
            )
        return found

    def resume_query(
        self,
        workspace: str,
        epic_id: str | None = None,
        story_id: str | None = None,
        state_file: str | None = None,
        unit: str | None = None,
    ) -> Query:
        """A `--detail` resume query from a tool's arguments, checked by the same rules
        as `storyd resume`'s flags (core/query.py); every value stays a value."""
        from storyd.core.query import from_argv

        given = (
            ("epic-id", epic_id), ("story-id", story_id), ("state-file", state_file),
            ("unit", unit), ("workspace", workspace), ("config", self.config),
            ("socket", self.socket),
        )  # fmt: skip
        argv = [f"--{flag}={value}" for flag, value in given if value is not None]
        return _checked(lambda: from_argv([*argv, "--detail"], workspace))


_ARGUMENTS = {"--epic-id": "epic_id", "--story-id": "story_id", "--state-file": "state_file",
              "--unit": "unit", "--only": "only"}  # fmt: skip


def _checked(build: Callable[[], T]) -> T:
    """`build()`, a request from a tool's arguments; its UsageError names the tool's
    arguments (`epic_id`), not the command line's flags, and has no usage line."""
    try:
        return build()
    except UsageError as exc:
        words = exc.message.split("\n", 1)[0]
        for flag, argument in _ARGUMENTS.items():
            words = words.replace(flag, argument)
        raise UsageError(words) from None


def _error(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


def _ok(text: bytes | str, structured: dict[str, Any]) -> CallToolResult:
    shown = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    return CallToolResult(
        content=[TextContent(type="text", text=shown)],
        structured_content=structured,
        is_error=False,
    )


def _guarded(call: Callable[[], CallToolResult]) -> CallToolResult:
    try:
        return call()
    except StorydError as exc:
        return _error(exc.message)


def _resume(query: Query) -> CallToolResult:
    from storyd.api.resume import detail
    from storyd.core.envelope import render

    found = detail(query)
    return _ok(render(found.envelope), found.as_dict())  # type: ignore[arg-type]


def _units(setup: Setup, workspace: str, in_flight: bool) -> Units:
    from storyd.api.units import units

    return units([workspace], in_flight=in_flight, socket=setup.socket, config=setup.config)


def _status(setup: Setup, workspace: str) -> CallToolResult:
    found = _units(setup, workspace, True)
    body = {"units": found.units, "source": found.source, "unreadable": found.unreadable}
    return _ok(orjson.dumps(body) + b"\n", {**body, "exitCode": 0})


def _epic(setup: Setup, workspace: str, epic_id: str) -> CallToolResult:
    from storyd.api.epic import epic
    from storyd.core.ids import normalize_epic_id
    from storyd.core.jsonio import dumps

    view = epic(workspace, _checked(lambda: normalize_epic_id(epic_id)), socket=setup.socket).view
    return _ok(dumps(view) + b"\n", {**view, "exitCode": 0})


def _check(setup: Setup, workspace: str) -> CallToolResult:
    from storyd.api.check import Checked
    from storyd.api.render import check_text

    checked = Checked(_units(setup, workspace, False))
    structured = {
        "problems": checked.problems,
        "exitCode": checked.code,
        "findings": checked.findings(),
        "source": checked.found.source,
    }
    return _ok(check_text(checked), structured)


def build(setup: Setup) -> MCPServer[Any]:
    """The server with its tools and resources."""
    follower = Follower(setup)

    @asynccontextmanager
    async def lifespan(_: MCPServer[Any]) -> AsyncIterator[None]:
        follower.start(server, IN_FLIGHT)
        try:
            yield None
        finally:
            follower.stop()

    server: MCPServer[Any] = MCPServer(
        "storyd",
        version=__version__,
        instructions=(
            "storyd knows where each agent orchestrator's unit of work must resume: call "
            "`status` at the start of a session, `resume` before you continue a story or "
            "task, `check` before you stop, and `reconcile_preview` when the state file is "
            "behind git (then `reconcile_apply` to write what git proves)."
        ),
        lifespan=lifespan,
    )

    @server.tool(annotations=_READ_ONLY)
    def resume(
        workspace: str | None = None,
        epic_id: str | None = None,
        story_id: str | None = None,
        state_file: str | None = None,
        unit: str | None = None,
    ) -> CallToolResult:
        """Where one unit resumes: the seed skill's envelope (epic_id and story_id, or
        state_file and optionally unit), with its findings."""
        return _guarded(
            lambda: _resume(
                setup.resume_query(setup.workspace(workspace), epic_id, story_id, state_file, unit)
            )
        )

    @server.tool(annotations=_READ_ONLY)
    def status(workspace: str | None = None) -> CallToolResult:
        """Every unit in flight in the workspace: progress, resume point and findings."""
        return _guarded(lambda: _status(setup, setup.workspace(workspace)))

    @server.tool(annotations=_READ_ONLY)
    def epic(epic_id: str, workspace: str | None = None) -> CallToolResult:
        """One epic as its producer resumes it: stories reclassified, executable next,
        blocked and why."""
        return _guarded(lambda: _epic(setup, setup.workspace(workspace), epic_id))

    @server.tool(annotations=_READ_ONLY)
    def check(workspace: str | None = None) -> CallToolResult:
        """The warning and error findings of every unit (exitCode 1 when there are any)."""
        return _guarded(lambda: _check(setup, setup.workspace(workspace)))

    @server.tool(annotations=_READ_ONLY)
    def reconcile_preview(
        workspace: str | None = None,
        epic_id: str | None = None,
        story_id: str | None = None,
        state_file: str | None = None,
        unit: str | None = None,
        only: str | None = None,
    ) -> CallToolResult:
        """What `reconcile_apply` would write back from git: per state file a diff, the
        finding and the git evidence. Changes nothing."""
        return _guarded(
            lambda: _reconcile(setup, workspace, epic_id, story_id, state_file, unit, only, False)
        )

    @server.tool(annotations=_DESTRUCTIVE)
    def reconcile_apply(
        workspace: str | None = None,
        epic_id: str | None = None,
        story_id: str | None = None,
        state_file: str | None = None,
        unit: str | None = None,
        only: str | None = None,
    ) -> CallToolResult:
        """Write back what git proves into the state files (under the writers' lock,
        atomically; `storyd reconcile --undo` puts the bytes back)."""
        return _guarded(
            lambda: _reconcile(setup, workspace, epic_id, story_id, state_file, unit, only, True)
        )

    @server.resource(IN_FLIGHT, name="in-flight", mime_type="application/json")
    def in_flight() -> str:
        """The units in flight in the default workspace (storyd status --in-flight --json)."""
        return _resource_text(status())

    @server.resource(UNIT, name="unit", mime_type="application/json")
    def unit_resource(unit: str) -> str:
        """One unit of the default workspace by its id: the resume envelope."""
        try:
            workspace = setup.workspace(None)
        except UsageError as exc:
            return _resource_text(_error(exc.message))
        found = _units(setup, workspace, False).units
        match = next((u for u in found if u.get("unit") == unit), None)
        if match is None:
            return _resource_text(_error(f"unit {unit!r} not found in {workspace}"))
        return _resource_text(
            _guarded(
                lambda: _resume(
                    setup.resume_query(workspace, state_file=str(match["stateFile"]), unit=unit)
                )
            )
        )

    return server


def _resource_text(result: CallToolResult) -> str:
    from mcp.server.mcpserver.exceptions import ResourceError

    text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
    if result.is_error:
        raise ResourceError(text)
    return text


def _reconcile(
    setup: Setup,
    workspace: str | None,
    epic_id: str | None,
    story_id: str | None,
    state_file: str | None,
    unit: str | None,
    only: str | None,
    apply: bool,
) -> CallToolResult:
    from storyd.api.reconciling import folder, only_codes, reconcile, selection

    where = folder(setup.workspace(workspace))
    chosen = _checked(
        lambda: selection(
            where, epic_id=epic_id, story_id=story_id, state_file=state_file, unit=unit
        )
    )
    codes = _checked(lambda: only_codes(only))
    done = reconcile(where, chosen, only=codes, apply=apply, config=setup.config)
    body = done.as_dict()
    text = json.dumps(body, ensure_ascii=False, indent=2) + "\n"
    return _ok(text, {**body, "exitCode": done.code})


def serve(config: str | None, socket: str | None) -> None:
    """Run the server on stdin/stdout until the client closes it."""
    cwd = os.environ.get("CLAUDE_PROJECT_DIR") or os.getcwd()
    build(Setup(config, socket, cwd)).run("stdio")
