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

Resources: `storyd://in-flight` (the status JSON) and `storyd://unit/{unit}` (one unit's
resume answer), with `subscriptions/listen` events fed by the daemon's event stream.
Every tool takes an optional `workspace` (default: $CLAUDE_PROJECT_DIR, else the
server's cwd) which must lie inside the allowed roots (`[hooks] roots`).
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import orjson
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations

from storyd import __version__
from storyd.agents import hookio, source
from storyd.agents.mcp_events import Follower
from storyd.core.errors import StorydError, UsageError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from storyd.config import Config

__all__ = ["IN_FLIGHT", "build", "serve"]

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
        roots = hookio.allowed_roots(self.cfg())
        found = hookio.find_workspace(folder, roots)
        if found is None:
            if not os.path.isdir(folder):
                raise UsageError(f"workspace {folder}: not a folder")
            shown = ", ".join(roots)
            raise UsageError(
                f"workspace {folder}: outside the allowed roots ({shown}); "
                "add it to [hooks] roots or workspaces in the configuration"
            )
        return found

    def common(self) -> list[str]:
        flags = []
        if self.config:
            flags += ["--config", self.config]
        if self.socket:
            flags += ["--socket", self.socket]
        return flags


def _error(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


def _ok(text: bytes, structured: dict[str, Any]) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text.decode("utf-8", "replace"))],
        structured_content=structured,
        is_error=False,
    )


def _selection(
    epic_id: str | None, story_id: str | None, state_file: str | None, unit: str | None
) -> list[str]:
    argv: list[str] = []
    for flag, value in (
        ("--epic-id", epic_id), ("--story-id", story_id),
        ("--state-file", state_file), ("--unit", unit),
    ):  # fmt: skip
        if value:
            argv += [flag, value]
    return argv


def _cli(setup: Setup, argv: list[str], ok_codes: tuple[int, ...] = (0,)) -> CallToolResult:
    """Run a command in-process; its stdout is the text, parsed JSON the structure."""
    done = source.run_cli(argv)
    if done.code not in ok_codes:
        return _error(done.stderr.strip() or f"storyd {argv[0]} exited {done.code}")
    try:
        parsed = orjson.loads(done.stdout)
    except orjson.JSONDecodeError:
        parsed = None
    structured = parsed if isinstance(parsed, dict) else {}
    return _ok(done.stdout, {**structured, "exitCode": done.code})


def _guarded(call: Any) -> CallToolResult:
    try:
        result: CallToolResult = call()
    except StorydError as exc:
        return _error(exc.message)
    return result


def _resume(setup: Setup, workspace: str, selection: list[str]) -> CallToolResult:
    argv = [*selection, "--detail", "--workspace", workspace, *setup.common()]
    out = source.resume(argv, workspace)
    if out.code != 0:
        return _error("\n".join(out.stderr) or f"storyd resume exited {out.code}")
    from storyd.core.envelope import render

    detail = orjson.loads(out.stdout)
    structured = {**detail, "warnings": list(out.stderr)}
    return _ok(render(detail["envelope"]), structured)


def _check(setup: Setup, workspace: str) -> CallToolResult:
    from storyd.cli.commands.check import report

    found, origin = source.summaries(
        workspace, in_flight=False, socket=setup.socket, config=setup.config
    )
    text, problems = report(found)
    findings = [
        {"stateFile": u["stateFile"], "unit": u["unit"], **f}
        for u in found
        for f in u.get("findingList") or []  # type: ignore[attr-defined]
    ]
    structured = {
        "problems": problems,
        "exitCode": 1 if problems else 0,
        "findings": findings,
        "source": origin,
    }
    return _ok(text.encode(), structured)


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
                setup, setup.workspace(workspace), _selection(epic_id, story_id, state_file, unit)
            )
        )

    @server.tool(annotations=_READ_ONLY)
    def status(workspace: str | None = None) -> CallToolResult:
        """Every unit in flight in the workspace: progress, resume point and findings."""
        return _guarded(
            lambda: _cli(
                setup,
                ["status", "--in-flight", "--json", "--workspace", setup.workspace(workspace),
                 *setup.common()],
            )
        )  # fmt: skip

    @server.tool(annotations=_READ_ONLY)
    def epic(epic_id: str, workspace: str | None = None) -> CallToolResult:
        """One epic as its producer resumes it: stories reclassified, executable next,
        blocked and why."""
        return _guarded(
            lambda: _cli(
                setup,
                ["epic", "--epic-id", epic_id, "--json", "--workspace",
                 setup.workspace(workspace), *_only_socket(setup)],
            )
        )  # fmt: skip

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
        found, _ = source.summaries(
            workspace, in_flight=False, socket=setup.socket, config=setup.config
        )
        match = next((u for u in found if u.get("unit") == unit), None)
        if match is None:
            return _resource_text(_error(f"unit {unit!r} not found in {workspace}"))
        selection = ["--state-file", str(match["stateFile"]), "--unit", unit]
        return _resource_text(_resume(setup, workspace, selection))

    return server


def _only_socket(setup: Setup) -> list[str]:
    return ["--socket", setup.socket] if setup.socket else []


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
    argv = ["reconcile", "--json", "--workspace", setup.workspace(workspace)]
    argv += _selection(epic_id, story_id, state_file, unit)
    if only:
        argv += ["--only", only]
    if setup.config:
        argv += ["--config", setup.config]
    if apply:
        argv.append("--apply")
    return _cli(setup, argv, ok_codes=(0, 1))


def serve(config: str | None, socket: str | None) -> None:
    """Run the server on stdin/stdout until the client closes it."""
    cwd = os.environ.get("CLAUDE_PROJECT_DIR") or os.getcwd()
    build(Setup(config, socket, cwd)).run("stdio")
