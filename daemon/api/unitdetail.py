"""One unit in detail, as `storyd top` shows it on Enter: its claim
(storyd.api.claimview), its findings with their evidence, its tasks with their commits
(history's newest version, issue 33), and its history as a picture (one bar per version)."""

from __future__ import annotations

__all__ = ["detail_lines"]

_PICTURE = 20  # the newest versions drawn


def _history(unit: dict[str, object], path: str | None) -> list[dict[str, object]] | str:
    """The unit's versions, or why there are none."""
    from storyd.api.history import Named, versions
    from storyd.core.errors import StorydError

    named = Named(str(unit["workspace"]), str(unit["stateFile"]), str(unit["unit"]))
    try:
        return versions(named, path=path, busy=0.5)
    except StorydError as exc:
        return exc.message
    except OSError as exc:
        return f"history unreadable: {exc}"


def detail_lines(unit: dict[str, object], history_path: str | None = None) -> list[str]:
    """The unit's detail, one line each (plain text)."""
    from storyd.api.history import picture
    from storyd.api.render import bar
    from storyd.core.evidence import evidence_lines

    done, total = int(unit.get("done") or 0), int(unit.get("total") or 0)  # type: ignore[call-overload]
    lines = [
        f"{unit.get('format')} {unit.get('unit')}",
        f"  workspace   {unit.get('workspace')}",
        f"  state file  {unit.get('stateFile')}",
        f"  progress    {bar(done, total)} {done}/{total}",
        f"  resume at   {unit.get('resumePoint') or 'unreadable'}",
    ]
    if isinstance(unit.get("claim"), dict):
        from storyd.api.claimview import claim_text

        lines.append(f"  claim       {claim_text(unit['claim'])}")  # type: ignore[arg-type]
    if unit.get("error"):
        lines.append(f"  error       {unit['error']}")
    found = [f for f in unit.get("findingList") or () if isinstance(f, dict)]  # type: ignore[attr-defined]
    lines += ["", f"findings ({len(found)})"]
    for finding in found:
        task = f" {finding['task']}" if finding.get("task") else ""
        lines.append(
            f"  {finding.get('severity')} {finding.get('detector')}/{finding.get('code')}{task}: "
            f"{finding.get('message')}"
        )
        lines += [f"      evidence: {text}" for text in evidence_lines(finding)]
    kept = _history(unit, history_path)
    lines.append("")
    if isinstance(kept, str):
        return [*lines, "tasks and history: " + kept]
    tasks = kept[-1].get("tasks") if kept else None
    lines.append(f"tasks ({len(tasks) if isinstance(tasks, list) else 0})")
    for task in tasks if isinstance(tasks, list) else ():
        ident, status, _bucket, sha, at = (list(task) + [None] * 5)[:5]
        commit = f"  commit {str(sha)[:12]}" if sha else ""
        when = f"  {at}" if at else ""
        lines.append(f"  {ident!s:<24} {status!s:<12}{commit}{when}")
    lines += ["", f"history ({len(kept)} versions, the newest {_PICTURE} drawn)"]
    lines += ["  " + line for line in picture(kept[-_PICTURE:], width=20)]
    return lines
