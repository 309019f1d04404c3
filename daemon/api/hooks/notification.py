"""`storyd hook notification`: the agent waits for the user; recorded, never answered.

For Claude Code's Notification (https://code.claude.com/docs/en/hooks#notification:
`notification_type` `permission_prompt`, `idle_prompt`, `elicitation_dialog`,
`auth_success`, and a `message` such as "Claude needs your permission to use Bash") and
Gemini CLI's (https://geminicli.com/docs/hooks/reference: `notification_type`
`ToolPermission`, `message`). The session's record (storyd.api.sessions) then says
`waiting`, with the message, which `storyd top` shows. `auth_success` (and any other
type that asks nothing of the user) only touches the record. Also for Codex's
PermissionRequest (https://developers.openai.com/codex/hooks: `tool_name`, `tool_input`,
no message; run before Codex asks for an approval), noted as the tool it asks about.
Prints nothing, exit 0: a Notification hook's output is not for the model, and a
PermissionRequest hook that prints nothing leaves Codex's approval flow as it was.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.api.hooks.hookio import Trust
    from storyd.api.hooks.payload import Hook

__all__ = ["WAITING", "record"]

# the notification types that mean the agent waits for the user; a payload without a
# type (Claude Code before `notification_type`) sent only these
WAITING = frozenset(("permission_prompt", "idle_prompt", "elicitation_dialog", "ToolPermission"))


def record(hook: Hook, payload: dict[str, object], trust: Trust) -> None:
    """Note the notification in the session's record (made when there is none)."""
    from storyd.api import sessions
    from storyd.api.hooks import hookio

    if hook.session is None:
        return
    kind = payload.get("notification_type")
    message = payload.get("message")
    note = message if isinstance(message, str) and message else None
    if isinstance(kind, str) and kind not in WAITING:
        sessions.touch(hook.session)  # asks nothing of the user (auth_success)
        return
    saved = sessions.load(hook.session)
    fresh = saved is None
    if saved is None:
        workspace = hookio.find_workspace(hook.folder, trust)
        if workspace is None:
            return
        saved = sessions.begin(hook.session, workspace, checked=False, agent=hook.agent)
    tool = payload.get("tool_name")
    asks = f"permission to use {tool}" if isinstance(tool, str) and tool else None
    note = note or (kind if isinstance(kind, str) else None) or asks
    sessions.keep(saved, sessions.mark(saved, "notification", note=note) or fresh)
