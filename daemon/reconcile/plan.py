"""Findings plus evidence → planned field changes, per state file.

A repair class is one small function keyed on a finding code in `REPAIRS`. It is given an
`Ask` (the unit, the task, the finding, the parsed target file, the evidence reader) and
returns a `Repair` (field changes or a whole-file restore, with the evidence behind
them), or a string: why the finding is left alone. Nothing is ever guessed: no evidence,
no change, and a change that would move a DONE task backwards is refused here, whatever
the repair function asked for.

Adding a class (for example the PR/squash "merged" lifecycle finding) is one function
and one `REPAIRS` entry; see docs/reconcile.md.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Callable, Iterable

from daemon.errors import DataError
from daemon.isotime import parse_epoch
from daemon.model import Finding, Task, Unit
from daemon.reconcile.evidence import Evidence, read_journal_entry, read_output
from daemon.reconcile.jsonedit import MISSING, Path, edit, lookup
from daemon.reconcile.targets import Dialect, dialect_for, utc_stamp

__all__ = [
    "REPAIRS",
    "Ask",
    "Change",
    "FilePlan",
    "LeftAlone",
    "Plan",
    "Repair",
    "build",
    "repair_codes",
]

_SHORT_SHA = re.compile(r"^commit ([0-9a-f]{7,64}) ")
_REWRITTEN = re.compile(r"rewritten: now ([0-9a-f]{40,64})\b")
_OUTPUT_DONE = frozenset(("complete", "completed", "done", "success", "succeeded"))
_OUTPUT_FAILED = frozenset(("failed", "error"))
_RUNNING = frozenset(("running", "in_progress"))


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


# -- the repair classes, keyed on the finding code ----------------------------------------


def _completion(ask: Ask, task_path: Path, when: str | None, sha: str | None) -> list[Change]:
    """status → done, plus the commit and completion time where the format has them."""
    node = lookup(ask.document, task_path)
    node = node if isinstance(node, dict) else {}
    dialect = ask.dialect
    changes = [ask.field(task_path, "status", dialect.done_word(node.get("status")))]
    if sha is not None and dialect.sha_key and (dialect.add_sha or dialect.sha_key in node):
        changes.append(ask.field(task_path, dialect.sha_key, sha))
    if when is not None and dialect.time_key:
        changes.append(ask.field(task_path, dialect.time_key, when))
    return changes


def unrecorded_commit(ask: Ask) -> Repair | str:
    """A pending task that a commit on the branch names: DONE at that commit."""
    match = _SHORT_SHA.match(ask.finding.message)
    task_path = ask.task_path()
    if match is None or ask.task is None:
        return "the finding names no commit"
    if task_path is None:
        return f"task {ask.task.id} not found in {ask.target}"
    commit = ask.evidence.commit(match.group(1))
    if commit is None:
        return f"commit {match.group(1)} is not in the repository"
    changes = _completion(ask, task_path, utc_stamp(commit.time), commit.sha)
    return Repair(changes, [commit.as_dict()])


def rewritten_commit(ask: Ask) -> Repair | str:
    """A DONE task whose commit was rewritten: the replacement with the same patch id."""
    match = _REWRITTEN.search(ask.finding.message)
    task = ask.task
    if match is None or task is None or not task.commit_sha:
        return "the commit is not on the branch and no replacement was found: left alone"
    task_path = ask.task_path()
    if task_path is None:
        return f"task {task.id} not found in {ask.target}"
    new = ask.evidence.commit(match.group(1))
    old = ask.evidence.commit(task.commit_sha)
    if new is None or old is None:
        return "the old or the new commit is not in the repository"
    if old.patch_id is None or old.patch_id != new.patch_id:
        return "the patch ids of the old and the new commit differ"
    node = lookup(ask.document, task_path)
    keys = [k for k, v in node.items() if v == task.commit_sha] if isinstance(node, dict) else []
    if len(keys) != 1:
        return f"no single field of {task.id} holds {task.commit_sha}"
    change = ask.field(task_path, keys[0], new.sha)
    return Repair([change], [{"rewrittenFrom": old.as_dict()}, new.as_dict()])


def commit_gone(ask: Ask) -> Repair | str:
    """A DONE task whose commit is gone: never guessed, only reported."""
    return "the recorded commit is gone and nothing replaces it: left alone"


def journal_completed(ask: Ask) -> Repair | str:
    """issue-plan: journal.md records the task completed, the state says in_progress."""
    task = ask.task
    task_path = ask.task_path()
    if task is None or task_path is None:
        return "the task is not found in the state file"
    plan_dir = os.path.dirname(ask.unit.state_file)
    entry = read_journal_entry(ask.workspace, plan_dir, task.id)
    if entry is None:
        return f"journal.md has no completed entry for task {task.id}"
    when = entry.end if entry.end and parse_epoch(entry.end) is not None else None
    return Repair(_completion(ask, task_path, when, None), [entry.as_dict()])


def output_written(ask: Ask) -> Repair | str:
    """checkpoint: the task's output file exists while the state says running."""
    task_path = ask.task_path()
    node = lookup(ask.document, task_path) if task_path is not None else None
    if task_path is None or not isinstance(node, dict):
        return f"task {ask.finding.task} is not found in {ask.target}"
    status_now = node.get("status")
    if not isinstance(status_now, str) or status_now.strip().lower() not in _RUNNING:
        return f"task {ask.finding.task} is {status_now!r} now, not running"
    output = node.get("output")
    found = read_output(ask.workspace, output) if isinstance(output, str) else None
    if found is None:
        return "the output file cannot be read as JSON"
    status = (found.status or "").lower()
    if status in _OUTPUT_DONE:
        when = found.completed_at if parse_epoch(found.completed_at or "") else None
        changes = _completion(ask, task_path, when or utc_stamp(found.mtime), None)
    elif status in _OUTPUT_FAILED:
        changes = [ask.field(task_path, "status", "failed")]
    else:
        return f"the output {found.path} records no status storyd can map ({found.status!r})"
    return Repair(changes, [found.as_dict()])


