"""`storyd hook stop`: block a stop while a unit's state file lags behind git.

For Claude Code's Stop and SubagentStop hooks. When a unit of the workspace has a finding
whose code is in `[hooks] block_stop_on` (by default: a commit names a task still pending,
a journal completed what the state calls in progress, a checkpoint's output exists while
the state says running), the answer is `{"decision": "block", "reason": ...}` naming the
task, the evidence and the `storyd reconcile --apply` command that writes the fix. With
`stop_hook_active` true (the agent already continued once for a Stop hook), or nothing
lagging: no output.
"""

from __future__ import annotations

import shlex

__all__ = ["decide", "reason"]

_EVIDENCE = ("commit", "journal", "output")  # evidence keys worth naming, in this order


def _fix(workspace: str, unit: dict[str, object], code: str) -> str:
    argv = [
        "storyd", "reconcile", "--apply", "--workspace", workspace,
        "--state-file", str(unit.get("stateFile")), "--unit", str(unit.get("unit")),
        "--only", code,
    ]  # fmt: skip
    return shlex.join(argv)


def reason(workspace: str, lagging: list[tuple[dict[str, object], dict[str, object]]]) -> str:
    """The block's reason: each lagging task, its evidence and the command that fixes it."""
    lines = [
        f"storyd: the state file is behind git in {workspace}; record the work before you "
        "stop (or the next session resumes from the wrong task):"
    ]
    for unit, finding in lagging:
        task = f" task {finding['task']}" if finding.get("task") else ""
        lines.append(
            f"- {unit.get('stateFile')} {unit.get('unit')}{task}: "
            f"{finding.get('detector')}/{finding.get('code')}: {finding.get('message')}"
        )
        evidence = finding.get("evidence")
        if isinstance(evidence, dict):
            named = [f"{k} {evidence[k]}" for k in _EVIDENCE if evidence.get(k)]
            if named:
                lines.append(f"  evidence: {', '.join(named)}")
        lines.append(f"  fix: {_fix(workspace, unit, str(finding.get('code')))}")
    return "\n".join(lines)


def decide(payload: dict[str, object], config: str | None, socket: str | None) -> str | None:
    """The hook's JSON answer for this payload, or None for no output."""
    import json

    from storyd.agents import hookio, source

    if payload.get("stop_hook_active") is True:
        return None
    cfg = source.load_config(config)
    block_on = set(cfg.hooks.block_stop_on)
    if not block_on:
        return None
    workspace = hookio.find_workspace(payload.get("cwd"), hookio.allowed_roots(cfg))
    if workspace is None:
        return None
    units = source.units(workspace, in_flight=True, socket=socket, config=config).units
    lagging = [
        (unit, finding)
        for unit in units
        for finding in unit.get("findingList") or []  # type: ignore[attr-defined]
        if isinstance(finding, dict) and finding.get("code") in block_on
    ]
    if not lagging:
        return None
    return json.dumps(
        {"decision": "block", "reason": reason(workspace, lagging)},
        ensure_ascii=False,
        separators=(",", ":"),
    )
