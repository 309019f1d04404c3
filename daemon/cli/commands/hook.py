"""`storyd hook EVENT`: Claude Code's hooks (docs/agents.md). Reads the hook's JSON on stdin.

    session-start   SessionStart: the units in flight here, as additionalContext
    stop            Stop, SubagentStop: block while a state file lags behind git
    post-tool-use   PostToolUse on Write|Edit|MultiEdit: exit 2 when a state file broke

Never blocks by accident: bad stdin, invalid JSON, a cwd that does not exist or lies
outside the allowed roots (`[hooks] roots`), a broken configuration or an internal error
all exit 0 with no output; only post-tool-use exits 2, and only for a broken state file.
"""

from __future__ import annotations

import os
import sys

from storyd.core.flags import VALUE, parse, text

__all__ = ["FLAGS", "SUBCOMMANDS", "main"]

USAGE = "usage: storyd hook session-start|stop|post-tool-use [--config FILE] [--socket PATH]"
FLAGS = {"config": VALUE, "socket": VALUE}
SUBCOMMANDS = {"session-start": FLAGS, "stop": FLAGS, "post-tool-use": FLAGS}


def _debug(message: str) -> None:
    if os.environ.get("STORYD_LOG_LEVEL", "").lower() == "debug":
        sys.stderr.write(f"debug: storyd hook: {message}\n")


def main(argv: list[str]) -> int:
    """Run one hook: 0 (with or without JSON on stdout), or 2 from post-tool-use."""
    from storyd.core.errors import UsageError

    event = argv[0] if argv and not argv[0].startswith("-") else None
    flags = parse(argv[1:] if event else argv, FLAGS, USAGE)
    if event not in SUBCOMMANDS:
        raise UsageError(f"expected one of {', '.join(SUBCOMMANDS)}\n{USAGE}")
    from storyd.agents import hookio

    payload = hookio.read_payload()
    if payload is None:
        _debug("no JSON object on stdin")
        return 0
    config, socket = text(flags, "config"), text(flags, "socket")
    try:
        if event == "post-tool-use":
            from storyd.agents.post_tool_use import problem

            line = problem(payload, config, socket)
            if line is None:
                return 0
            sys.stderr.write(line.replace("\n", " ") + "\n")
            return 2
        if event == "stop":
            from storyd.agents.stop import decide

            answer = decide(payload, config, socket)
        else:
            from storyd.agents.session_start import context

            answer = context(payload, config, socket)
    except Exception as exc:  # a hook never breaks the agent's session: say it at debug only
        _debug(f"{type(exc).__name__}: {exc}")
        return 0
    if answer is not None:
        sys.stdout.write(answer + "\n")
    return 0
