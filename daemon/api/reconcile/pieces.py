"""The pieces of a reconcile plan: field changes, repairs and their evidence, findings left
alone, and the `Ask` a repair function is given.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from storyd.api.reconcile.evidence import Evidence
from storyd.core.formats.dialect import MISSING, Dialect, Path, lookup
from storyd.core.model import Finding, Task, Unit

__all__ = ["Ask", "Change", "LeftAlone", "Repair", "RepairFunction"]


class Change:
    """One field write: `path` in the file's JSON goes from `old` (or MISSING) to `new`."""

    __slots__ = ("field", "new", "old", "path")

    def __init__(self, path: Path, field: str, old: object, new: object) -> None:
        self.path = path
        self.field = field
        self.old = old
        self.new = new

    def as_dict(self) -> dict[str, object]:
        """The plan's data form (`old` is omitted when the key is absent)."""
        body: dict[str, object] = {"path": list(self.path), "field": self.field, "new": self.new}
        if self.old is not MISSING:
            body["old"] = self.old
        return body

    def text(self) -> str:
        """`status PENDING → DONE`."""
        old = "(absent)" if self.old is MISSING else json.dumps(self.old, ensure_ascii=False)
        return f"{self.field} {old} → {json.dumps(self.new, ensure_ascii=False)}"


class Repair:
    """One finding's repair: field changes (or a restore) and the evidence behind them."""

    __slots__ = ("changes", "evidence", "finding", "restore", "task", "unit")

    def __init__(
        self,
        changes: list[Change],
        evidence: list[dict[str, object]],
        *,
        restore: bytes | None = None,
    ) -> None:
        self.changes = changes
        self.evidence = evidence
        self.restore = restore
        self.finding: Finding | None = None
        self.unit = ""
        self.task: str | None = None

    def as_dict(self) -> dict[str, object]:
        """The plan's data form."""
        assert self.finding is not None
        return {
            "code": self.finding.code,
            "unit": self.unit,
            "task": self.task,
            "finding": self.finding.as_dict(),
            "changes": [c.as_dict() for c in self.changes],
            "restore": self.restore is not None,
            "evidence": self.evidence,
        }


class LeftAlone:
    """A finding storyd will not repair, and why."""

    __slots__ = ("finding", "reason", "state_file", "unit")

    def __init__(self, state_file: str, unit: str, finding: Finding, reason: str) -> None:
        self.state_file = state_file
        self.unit = unit
        self.finding = finding
        self.reason = reason

    @classmethod
    def instead_of(cls, repair: Repair, state_file: str, reason: str) -> LeftAlone:
        """A planned repair that is dropped after all, and why."""
        assert repair.finding is not None
        return cls(state_file, repair.unit, repair.finding, reason)

    def as_dict(self) -> dict[str, object]:
        """The plan's data form."""
        return {
            "stateFile": self.state_file,
            "unit": self.unit,
            "code": self.finding.code,
            "task": self.finding.task,
            "finding": self.finding.as_dict(),
            "reason": self.reason,
        }


class Ask:
    """What a repair function is given for one finding."""

    __slots__ = (
        "dialect",
        "document",
        "evidence",
        "finding",
        "target",
        "task",
        "unit",
        "workspace",
    )

    def __init__(
        self,
        workspace: str,
        unit: Unit,
        finding: Finding,
        dialect: Dialect,
        target: str,
        document: object,
        evidence: Evidence,
    ) -> None:
        self.workspace = workspace
        self.unit = unit
        self.finding = finding
        self.dialect = dialect
        self.target = target
        self.document = document
        self.evidence = evidence
        self.task: Task | None = next((t for t in unit.tasks if t.id == finding.task), None)

    def task_path(self) -> Path | None:
        """Where the finding's task lives in the target file."""
        task_id = self.task.id if self.task is not None else self.finding.task
        if task_id is None:
            return None
        return self.dialect.task_path(self.document, self.unit, task_id)

    def field(self, task_path: Path, key: str, new: object) -> Change:
        """A change of one key of the task's node."""
        path = (*task_path, key)
        return Change(path, key, lookup(self.document, path), new)


RepairFunction = Callable[[Ask], "Repair | str"]
