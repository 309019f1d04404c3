"""Findings plus evidence → planned field changes, per state file.

For each finding whose code has a repair class (daemon/api/reconcile/repairs.py), the
planner locates the target file, asks the class for its `Repair`, refuses anything that
would move a DONE task backwards, merges the repairs of one file into one minimal
in-place edit (jsonedit.py) and keeps the diff. Nothing is written here.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Iterable

from storyd.api.reconcile.evidence import Evidence
from storyd.api.reconcile.jsonedit import Path, edit
from storyd.api.reconcile.pieces import Ask, LeftAlone, Repair, RepairFunction
from storyd.api.reconcile.repairs import registered, sources
from storyd.api.reconcile.targets import dialect_of
from storyd.core.errors import DataError, LockTimeout, StorydError
from storyd.core.locking import DEFAULT_LOCK_TIMEOUT, read_locked
from storyd.core.model import Finding, Unit
from storyd.core.pipeline import Signature

Seen = dict[str, Signature | None]  # state file -> its version as read, under the lock

__all__ = ["FilePlan", "Moved", "Plan", "Seen", "build"]


class Moved(LockTimeout):
    """A state file changed between the read the findings came from and the plan's read
    (a writer, or a torn read): that is not a plan. make_plan tries again, then exit 75."""


class FilePlan:
    """Everything planned for one state file: its bytes now, the bytes to write, why."""

    __slots__ = ("after", "before", "format", "relpath", "repairs")

    def __init__(self, relpath: str, fmt: str, before: bytes) -> None:
        self.relpath = relpath
        self.format = fmt
        self.before = before
        self.after = before
        self.repairs: list[Repair] = []

    def diff(self) -> str:
        """A unified diff of what would be written."""
        old = self.before.decode("utf-8", "replace").splitlines(keepends=True)
        new = self.after.decode("utf-8", "replace").splitlines(keepends=True)
        lines = difflib.unified_diff(old, new, f"a/{self.relpath}", f"b/{self.relpath}")
        return "".join(
            line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
            for line in lines
        )

    def as_dict(self) -> dict[str, object]:
        """The plan's data form."""
        return {
            "stateFile": self.relpath,
            "format": self.format,
            "repairs": [r.as_dict() for r in self.repairs],
            "diff": self.diff(),
        }


class Plan:
    """A reconcile plan for one workspace."""

    def __init__(self, workspace: str, files: list[FilePlan], left: list[LeftAlone]) -> None:
        self.workspace = workspace
        self.files = [f for f in files if f.after != f.before]
        self.left = left

    @property
    def changed(self) -> bool:
        """Whether anything would be written."""
        return bool(self.files)

    def summary(self) -> list[dict[str, object]]:
        """What was written, per file (the `reconciled` event's payload)."""
        return [
            {
                "stateFile": f.relpath,
                "format": f.format,
                "repairs": [
                    {
                        "code": r.finding.code if r.finding else None,
                        "unit": r.unit,
                        "task": r.task,
                        "changes": [c.as_dict() for c in r.changes],
                        "restore": r.restore is not None,
                    }
                    for r in f.repairs
                ],
            }
            for f in self.files
        ]

    def as_dict(self) -> dict[str, object]:
        """The plan as data (`--json`, the socket op)."""
        return {
            "workspace": self.workspace,
            "changes": bool(self.files),
            "files": [f.as_dict() for f in self.files],
            "leftAlone": [x.as_dict() for x in self.left],
        }


class _File:
    """One target file as read for planning: under the writers' shared lock, and the same
    version the findings were read from (`seen`), else Moved."""

    def __init__(self, workspace: str, relpath: str, seen: Seen, lock_timeout: float) -> None:
        self.relpath = relpath
        try:
            got = read_locked(os.path.join(workspace, relpath), lock_timeout, relpath)
        except LockTimeout:
            raise
        except (StorydError, OSError):  # absent, unreadable, or not a regular file (a FIFO)
            self.data: bytes | None = None
        else:
            if relpath in seen and seen[relpath] != got.signature:
                raise Moved(f"{relpath} changed while the plan was made; nothing was written")
            self.data = got.data
        self.document: object = None
        if self.data is not None:
            try:
                self.document = json.loads(self.data)
            except ValueError:
                self.document = None


def _forward_only(ask: Ask, repair: Repair) -> str | None:
    """Why a repair would move work backwards, or None."""
    task = ask.task
    if task is None or not task.done:
        return None
    own = ask.task_path()
    if any(c.field == "status" and c.path[:-1] == own for c in repair.changes):
        return f"task {task.id} is already {task.status}; its status is not changed"
    return None


