"""`storyd hook session-start`: the units in flight in the session's workspace, as context.

For every agent's session start (Claude Code's and Codex's SessionStart, sources
`startup`, `resume`, `clear`, `compact`; VS Code's `new`; Cursor's sessionStart; Gemini's
SessionStart), answered in the agent's shape (storyd.api.hooks.payload). It also records
where the session began (storyd.api.sessions), so that stop blocks only for lag the
session made. The context is a few lines per unit (id, resume point, progress, the
warnings and errors, the finished stories not to run again) within a budget of
characters, with "and N more"; then one `UNREADABLE` line per state file that no longer
parses (the last good units of such a file are not listed as in flight: nothing is
built on them). Nothing in flight and nothing unreadable: no output.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from storyd.api.hooks.hookio import Trust
    from storyd.api.hooks.payload import Hook
    from storyd.config import Config

__all__ = ["context", "render"]

_MESSAGE_CHARS = 240  # one finding's message is cut here
_NOTED = frozenset(("story-finished",))  # info findings a model must know (do not re-run)


def _finding_line(finding: dict[str, object]) -> str | None:
    severity = str(finding.get("severity"))
    if severity == "info" and finding.get("code") not in _NOTED:
        return None
    task = f" {finding['task']}" if finding.get("task") else ""
    message = str(finding.get("message", ""))
    if len(message) > _MESSAGE_CHARS:
        message = message[: _MESSAGE_CHARS - 3] + "..."
    return f"    {severity} {finding.get('detector')}/{finding.get('code')}{task}: {message}"


def _unit_block(unit: dict[str, object]) -> str:
    done, total = unit.get("done"), unit.get("total")
    point = unit.get("resumePoint") or "unreadable"
    head = (
        f"- {unit.get('format')} {unit.get('unit')} ({unit.get('stateFile')}): "
        f"resume at {point}, {done}/{total} done"
    )
    lines = [head]
    if unit.get("error"):
        lines.append(f"    error: {unit['error']}")
    for finding in unit.get("findingList") or []:  # type: ignore[attr-defined]
        if isinstance(finding, dict) and (line := _finding_line(finding)) is not None:
            lines.append(line)
    return "\n".join(lines)


_UNREADABLE_SHOWN = 10  # state files that no longer parse, listed before "and N more"


def _unreadable_lines(unreadable: list[dict[str, object]]) -> list[str]:
    from storyd.api.render import unreadable_line

    lines = [unreadable_line(e) for e in unreadable[:_UNREADABLE_SHOWN]]
    if len(unreadable) > _UNREADABLE_SHOWN:
        lines.append(f"and {len(unreadable) - _UNREADABLE_SHOWN} more unreadable state files")
    return lines


def render(workspace: str, units: list[dict[str, object]], budget: int,
           storyd: list[str] | None = None,
           unreadable: list[dict[str, object]] | None = None) -> str | None:  # fmt: skip
    """The context text for these units and the state files that no longer parse, at
    most `budget` characters; None when there is neither."""
    units = [u for u in units if not u.get("stale")]  # last good units: nothing built on them
    broken = _unreadable_lines(unreadable or [])
    if not units and not broken:
        return None
    head = (
        f"storyd: {len(units)} unit(s) in flight in {workspace}. Resume each from its resume "
        "point; do not redo completed tasks; settle warnings before you build on them."
    )
    if broken:
        head += (f" {len(unreadable or [])} state file(s) no longer parse: fix them before "
                 "you trust their units.")
    budget -= sum(len(line) + 1 for line in broken)
    from storyd.core.words import shell_join  # shlex.join without shlex's `re`

    listing = [*(storyd or ["storyd"]), "status", "--in-flight", "--workspace", workspace]
    tail = f"(full list: {shell_join(listing)})"
    parts = [head]
    used = len(head) + 1
    shown = 0
    for unit in units:
        block = _unit_block(unit)
        left = len(units) - shown - 1
        reserve = len(f"and {left} more ") + len(tail) + 1 if left else 0
        if used + len(block) + 1 + reserve > budget:
            break
        parts.append(block)
        used += len(block) + 1
        shown += 1
    if shown < len(units):
        parts.append(f"and {len(units) - shown} more {tail}")
    text = "\n".join(parts)
    text = text if len(text) <= budget else text[: max(budget, 3) - 3] + "..."
    return "\n".join((text, *broken)) if broken else text


def _remember(session: str | None, workspace: str, agent: str,
              units: list[dict[str, object]]) -> None:  # fmt: skip
    """Record where the session began, once per session and workspace, and that it is
    working (on the one unit in flight, when there is one)."""
    from storyd.api import sessions

    if session is None:
        return
    record = sessions.load(session)
    fresh = record is None or record.get("workspace") != workspace
    if record is None or fresh:
        record = sessions.begin(session, workspace, agent=agent)
    one = units[0] if len(units) == 1 else None
    on = [one.get("stateFile"), one.get("unit")] if one is not None else None
    sessions.keep(record, sessions.mark(record, "session-start", on=on) or fresh)


def context(hook: Hook, trust: Trust, cfg: Config,
            units: Callable[[str], list[dict[str, object]]],
            storyd: list[str],
            unreadable: Callable[[str], list[dict[str, object]]] | None = None,
            ) -> str | None:  # fmt: skip
    """The context text for this session, or None for no output."""
    from storyd.api.hooks import hookio

    workspace = hookio.find_workspace(hook.folder, trust)
    if workspace is None:
        return None
    found = units(workspace)
    broken = unreadable(workspace) if unreadable is not None else []
    _remember(hook.session, workspace, hook.agent, [u for u in found if not u.get("stale")])
    text = render(workspace, found, cfg.hooks.context_chars, storyd, broken)
    from storyd.api.claims_context import with_claims  # what it and the others hold
    from storyd.api.claude_ties import session_start as claude_list  # issue 44: its task list

    line = claude_list(hook, workspace)
    text = text if line is None else line if text is None else f"{text}\n{line}"
    return with_claims(text, workspace, hook.session)
