"""`storyd mcp`: storyd as an MCP server over stdio, built on the official `mcp` SDK (2.x,
`mcp.server.mcpserver.MCPServer`, the SDK's FastMCP renamed).

Tools (each answer's text is the exact bytes the matching CLI command prints; the
structured part adds the findings, and its shape is the tool's `outputSchema`,
storyd.agents.mcp_outputs):

    resume             storyd resume [--epic-id E --story-id S | --state-file F --unit U]
    status             storyd status --in-flight --json
    epic               storyd epic --epic-id E --json
    check              storyd check (text), with every unit's findings
    reconcile_preview  storyd reconcile --json
    reconcile_apply    storyd reconcile --apply --json (annotated destructive)

Each tool builds a typed request from its arguments and calls storyd.api, the functions
the command line calls too: an argument is always a value (a story id "--help" is an
invalid id, a tool error naming `story_id`), never a flag.

Every parameter is described in the tool's schema (storyd.agents.mcp_params), `only` as
an enum of repair classes; an empty `only` is refused, as `--only ''` is. Resources:
`storyd://in-flight` (the status JSON) and one `storyd://unit/<id>` per unit in flight
(`storyd resume --detail`'s object: the envelope with its findings;
storyd.agents.mcp_units). ResourceUpdated and list-changed events come from the
daemon's event stream and from each `status`, and reach clients of every protocol
version (storyd.agents.mcp_events). Errors are one line with every value capped, and
unknown names get -32602 (storyd.agents.mcp_boundary). Prompt: `where-do-i-resume`.
Every tool takes an optional `workspace` (default: $CLAUDE_PROJECT_DIR, else the
server's cwd): the server's project folder, a configured workspace, or a folder the
user owns (inside `[hooks] roots` when that is set).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import orjson
from mcp.server.lowlevel.server import NotificationOptions
from mcp.types import CallToolResult, TextContent, ToolAnnotations

from storyd import __version__
from storyd.agents.mcp_boundary import Server, clip
from storyd.agents.mcp_events import Announcer, Follower
from storyd.agents.mcp_outputs import CHECK, EPIC, RECONCILE, RESUME, STATUS
from storyd.agents.mcp_params import (
    EpicId,
    EpicIdRequired,
    Only,
    StateFile,
    StoryId,
    UnitId,
    Workspace,
    describe,
)
from storyd.agents.mcp_units import Catalogue
from storyd.api.hooks import hookio, source
from storyd.core.errors import StorydError, UsageError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from mcp.server.mcpserver import MCPServer

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
        """A `--detail` resume query from a tool's arguments, checked by the rules of
        `storyd resume` and the socket's `resume` (core/query.py's `from_request`): the
        arguments are fields of a typed request, never argv, so every value stays a value."""
        from storyd.core.query import from_request

        def build() -> Query:
            if state_file is None:
                for name, value in (("story_id", story_id), ("epic_id", epic_id)):
                    if value is None:
                        raise UsageError(f"missing {name} (or give state_file)")
                if unit is not None:
                    raise UsageError("unit goes with state_file")
            elif epic_id is not None or story_id is not None:
                raise UsageError("state_file replaces epic_id and story_id")
            given = {"epic": epic_id, "story": story_id, "stateFile": state_file, "unit": unit}
            query = from_request({k: v for k, v in given.items() if v is not None}, workspace)
            query.config, query.socket = self.config, self.socket
            return query

        return _checked(build)


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
    return CallToolResult(content=[TextContent(type="text", text=clip(message))], is_error=True)


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
    from storyd.api.claimview import attach

    found = _units(setup, workspace, True)
    attach(found.units)  # each unit's claim, as `storyd status --json` gives it
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


def _read_unit(setup: Setup, unit: str) -> str:
    """One unit by its id in the default workspace: `storyd resume --detail`'s object
    (the envelope, its findings, the next task), as the `resume` tool's structured
    content; the SDK's not-found error (-32602) for a unit the workspace does not hold."""
    from mcp.server.mcpserver.exceptions import ResourceNotFoundError

    try:
        workspace = setup.workspace(None)
    except UsageError as exc:
        return _resource_text(_error(exc.message))
    found = _units(setup, workspace, False).units
    match = next((u for u in found if u.get("unit") == unit), None)
    if match is None:
        raise ResourceNotFoundError(f"unit {unit!r} not found in {workspace}")
    query = setup.resume_query(workspace, state_file=str(match["stateFile"]), unit=unit)
    result = _guarded(lambda: _resume(query))
    if result.is_error:
        return _resource_text(result)
    return orjson.dumps(result.structured_content).decode()


