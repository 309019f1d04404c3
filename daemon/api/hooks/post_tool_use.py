"""`storyd hook post-tool-use`: the state files a tool call just broke, told back to the agent.

For Claude Code's and Codex's PostToolUse, VS Code's PostToolUse, Cursor's afterFileEdit
and afterShellExecution, Gemini's AfterTool, after any tool (a Write, an Edit, or a Bash
pipeline such as `jq ... > tmp && mv tmp state.json`). It names every state file of the
workspace that, since the session's last check (storyd.api.sessions), stopped parsing,
has a unit that no longer parses or a new error (a torn execution.json), lost units, or
fell back to its `.bak`; a file the tool named is checked even without a session record
(its units compared with the version committed at HEAD). Nothing changed, another file,
a writer holding the lock, bad input: silent. Reading a workspace whose state files did
not change costs a walk of its format roots and a few stats.

Claims (daemon/api/claims.py), only when a claims database exists: the session's leases
are renewed, and a state file the tool wrote where another owner holds the current
grant (and the session holds none there) is a `claim-lost` line, with both tokens.
The daemon answering the hook (`fleet`: a process that may reach the NATS server) does
the same for the session's fleet leases and a fleet unit's grant; this path alone never
imports `nats` (tests/test_hook_imports.py), and says nothing of the fleet.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.api.hooks.hookio import Trust
    from storyd.api.hooks.payload import Hook

__all__ = ["problems"]

_LOCK_TIMEOUT = 1.0  # a writer holding the lock longer than this: say nothing


def _named(workspace: str, relpath: str) -> str | None:
    """What is wrong with a state file the tool named, from the file alone (and HEAD)."""
    from storyd.api.hooks import source
    from storyd.core.errors import DataError, StorydError

    try:
        units = source.state_file_units(workspace, relpath, _LOCK_TIMEOUT)
    except DataError as exc:
        return f"no longer parses: {exc.message}"
    except StorydError:
        return None  # gone, or a writer holds the lock: nothing to say with certainty
    broken = [u for u in units if u.error]
    if broken:
        return f"unit {broken[0].key} no longer parses: {broken[0].error}"
    if not units:
        known = source.committed_units(workspace, relpath)
        if known:
            return f"holds no units any more ({known} at HEAD): the edit removed them; restore them"
    return None


def problems(hook: Hook, trust: Trust, *, fleet: bool = False) -> list[str]:
    """One line per state file that got worse (empty: say nothing); `fleet`: the daemon
    answers (the session's fleet leases and grants too)."""
    from storyd.api import sessions
    from storyd.api.hooks import hookio

    lines: dict[str, str] = {}
    workspace = hookio.find_workspace(hook.folder, trust)
    located: list[tuple[str, str]] = []
    for path in hook.paths:
        found = hookio.locate_state_file(path, trust)
        if found is None:
            continue
        located.append(found)
        workspace = workspace or found[0]
        if found[0] == workspace and (what := _named(*found)) is not None:
            lines.setdefault(found[1], f"storyd: {found[1]} {what}")
    if workspace is None or hook.session is None:
        return list(lines.values())
    record = sessions.load(hook.session)
    fresh = record is None or record.get("workspace") != workspace
    if record is None or fresh:
        record = sessions.begin(hook.session, workspace, checked=False, agent=hook.agent)
    before = record["files"]
    named = set(lines)
    for change in sessions.changes(record):
        if change.relpath not in named:
            lines[f"{change.relpath}\0{change.what}"] = f"storyd: {change.relpath} {change.what}"
    on = sessions.touched(before, record["files"], [rel for ws, rel in located if ws == workspace])
    moved = sessions.mark(record, "post-tool-use", on=[on, None] if on else None)
    sessions.keep(record, fresh or moved or record["files"] != before)  # else only touched
    written = [r for w, r in located if w == workspace]
    lines.update(_claims(hook.session, workspace, written, fleet))
    return list(lines.values())


def _fleet_configured() -> bool:
    """Whether fleet claims may exist (the daemon's answer only: reads config.toml)."""
    from storyd.api.claims_fleet import configured

    return configured()


def _claims(session: str, workspace: str, written: list[str], fleet: bool) -> dict[str, str]:
    """Renew the session's leases; `claim-lost` for a file it wrote under another's grant."""
    from storyd.api.claims_path import ever_claimed

    if not ever_claimed() and not (fleet and _fleet_configured()):
        return {}  # nothing was ever claimed here, no fleet: no sqlite3 import
    from storyd.api import claims
    from storyd.core.errors import StorydError

    owner = claims.default_owner(session)
    found: dict[str, str] = {}
    try:
        claims.renew_owner(owner, fleet=fleet)
        for relpath in written:
            lost = claims.record_lost(claims.Place(workspace, relpath), owner, fleet=fleet)
            if lost is not None:
                found[f"{relpath}\0claim-lost"] = f"storyd: claim-lost: {lost['message']}"
    except StorydError:
        pass  # a locked or unreadable claims database, an unreachable server: say nothing
    return found
