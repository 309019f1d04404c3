"""`storyd mcp`: the MCP server over stdio (docs/agents.md), for Claude Code and any MCP
client. It needs the optional extra: `pip install 'storyd[mcp]'`.

Exit codes: 0 the client closed the session, 64 bad flags, 69 the `mcp` extra is missing.
"""

from __future__ import annotations

from storyd.core.errors import StorydError
from storyd.core.flags import VALUE, parse, text

__all__ = ["FLAGS", "main"]

USAGE = "usage: storyd mcp [--config FILE] [--socket PATH]"
FLAGS = {"config": VALUE, "socket": VALUE}


class ExtraMissing(StorydError):
    """The optional `mcp` package is not installed (sysexits EX_UNAVAILABLE)."""

    code = 69
    name = "EX_UNAVAILABLE"


def main(argv: list[str]) -> int:
    """Serve MCP on stdin/stdout."""
    flags = parse(argv, FLAGS, USAGE)
    try:
        import mcp  # noqa: F401
    except ImportError:
        msg = "the MCP server needs the mcp extra: pip install 'storyd[mcp]'"
        raise ExtraMissing(msg) from None
    from storyd.agents.mcp_server import serve

    serve(text(flags, "config"), text(flags, "socket"))
    return 0
