"""Where the SDK's failures become `storyd mcp`'s answers: one line each, every value the
client sent capped, and the protocol's error codes.

    a tool's arguments do not fit its schema   a tool error: `argument epic_id: Input
                                               should be a valid string` (pydantic's
                                               words, without its URL or the value)
    an unknown tool, prompt or prompt argument -32602 invalid params (the MCP spec; the
                                               SDK answers an unknown prompt with 0)
    an unknown resource, or a unit not there   -32602 (SEP-2164), the message and the
                                               uri in its data capped
    anything the model reads back              at most LINE characters, each run of
                                               more than RUN without a space cut

`Server` is the SDK's `MCPServer` with these three entry points wrapped: the SDK has
no hook for its argument errors, and answers an unknown prompt with a ValueError (code
0 and a traceback on stderr).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import (
    ResourceError,
    ResourceNotFoundError,
    ToolError,
    UnexpectedResourceError,
    UnexpectedToolError,
)
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS
from pydantic import ValidationError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from mcp.server.lowlevel.helper_types import ReadResourceContents
    from mcp.server.mcpserver.context import Context
    from mcp_types import CallToolResult, GetPromptResult, InputRequiredResult
    from pydantic.networks import AnyUrl

__all__ = ["LINE", "RUN", "Server", "argument_error", "clip"]

RUN = 256
"""A run of characters without a space (an id, a path) is cut past this many."""
LINE = 1024
"""An error's text is cut past this many characters."""

_TAIL = 8
_LONG_RUN = re.compile(rf"\S{{{RUN + _TAIL + 40},}}")  # shorter runs are left whole


def clip(text: str) -> str:
    """`text` as one line, each long run of characters without a space cut to its first
    RUN and last few (saying how many were left out), at most LINE characters in all."""
    line = " ".join(part.strip() for part in text.splitlines() if part.strip())
    line = _LONG_RUN.sub(_cut, line)
    return line if len(line) <= LINE else line[: LINE - 1] + "…"


def _cut(run: re.Match[str]) -> str:
    """A long run's head and its last characters (a closing quote, a colon)."""
    text = run[0]
    left_out = len(text) - RUN - _TAIL
    return f"{text[:RUN]}…[{left_out} more characters]…{text[-_TAIL:]}"


def argument_error(exc: ValidationError) -> str:
    """pydantic's errors as one line naming each parameter: `argument epic_id: Input
    should be a valid string` (the first error of each; no input, no URL)."""
    said: dict[str, str] = {}
    for error in exc.errors(include_url=False, include_input=False, include_context=False):
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        said.setdefault(where, f"argument {where}: {error['msg']}")
    return clip("; ".join(said.values()) or "invalid arguments")


class Server(MCPServer[Any]):
    """The SDK's server, its tool calls, prompts and resource reads answered as above."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        if name not in {tool.name for tool in await self.list_tools()}:
            raise MCPError(code=INVALID_PARAMS, message=clip(f"unknown tool {name!r}"))
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(argument_error(exc.__cause__)) from None
            if isinstance(exc, UnexpectedToolError):
                raise
            raise ToolError(clip(str(exc))) from None

    async def get_prompt(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        context: Context[Any, Any] | None = None,
    ) -> GetPromptResult | InputRequiredResult:
        prompt = next((p for p in await self.list_prompts() if p.name == name), None)
        if prompt is None:
            raise MCPError(code=INVALID_PARAMS, message=clip(f"unknown prompt {name!r}"))
        known = {a.name for a in prompt.arguments or ()}
        unknown = sorted(set(arguments or ()) - known)
        if unknown:
            takes = ", ".join(sorted(known)) or "no arguments"
            raise MCPError(code=INVALID_PARAMS, message=clip(
                f"prompt {name!r}: unknown argument {unknown[0]!r} (it takes {takes})"))
        return await super().get_prompt(name, arguments, context)

    async def read_resource(
        self, uri: AnyUrl | str, context: Context[Any, Any] | None = None
    ) -> Iterable[ReadResourceContents] | InputRequiredResult:
        try:
            return await super().read_resource(uri, context)
        except UnexpectedResourceError:
            raise
        except ResourceError as exc:  # the SDK's answer, with the message and uri capped
            code = INVALID_PARAMS if isinstance(exc, ResourceNotFoundError) else INTERNAL_ERROR
            data = {"uri": clip(str(uri))}
            raise MCPError(code=code, message=clip(str(exc)), data=data) from None