def _prompt_text(setup: Setup, workspace: str | None) -> str:
    """The units in flight and the state files that do not parse, as the session-start
    context shows them (one renderer: storyd.api.hooks.session_start.render)."""
    from storyd.api.hooks.payload import CONTEXT_LIMIT
    from storyd.api.hooks.session_start import render

    where = setup.workspace(workspace)
    found = _units(setup, where, True)
    text = render(where, found.units, CONTEXT_LIMIT, unreadable=found.unreadable)
    if text is None:
        return f"storyd: no unit is in flight in {where}; there is nothing to resume."
    return "\n\n".join((text, "For the unit you continue, call the `resume` tool for its "
                         "exact resume point and findings before you start, and `check` "
                         "before you stop."))


def build(setup: Setup) -> Server:
    """The server with its tools, resources and prompt."""

    @asynccontextmanager
    async def lifespan(_: MCPServer[Any]) -> AsyncIterator[None]:
        announcer.start()
        follower.start(IN_FLIGHT, on_change=sync_units)
        sync_units()
        try:
            yield None
        finally:
            follower.stop()

    server = Server(
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
    announcer = Announcer(server._subscriptions)  # the SDK's bus: its default, in-process
    server.middleware.append(announcer.remember)
    follower = Follower(setup, announcer)
    catalogue = Catalogue(server, lambda unit: _read_unit(setup, unit))

    def sync_units(units: list[dict[str, object]] | None = None) -> bool:
        """Keep one resource per unit in flight; True when the list changed."""
        if units is None:
            try:
                units = _units(setup, setup.workspace(None), True).units
            except StorydError:
                units = []
        return catalogue.sync(units)

    def resync(units: list[dict[str, object]]) -> None:
        """Bring the unit resources up to date on a tool's worker thread; a change is
        announced to the client."""
        if sync_units(units):
            announcer.from_thread(announcer.list_changed)

    @server.tool(annotations=_READ_ONLY, description=describe("""
        Where one unit resumes: the seed skill's envelope (give epic_id and story_id, or
        state_file and, when the file holds several units, unit), with its findings."""))
    def resume(
        workspace: Workspace = None,
        epic_id: EpicId = None,
        story_id: StoryId = None,
        state_file: StateFile = None,
        unit: UnitId = None,
    ) -> Annotated[CallToolResult, RESUME]:
        return _guarded(
            lambda: _resume(
                setup.resume_query(setup.workspace(workspace), epic_id, story_id, state_file, unit)
            )
        )

    @server.tool(annotations=_READ_ONLY, description=describe("""
        Every unit in flight in the workspace: progress, resume point and findings."""))
    def status(workspace: Workspace = None) -> Annotated[CallToolResult, STATUS]:
        def run() -> CallToolResult:
            where = setup.workspace(workspace)
            result = _status(setup, where)
            if where == setup.workspace(None):
                resync(list(result.structured_content["units"]))
            return result

        return _guarded(run)

    @server.tool(annotations=_READ_ONLY, description=describe("""
        One epic as its producer resumes it: stories reclassified, the ones executable
        next, the blocked ones and why."""))
    def epic(epic_id: EpicIdRequired, workspace: Workspace = None
             ) -> Annotated[CallToolResult, EPIC]:  # fmt: skip
        return _guarded(lambda: _epic(setup, setup.workspace(workspace), epic_id))

    @server.tool(annotations=_READ_ONLY, description=describe("""
        The warning and error findings of every unit (exitCode 1 when there are any)."""))
    def check(workspace: Workspace = None) -> Annotated[CallToolResult, CHECK]:
        return _guarded(lambda: _check(setup, setup.workspace(workspace)))

    @server.tool(annotations=_READ_ONLY, description=describe("""
        What reconcile_apply would write back from git: per state file a diff, the
        finding and the git evidence. Changes nothing."""))
    def reconcile_preview(
        workspace: Workspace = None,
        epic_id: EpicId = None,
        story_id: StoryId = None,
        state_file: StateFile = None,
        unit: UnitId = None,
        only: Only = None,
    ) -> Annotated[CallToolResult, RECONCILE]:
        return _guarded(
            lambda: _reconcile(setup, workspace, epic_id, story_id, state_file, unit, only, False)
        )

    @server.tool(annotations=_DESTRUCTIVE, description=describe("""
        Write back what git proves into the state files, under the writers' lock and
        atomically; `storyd reconcile --undo` puts the bytes back."""))
    def reconcile_apply(
        workspace: Workspace = None,
        epic_id: EpicId = None,
        story_id: StoryId = None,
        state_file: StateFile = None,
        unit: UnitId = None,
        only: Only = None,
    ) -> Annotated[CallToolResult, RECONCILE]:
        return _guarded(
            lambda: _reconcile(setup, workspace, epic_id, story_id, state_file, unit, only, True)
        )

    @server.resource(IN_FLIGHT, name="in-flight", mime_type="application/json",
                     description="The units in flight in the project folder (storyd status "
                     "--in-flight --json).")  # fmt: skip
    def in_flight() -> str:
        return _resource_text(status())

    @server.resource(UNIT, name="unit", mime_type="application/json",
                     description="One unit of the project folder by its id: where it "
                     "resumes, with its findings and the next task (storyd resume "
                     "--detail's object).")  # fmt: skip
    def unit_resource(unit: str) -> str:
        return _read_unit(setup, unit)

    @server.prompt(name="where-do-i-resume", title="Where do I resume?",
                   description="The units in flight in the workspace, each with its resume "
                   "point, progress and the warnings to settle first.")  # fmt: skip
    def where_do_i_resume(workspace: Workspace = None) -> str:
        try:
            return _prompt_text(setup, workspace)
        except StorydError as exc:
            return f"storyd: {exc.message}"

    from storyd.agents.mcp_claims import add_tools  # issue 45: claim, release, claims, ...

    add_tools(server, setup.workspace, _guarded, _ok)
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
    only: list[str] | None,
    apply: bool,
) -> CallToolResult:
    from storyd.api.reconciling import folder, only_codes, reconcile, selection

    where = folder(setup.workspace(workspace))
    chosen = _checked(
        lambda: selection(
            where, epic_id=epic_id, story_id=story_id, state_file=state_file, unit=unit
        )
    )
    # an empty list is `--only ''`, refused in the command line's words
    codes = _checked(lambda: only_codes(None if only is None else ",".join(only)))
    done = reconcile(where, chosen, only=codes, apply=apply, config=setup.config)
    body = done.as_dict()
    text = json.dumps(body, ensure_ascii=False, indent=2) + "\n"
    return _ok(text, {**body, "exitCode": done.code})


def serve(config: str | None, socket: str | None) -> None:
    """Run the server on stdin/stdout until the client closes it."""
    import anyio

    cwd = os.environ.get("CLAUDE_PROJECT_DIR") or os.getcwd()
    anyio.run(run_stdio, build(Setup(config, socket, cwd)))


async def run_stdio(server: Server) -> None:
    """`server` on stdin/stdout, telling handshake-era clients that the resource list
    changes (`listChanged`; MCPServer.run would say it does not)."""
    from mcp.server.stdio import stdio_server

    lowlevel = server._lowlevel_server  # MCPServer.run_stdio_async, with the options
    options = lowlevel.create_initialization_options(NotificationOptions(resources_changed=True))
    async with stdio_server() as (read, write):
        await lowlevel.run(read, write, options)
