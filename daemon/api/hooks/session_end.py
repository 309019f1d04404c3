"""`storyd hook session-end`: a session that ended gives back what it claimed.

For Claude Code's SessionEnd (any reason: `clear`, `logout`, `prompt_input_exit`,
`other`), Cursor's sessionEnd and Gemini CLI's SessionEnd; Codex and VS Code have no
such event, and their sessions' leases end unrenewed (docs/claims.md). Every claim the
owner `session:<id>` holds, in every workspace, is released, each logged `released`
("session ended"). Nothing is printed (no agent reads an answer there); no session id,
no claims database (nothing imported beyond the check) or a locked one: nothing done.
The daemon answering the hook (`fleet`) releases the session's fleet claims too; this
path alone never reaches the NATS server (their leases then end unrenewed).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.api.hooks.payload import Hook

__all__ = ["release"]


def release(hook: Hook, *, fleet: bool = False) -> int:
    """Release every claim of the hook's session (`fleet`: its fleet claims too); how
    many were released."""
    from storyd.api.claims_path import ever_claimed

    if hook.session is None or not (fleet or ever_claimed()):
        return 0
    from storyd.api import claims
    from storyd.core.errors import StorydError

    try:
        return len(claims.release_owner(claims.default_owner(hook.session), fleet=fleet))
    except StorydError:
        return 0  # a locked or unreadable claims database: the leases end on their own
