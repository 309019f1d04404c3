"""The MCP tools' parameters: each one described for the model, closed sets as enums.

Descriptions reach the client in each tool's JSON Schema (MCP's `tools/list`,
https://modelcontextprotocol.io/specification/2025-06-18/server/tools), so a model knows
what to pass without reading storyd's documentation.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

__all__ = ["EpicId", "Only", "StateFile", "StoryId", "UnitId", "Workspace", "describe"]


def _repair_codes() -> tuple[str, ...]:
    from storyd.api.reconcile.repairs import repair_codes

    return tuple(repair_codes())


RepairCode = Literal[_repair_codes()]  # type: ignore[valid-type]

Workspace = Annotated[str | None, Field(
    description="The workspace folder: absolute, or relative to the server's project "
    "folder. Default: the project folder the server was started in.")]
EpicId = Annotated[str | None, Field(
    description="The epic's id as its producer writes it (e.g. '0049' or '49'); "
    "goes with story_id.")]
EpicIdRequired = Annotated[str, Field(
    description="The epic's id as its producer writes it (e.g. '0049' or '49').")]
StoryId = Annotated[str | None, Field(
    description="The story's id (e.g. 'story-0049-0013'); goes with epic_id.")]
StateFile = Annotated[str | None, Field(
    description="A state file, relative to the workspace (e.g. "
    "'.claude/plans/issue-42/execution-state.json'), instead of epic_id and story_id.")]
UnitId = Annotated[str | None, Field(
    description="The unit's id inside state_file, when the file holds more than one unit.")]
Only = Annotated[list[RepairCode] | None, Field(  # type: ignore[valid-type]
    description="Only these repair classes (the finding codes reconcile repairs). "
    "Default: every class.")]


def describe(text: str) -> str:
    """A docstring as one clean paragraph (no source indentation in the description)."""
    return " ".join(text.split())
