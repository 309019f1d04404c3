"""`storyd hook session-start`: the units in flight in the session's workspace, as context.

For Claude Code's SessionStart hook (sources `startup`, `resume`, `clear`, `compact`): the
answer is `{"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext":
...}}`, a few lines per unit (id, resume point, progress, the warnings and errors, the
finished stories not to run again) within a budget of characters, with "and N more".
Nothing in flight, or anything unreadable: no output.
"""

from __future__ import annotations

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


def render(workspace: str, units: list[dict[str, object]], budget: int) -> str | None:
    """The context text for these units, at most `budget` characters; None when empty."""
    if not units:
        return None
    head = (
        f"storyd: {len(units)} unit(s) in flight in {workspace}. Resume each from its resume "
        "point; do not redo completed tasks; settle warnings before you build on them."
    )
    tail = f"(full list: storyd status --in-flight --workspace {workspace})"
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
    return text if len(text) <= budget else text[: budget - 3] + "..."


def context(payload: dict[str, object], config: str | None, socket: str | None) -> str | None:
    """The hook's JSON answer for this payload, or None for no output."""
    import json

    from storyd.agents import hookio, source

    cfg = source.load_config(config)
    workspace = hookio.find_workspace(payload.get("cwd"), hookio.allowed_roots(cfg))
    if workspace is None:
        return None
    units = source.units(workspace, in_flight=True, socket=socket, config=config).units
    text = render(workspace, units, cfg.hooks.context_chars)
    if text is None:
        return None
    answer = {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}}
    return json.dumps(answer, ensure_ascii=False, separators=(",", ":"))