def restore_backup(ask: Ask) -> Repair | str:
    """session: a torn or invalid state file whose `.bak` is valid: restore the `.bak`."""
    bak = os.path.join(ask.workspace, ask.unit.state_file + ".bak")
    try:
        with open(bak, "rb") as handle:
            data = handle.read()
        document = json.loads(data)
    except (OSError, ValueError):
        return f"{ask.unit.state_file}.bak cannot be read as JSON"
    if not isinstance(document, dict):
        return f"{ask.unit.state_file}.bak does not hold a JSON object"
    evidence: list[dict[str, object]] = [
        {"backup": ask.unit.state_file + ".bak", "bytes": len(data)}
    ]
    return Repair([], evidence, restore=data)


REPAIRS: dict[str, RepairFunction] = {
    "unrecorded": unrecorded_commit,
    "unreachable": rewritten_commit,
    "missing": commit_gone,
    "state-not-updated": journal_completed,
    "output-before-state-update": output_written,
    "restored-from-backup": restore_backup,
}
# Which detector's finding each code must come from ("format": the adapter's own).
_SOURCES = {
    "unrecorded": "unrecorded-commit",
    "unreachable": "commit-in-history",
    "missing": "commit-in-history",
    "state-not-updated": "format",
    "output-before-state-update": "format",
    "restored-from-backup": "format",
}


def repair_codes() -> tuple[str, ...]:
    """The finding codes a reconcile acts on (what `--only` and `auto` accept)."""
    return tuple(REPAIRS)


