"""Shared by the MCP server's tests: `storyd mcp` started by the MCP SDK's own stdio
client (`stdio_client` and `ClientSession`, the handshake at protocol 2025-11-25), the
matching CLI command, and a tool result's one text.

    session()   start `storyd mcp`, initialize, run the test's work, close; fails the
                test on a traceback in the server's stderr
    cli()       `storyd ARGS...` as the tools' answers are compared with
    text_of()   the one text block of a tool result
"""

from __future__ import annotations

import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
from cli_harness import STORYD
from mcp import ClientSession, StdioServerParameters, stdio_client

__all__ = ["ISSUE_STATE", "TOOLS", "WRITING", "cli", "session", "text_of"]

T = TypeVar("T")
TOOLS = {"resume", "status", "epic", "check", "reconcile_preview", "reconcile_apply",
         "claim", "claim_next", "release", "claims"}  # the last four: issue 45
WRITING = {"reconcile_apply", "claim", "claim_next", "release"}  # not read-only
ISSUE_STATE = ".claude/plans/issue-42-geofencing/execution-state.json"


def session(env: dict[str, str], cwd: Path, errlog: Path,
            work: Callable[[ClientSession], Awaitable[T]],
            heard: Callable[[Any], Awaitable[None]] | None = None) -> T:
    """Start `storyd mcp` in `cwd`, initialize, run `work`, close; its stderr to `errlog`.
    `heard` gets every message the server sends unasked (its notifications)."""

    async def main() -> T:
        params = StdioServerParameters(command=STORYD, args=["mcp"], env=env, cwd=str(cwd))
        with errlog.open("a") as err:
            async with (stdio_client(params, errlog=err) as (read, write),
                        ClientSession(read, write, message_handler=heard) as client):
                await client.initialize()
                return await work(client)

    result = anyio.run(main)
    assert "Traceback" not in errlog.read_text(), errlog.read_text()
    return result


def cli(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([STORYD, *args], cwd=cwd, env=env, capture_output=True, timeout=60,
                          check=False)


def text_of(result: Any) -> str:
    assert len(result.content) == 1
    return str(result.content[0].text)