def _repair(ask: Ask, function: RepairFunction) -> Repair | str:
    try:
        result = function(ask)
    except Exception as exc:  # a plugin's repair: its failure leaves the finding alone
        return f"the {ask.finding.code} repair raised {type(exc).__name__}: {exc}"
    if isinstance(result, Repair):
        refused = _forward_only(ask, result)
        if refused is not None:
            return refused
        result.finding = ask.finding
        result.unit = ask.unit.key
        result.task = ask.finding.task
    return result


class _Registered:
    """The installed repairs, and who declares which codes (asked once per plan)."""

    def __init__(self) -> None:
        self.repairs = registered()
        self.sources = sources()

    def wanted(self, finding: Finding, only: frozenset[str] | None) -> bool:
        """A repair exists for the code, and the finding's source declares the code."""
        code = finding.code
        if code not in self.repairs or code not in self.sources.get(finding.detector, ()):
            return False
        return only is None or code in only


def _combine(plan: FilePlan, repairs: list[Repair], left: list[LeftAlone]) -> None:
    """The file's new bytes: a restore alone, else every field change in one edit."""
    restores = [r for r in repairs if r.restore is not None]
    if restores:
        plan.after = restores[0].restore or b""
        plan.repairs = restores[:1]
        for other in [r for r in repairs if r is not restores[0]]:
            left.append(
                LeftAlone.instead_of(
                    other, plan.relpath, "the file is restored from .bak first; run reconcile again"
                )
            )
        return
    written: dict[Path, object] = {}
    kept: list[Repair] = []
    for repair in repairs:
        clash = [c for c in repair.changes if c.path in written and written[c.path] != c.new]
        if clash:
            left.append(
                LeftAlone.instead_of(
                    repair, plan.relpath, f"another repair writes {clash[0].field} differently"
                )
            )
            continue
        written.update((c.path, c.new) for c in repair.changes)
        kept.append(repair)
    changes = [(path, value) for path, value in written.items()]
    try:
        plan.after = edit(plan.before.decode("utf-8"), changes).encode("utf-8")
    except (DataError, UnicodeDecodeError) as exc:
        why = exc.message if isinstance(exc, DataError) else "not UTF-8"
        for repair in kept:
            left.append(
                LeftAlone.instead_of(
                    repair, plan.relpath, f"cannot edit {plan.relpath} in place: {why}"
                )
            )
        return
    plan.repairs = kept


def build(
    workspace: str,
    units: Iterable[tuple[Unit, tuple[Finding, ...]]],
    only: frozenset[str] | None = None,
    evidence: Evidence | None = None,
    *,
    seen: Seen | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
) -> Plan:
    """The plan for these units and their findings (nothing is written).

    `seen`: each state file's signature as the findings were read (gather); a target
    that reads differently now raises Moved."""
    own = evidence is None
    evidence = evidence or Evidence(workspace)
    files: dict[str, _File] = {}
    formats: dict[str, str] = {}
    repairs: dict[str, list[Repair]] = {}
    left: list[LeftAlone] = []
    known = _Registered()
    try:
        for unit, findings in units:
            for finding in findings:
                if not known.wanted(finding, only):
                    continue
                dialect = dialect_of(unit.format)
                if dialect is None:
                    left.append(
                        LeftAlone(
                            unit.state_file,
                            unit.key,
                            finding,
                            f"storyd does not write {unit.format} files",
                        )
                    )
                    continue
                target = dialect.target(unit)
                file = files.get(target) or files.setdefault(
                    target, _File(workspace, target, seen or {}, lock_timeout)
                )
                if file.data is None:
                    left.append(LeftAlone(target, unit.key, finding, f"{target} cannot be read"))
                    continue
                restoring = finding.code == "restored-from-backup"
                if file.document is None and not restoring:
                    left.append(LeftAlone(target, unit.key, finding, f"{target} is not JSON"))
                    continue
                ask = Ask(workspace, unit, finding, dialect, target, file.document, evidence)
                result = _repair(ask, known.repairs[finding.code])
                if isinstance(result, str):
                    left.append(LeftAlone(target, unit.key, finding, result))
                    continue
                formats[target] = unit.format
                repairs.setdefault(target, []).append(result)
    finally:
        if own:
            evidence.close()
    plans = []
    for target, found in sorted(repairs.items()):
        data = files[target].data
        assert data is not None
        plan = FilePlan(target, formats[target], data)
        _combine(plan, found, left)
        plans.append(plan)
    return Plan(workspace, plans, left)