# -- plans --------------------------------------------------------------------------------


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

    def as_dict(self) -> dict[str, object]:
        """The plan as data (`--json`, the socket op)."""
        return {
            "workspace": self.workspace,
            "changes": bool(self.files),
            "files": [f.as_dict() for f in self.files],
            "leftAlone": [x.as_dict() for x in self.left],
        }


class _File:
    """One target file as read for planning."""

    def __init__(self, workspace: str, relpath: str) -> None:
        self.relpath = relpath
        try:
            with open(os.path.join(workspace, relpath), "rb") as handle:
                self.data: bytes | None = handle.read()
        except OSError:
            self.data = None
        self.document: object = None
        if self.data is not None:
            try:
                self.document = json.loads(self.data)
            except ValueError:
                self.document = None


def _forward_only(ask: Ask, repair: Repair) -> str | None:
    """Why a repair would move work backwards, or None."""
    task = ask.task
    if task is not None and task.done and any(c.field == "status" for c in repair.changes):
        return f"task {task.id} is already {task.status}; its status is not changed"
    return None


def _repair(ask: Ask) -> Repair | str:
    function = REPAIRS[ask.finding.code]
    result = function(ask)
    if isinstance(result, Repair):
        refused = _forward_only(ask, result)
        if refused is not None:
            return refused
        result.finding = ask.finding
        result.unit = ask.unit.key
        result.task = ask.finding.task
    return result


def _wanted(finding: Finding, only: frozenset[str] | None) -> bool:
    code = finding.code
    if code not in REPAIRS or _SOURCES.get(code, finding.detector) != finding.detector:
        return False
    return only is None or code in only


def _combine(plan: FilePlan, repairs: list[Repair], left: list[LeftAlone]) -> None:
    """The file's new bytes: a restore alone, else every field change in one edit."""
    restores = [r for r in repairs if r.restore is not None]
    if restores:
        plan.after = restores[0].restore or b""
        plan.repairs = restores[:1]
        for other in [r for r in repairs if r is not restores[0]]:
            assert other.finding is not None
            left.append(
                LeftAlone(
                    plan.relpath,
                    other.unit,
                    other.finding,
                    "the file is restored from .bak first; run reconcile again",
                )
            )
        return
    written: dict[Path, object] = {}
    kept: list[Repair] = []
    for repair in repairs:
        clash = [c for c in repair.changes if c.path in written and written[c.path] != c.new]
        if clash:
            assert repair.finding is not None
            left.append(
                LeftAlone(
                    plan.relpath,
                    repair.unit,
                    repair.finding,
                    f"another repair writes {clash[0].field} differently",
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
            assert repair.finding is not None
            left.append(
                LeftAlone(
                    plan.relpath,
                    repair.unit,
                    repair.finding,
                    f"cannot edit {plan.relpath} in place: {why}",
                )
            )
        return
    plan.repairs = kept


def build(
    workspace: str,
    units: Iterable[tuple[Unit, tuple[Finding, ...]]],
    only: frozenset[str] | None = None,
    evidence: Evidence | None = None,
) -> Plan:
    """The plan for these units and their findings (nothing is written)."""
    own = evidence is None
    evidence = evidence or Evidence(workspace)
    files: dict[str, _File] = {}
    formats: dict[str, str] = {}
    repairs: dict[str, list[Repair]] = {}
    left: list[LeftAlone] = []
    try:
        for unit, findings in units:
            for finding in findings:
                if not _wanted(finding, only):
                    continue
                dialect = dialect_for(unit)
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
                file = files.get(target) or files.setdefault(target, _File(workspace, target))
                if file.data is None:
                    left.append(LeftAlone(target, unit.key, finding, f"{target} cannot be read"))
                    continue
                restoring = finding.code == "restored-from-backup"
                if file.document is None and not restoring:
                    left.append(LeftAlone(target, unit.key, finding, f"{target} is not JSON"))
                    continue
                ask = Ask(workspace, unit, finding, dialect, target, file.document, evidence)
                result = _repair(ask)
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
