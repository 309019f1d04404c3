"""A unit's summary: its progress as `list`, `changed` events and the fleet show it.

One function for the daemon's cached entries (server/store.py) and the daemon-less
read of whole workspaces (daemon/api/scan.py), so both give the same fields.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` costs a hook's direct path start-up time (daemon/core/model.py)
if TYPE_CHECKING:
    from storyd.core.errors import StorydError
    from storyd.core.model import Finding, Unit
    from storyd.core.wire import UnitSummary

__all__ = ["SEVERITIES", "unit_summary"]

SEVERITIES = ("info", "warning", "error")  # least to most severe


def counted(unit: Unit) -> int:
    """The tasks progress is counted against: all but those a format marks optional
    (`extra["optional"]`, Kiro's `[ ]*`) and not done, as the format's own `progress`
    label counts them (docs/formats.md)."""
    tasks = unit.tasks
    return len(tasks) - sum(1 for t in tasks if not t.done and t.extra.get("optional") is True)


def unit_summary(
    workspace: str,
    unit: Unit,
    resume_point: str | None,
    findings: tuple[Finding, ...],
    error: StorydError | None,
    generation: int,
    *,
    done: int | None = None,
    detail: bool = False,
) -> UnitSummary:
    """The unit's progress (detail: its findings too); `done` when already counted."""
    worst = max((SEVERITIES.index(f.severity) for f in findings), default=-1)
    return {
        # a format's labels (epic, story, ...) first, so none can mask a field below
        **unit.labels,  # type: ignore[typeddict-item]
        "workspace": workspace,
        "format": unit.format,
        "stateFile": unit.state_file,
        "unit": unit.key,
        "done": done if done is not None else sum(1 for t in unit.tasks if t.done),
        "total": counted(unit),
        "resumePoint": resume_point,
        "findings": len(findings),
        "worst": SEVERITIES[worst] if worst >= 0 else None,
        "generation": generation,
        "error": error.message if error else None,
        **({"findingList": [f.as_dict() for f in findings]} if detail else {}),
    }
