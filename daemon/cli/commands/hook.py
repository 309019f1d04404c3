"""`storyd hook EVENT`: every agent's hooks (docs/agents.md). Reads the hook's JSON on stdin.

    session-start   the units in flight here, as context; records where the session began
    stop            hold a stop once while the session left a state file behind git
    post-tool-use   after any tool: the state files that broke since the last check
    notification    the agent waits for the user: recorded for `storyd top`, no output
    session-end     the session ended: its claims are released (docs/claims.md), no output

Claude Code, Codex CLI, Cursor, VS Code Copilot and Gemini CLI are told apart by their
payload (or `--agent NAME`), and answered in their own shape. Never blocks by accident:
bad stdin, invalid JSON, a folder that does not exist or is not trusted (one you do not
own, or outside `[hooks] roots` when set), a broken configuration or an internal error
all exit 0 with no output (STORYD_LOG_LEVEL=debug says why on stderr); only Claude
Code's PostToolUse exits 2 (its stderr goes to the model beside the tool's output).
"""

from __future__ import annotations

import os
import sys

from storyd.core.flags import VALUE, parse, text

__all__ = ["FLAGS", "SUBCOMMANDS", "main"]

USAGE = (
    "usage: storyd hook session-start|stop|post-tool-use|notification|session-end "
    "[--agent NAME] [--config FILE] [--socket PATH]"
)
FLAGS = {"agent": VALUE, "config": VALUE, "socket": VALUE}
SUBCOMMANDS = {
    "session-start": FLAGS, "stop": FLAGS, "post-tool-use": FLAGS, "notification": FLAGS,
    "session-end": FLAGS,
}  # fmt: skip


def _debug(message: str) -> None:
    if os.environ.get("STORYD_LOG_LEVEL", "").lower() == "debug":
        sys.stderr.write(f"debug: storyd hook: {message}\n")


def _run(event: str, payload: dict[str, object], agent: str | None,
         config: str | None, socket: str | None) -> tuple[str | None, int]:  # fmt: skip
    """(the JSON answer or stderr text, the exit code): storyd.api.hooks.answer, with
    the units from the daemon's `list` (else a direct scan; for stop, with only the
    detectors that can raise a code it blocks on)."""
    from storyd.api.hooks import source
    from storyd.api.hooks.answer import answer
    from storyd.api.hooks.selfpath import storyd_argv

    cfg = source.load_config(config)
    wanted = None
    if event == "stop":
        from storyd.api.hooks.stop import codes

        wanted = codes(cfg)

    broken: dict[str, list[dict[str, object]]] = {}

    def units(workspace: str) -> list[dict[str, object]]:
        found = source.units(workspace, in_flight=True, socket=socket, config=config,
                             codes=wanted)  # fmt: skip
        broken[workspace] = found.unreadable
        return found.units

    def unreadable(workspace: str) -> list[dict[str, object]]:
        return broken.get(workspace, [])

    return answer(event, payload, agent, cfg, units, storyd_argv(), unreadable,
                  os.environ.get("CLAUDE_ENV_FILE"))  # fmt: skip


def main(argv: list[str]) -> int:
    """Run one hook: 0 (with or without JSON on stdout), or 2 from post-tool-use."""
    from storyd.core.errors import UsageError

    event = argv[0] if argv and not argv[0].startswith("-") else None
    flags = parse(argv[1:] if event else argv, FLAGS, USAGE)
    if event not in SUBCOMMANDS:
        raise UsageError(f"expected one of {', '.join(SUBCOMMANDS)}\n{USAGE}")
    agent = text(flags, "agent")
    from storyd.api.hooks import hookio
    from storyd.api.hooks.payload import AGENTS

    if agent is not None and agent not in AGENTS:
        raise UsageError(f"--agent {agent!r}: expected one of {', '.join(AGENTS)}\n{USAGE}")
    payload = hookio.read_payload()
    if payload is None:
        _debug("no JSON object on stdin")
        return 0
    try:
        out, code = _run(event, payload, agent, text(flags, "config"), text(flags, "socket"))
    except Exception as exc:  # a hook never breaks the agent's session: say it at debug only
        _debug(f"{type(exc).__name__}: {exc}")
        return 0
    if out is not None:
        (sys.stderr if code == 2 else sys.stdout).write(out + "\n")
    return code
