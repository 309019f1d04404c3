"""THE hook: one call's answer, the same bytes whichever door runs it.

`storyd hook EVENT` (the command line) and the daemon's `hook` op (bin/storyd-hook's
fast path) both call `answer`; only `units` differs: the command asks the daemon's
`list` (else scans the workspace), the daemon reads its own cache. Besides its answer,
session-start leaves the session's owner in Claude Code's `$CLAUDE_ENV_FILE` (the
door's own variable, or the launcher's; storyd.api.hooks.owner_env), and session-end
releases the session's claims (storyd.api.hooks.session_end).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from storyd.config import Config

__all__ = ["EVENTS", "EXIT_2", "answer"]

EVENTS = ("session-start", "stop", "post-tool-use", "notification", "session-end")
# post-tool-use by exit 2 and stderr (shown to the model beside the tool's output): Claude
# Code's PostToolUse only. Codex puts exit 2's stderr in place of the tool's output and
# VS Code drops it; they, and Claude Code's PostToolUseFailure, get
# hookSpecificOutput.additionalContext with exit 0: the output stays, the warning is added.
EXIT_2 = ("claude",)


def _debug(message: str) -> None:
    if os.environ.get("STORYD_LOG_LEVEL", "").lower() == "debug":
        import sys

        sys.stderr.write(f"debug: storyd hook: {message}\n")


def answer(event: str, payload: dict[str, object], agent: str | None, cfg: Config,
           units: Callable[[str], list[dict[str, object]]],
           storyd: list[str],
           unreadable: Callable[[str], list[dict[str, object]]] | None = None,
           env_file: str | None = None, *,
           fleet: bool = False) -> tuple[str | None, int]:  # fmt: skip
    """(the JSON answer for stdout, or with exit code 2 the text for stderr; None: say
    nothing, the exit code). `units` gives a workspace's units in flight with their
    findings; `unreadable` (asked after `units`) the state files of that workspace that
    no longer parse (the `list` answer's entries); `storyd` is the argv a printed fix
    names (storyd.api.hooks.selfpath); `env_file` is Claude Code's $CLAUDE_ENV_FILE;
    `fleet` (the daemon's `hook` op only) renews and releases the session's fleet leases
    and judges a fleet unit's `claim-lost` by the bucket."""
    from storyd.api.hooks import hookio
    from storyd.api.hooks import payload as shapes

    hook = shapes.read(payload, agent)
    trust = hookio.Trust(cfg)
    if hook.folder is not None and os.environ.get("STORYD_LOG_LEVEL", "").lower() == "debug":
        _debug(f"{hook.agent} {event} in {hook.folder}: " +
               (hookio.explain(hook.folder, trust)[1] or "a workspace"))  # fmt: skip
    if event == "notification":
        from storyd.api.hooks.notification import record

        record(hook, payload, trust)  # recorded for `storyd top`; nothing to answer
        return None, 0
    if event == "session-end":
        from storyd.api.hooks.session_end import release

        release(hook, fleet=fleet)  # the session's claims given back; nothing to answer
        return None, 0
    if event == "post-tool-use":
        from storyd.api.hooks.post_tool_use import problems

        lines = problems(hook, trust, fleet=fleet)
        if not lines:
            return None, 0
        if hook.agent in EXIT_2 and hook.name != "PostToolUseFailure":
            return shapes.cap("\n".join(lines)), 2
        text = "\n".join(lines)
    elif event == "stop":
        from storyd.api.hooks.stop import lagging, reason

        found = lagging(hook, trust, cfg, units)
        if found is None:
            return None, 0
        text = reason(found[0], found[1], storyd)
    else:
        from storyd.api.hooks.session_start import context

        try:
            got = context(hook, trust, cfg, units, storyd, unreadable)
        finally:  # whatever the context: $STORYD_OWNER in the agent's Bash tool
            if env_file:
                from storyd.api.hooks.owner_env import export_owner

                export_owner(env_file, hook.session)
        if got is None:
            return None, 0
        text = got
    from storyd.core.jsonio import dumps  # compact, UTF-8 raw; not `json` (its re import)

    shaped = shapes.answer(hook.agent, event, text, hook.name)
    return dumps(shaped).decode("utf-8"), 0
