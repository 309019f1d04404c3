"""The MCP server's claims tools (issue 45): claim, release, claims and claim_next, each
the answer of daemon/api/claims_requests.py, the same JSON the socket's ops give.

An agent names itself with `owner` (its session id, say); without it the owner is
$STORYD_OWNER, else the user the server runs as. A refusal (another owner holds it) is
a tool error whose text names the holder and when its lease ends.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, TypedDict

from mcp.types import CallToolResult
from pydantic import Field

from storyd.agents.mcp_outputs import portable
from storyd.agents.mcp_params import EpicId, StateFile, StoryId, UnitId, Workspace, describe

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from storyd.agents.mcp_boundary import Server

__all__ = ["add_tools"]

Task = Annotated[str | None, Field(
    description="One task of the unit (default: the whole unit).")]
Owner = Annotated[str | None, Field(
    description="Who claims: the agent's session id or a name. Default: $STORYD_OWNER, "
    "else the user.")]
Ttl = Annotated[float | None, Field(
    description="The lease in seconds (default 900); claiming again renews it.")]


class Claimed(TypedDict):
    """A claim's answer: the claim (null when claim_next found every task held), or the
    list of claims, or whether a release found one."""

    ok: bool
    claim: dict[str, Any] | None
    claims: list[dict[str, Any]] | None
    released: bool | None
    task: str | None
    why: str | None


CLAIMED = portable(Claimed)
_KEYS = ("claim", "claims", "released", "task", "why")


def add_tools(server: Server, workspace: Callable[[str | None], str],
              guarded: Callable[[Callable[[], CallToolResult]], CallToolResult],
              ok: Callable[[str, dict[str, Any]], CallToolResult]) -> None:  # fmt: skip
    """Register the four tools on `server`; `workspace` resolves the argument."""
    from mcp.types import ToolAnnotations

    writes = ToolAnnotations(read_only_hint=False, destructive_hint=False,
                             idempotent_hint=True, open_world_hint=False)  # fmt: skip
    reads = ToolAnnotations(read_only_hint=True, destructive_hint=False,
                            open_world_hint=False)  # fmt: skip

    def run(action: str, ws: str | None, **fields: object) -> CallToolResult:
        def call() -> CallToolResult:
            from storyd.api.claims_requests import answer

            request = {k: v for k, v in fields.items() if v is not None}
            body = answer(action, {**request, "workspace": workspace(ws)})
            shaped = {"ok": True, **{k: body.get(k) for k in _KEYS}}
            return ok(json.dumps(body, ensure_ascii=False, indent=2) + "\n", shaped)

        return guarded(call)

    @server.tool(annotations=writes, description=describe("""
        Claim a unit (or one task of it) so no other agent works on it: a lease and a
        fencing token. Fails naming the holder when another owner holds it."""))
    def claim(workspace: Workspace = None, epic_id: EpicId = None, story_id: StoryId = None,
              state_file: StateFile = None, unit: UnitId = None, task: Task = None,
              owner: Owner = None,
              ttl: Ttl = None) -> Annotated[CallToolResult, CLAIMED]:  # fmt: skip
        return run("claim", workspace, epicId=epic_id, storyId=story_id,
                   stateFile=state_file, unit=unit, task=task, owner=owner, ttl=ttl)  # fmt: skip

    @server.tool(annotations=writes, description=describe("""
        Claim the task the unit's producer would take next among those nobody holds
        (atomically: two agents never get the same task)."""))
    def claim_next(workspace: Workspace = None, epic_id: EpicId = None,
                   story_id: StoryId = None, state_file: StateFile = None,
                   unit: UnitId = None, owner: Owner = None,
                   ttl: Ttl = None) -> Annotated[CallToolResult, CLAIMED]:  # fmt: skip
        return run("claim-next", workspace, epicId=epic_id, storyId=story_id,
                   stateFile=state_file, unit=unit, owner=owner, ttl=ttl)  # fmt: skip

    @server.tool(annotations=writes, description=describe("""
        Give back a claim when the work is done or left."""))
    def release(workspace: Workspace = None, epic_id: EpicId = None,
                story_id: StoryId = None, state_file: StateFile = None,
                unit: UnitId = None, task: Task = None,
                owner: Owner = None) -> Annotated[CallToolResult, CLAIMED]:  # fmt: skip
        return run("release", workspace, epicId=epic_id, storyId=story_id,
                   stateFile=state_file, unit=unit, task=task, owner=owner)  # fmt: skip

    @server.tool(annotations=reads, description=describe("""
        Who holds which unit or task in the workspace, and the abandoned leases (their
        owner stopped renewing them) with the last state seen."""))
    def claims(workspace: Workspace = None) -> Annotated[CallToolResult, CLAIMED]:
        return run("claims", workspace)
