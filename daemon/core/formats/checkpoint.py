"""The `checkpoint` format (seed 004, checkpoint & resume: phase and execution checkpoints).

memory/state/phase.json is the state file: `{workflow_id, started_at, last_updated,
current_phase, phase_status, completed_phases [{phase, completed_at, output}],
user_checkpoints, interruption_safe}`. memory/state/execution.json beside it is a
companion read under the same lock discipline: `{workflow_id, last_updated,
interruption_safe, tasks [{id, status, started_at, completed_at, output, attempts}]}`.
One unit per workflow; its tasks are the five phases in their fixed order, and the
resume point names the execution task when the workflow is in IMPLEMENTATION.
"""

from __future__ import annotations

import time

from storyd.core.errors import DataError, StateFileMissing
from storyd.core.formats.base import (
    Adapter,
    Source,
    finding,
    load_json_object,
    make_task,
    normal_status,
    status_text,
)
from storyd.core.formats.common import (
    ALL_DONE,
    artifact_exists,
    progress,
    resume_point,
    stray_tmp,
)
from storyd.core.isotime import parse_epoch
from storyd.core.jsonio import kind
from storyd.core.model import DONE, PENDING, Finding, Task, Unit

TYPE_CHECKING = False  # `typing` costs start-up time; see daemon/core/model.py
if TYPE_CHECKING:
    from storyd.core.formats.dialect import Dialect

__all__ = ["ADAPTER", "FUTURE_SKEW", "PHASES", "STALE_AFTER", "CheckpointAdapter"]

STATE_PATH = "memory/state/phase.json"
EXECUTION_PATH = "memory/state/execution.json"
PHASES = ("REQUIREMENTS", "ARCHITECTURE", "IMPLEMENTATION", "VERIFICATION", "REFLECTION")
STALE_AFTER = 7 * 86400  # seconds: the seed's "ancient state file"
FUTURE_SKEW = 300  # seconds of clock skew tolerated before a timestamp is "in the future"
_PHASE_PENDING = frozenset(("pending", "in_progress", "failed"))
_TASK_DONE = frozenset(("complete", "completed"))
_TASK_PENDING = frozenset(("pending", "running", "in_progress", "failed"))
_RUNNING = frozenset(("running", "in_progress"))
_COMPANIONS = frozenset((STATE_PATH, EXECUTION_PATH, STATE_PATH + ".tmp", EXECUTION_PATH + ".tmp"))


class _Clock:
    """Timestamp checks against one `now`, taken when the files are read."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.findings: list[Finding] = []

    def check(self, where: str, value: object, task: str | None = None) -> int | None:
        """The epoch of a timestamp field, with a finding when it is malformed or in the future."""
        if value is None:
            return None
        epoch = parse_epoch(value)
        if epoch is None:
            shown = value if isinstance(value, str) else kind(value)
            message = f"{where} {shown!r} is not an ISO-8601 timestamp"
            self.findings.append(finding("invalid-timestamp", "warning", message, task))
        elif epoch > self.now + FUTURE_SKEW:
            message = f"{where} {value} is in the future"
            self.findings.append(finding("future-timestamp", "warning", message, task))
        return epoch


def _torn(name: str, top: dict[str, object]) -> Finding | None:
    if top.get("interruption_safe") is not False:
        return None
    message = (
        f"{name} has interruption_safe: false: a checkpoint write was interrupted; "
        f"validate the state before resuming"
    )
    return finding("torn-checkpoint", "error", message)


def _phase_entries(top: dict[str, object]) -> tuple[list[dict[str, object]], str | None]:
    """completed_phases as `{phase, completed_at, output}` dicts (bare names allowed)."""
    entries = top.get("completed_phases")
    if entries is None or entries is False:
        return [], None
    if not isinstance(entries, list):
        return [], f"completed_phases: expected an array, got {kind(entries)}"
    out: list[dict[str, object]] = []
    for index, node in enumerate(entries):
        entry = {"phase": node} if isinstance(node, str) else node
        if not isinstance(entry, dict) or not isinstance(entry.get("phase"), str):
            return [], f"completed_phases[{index}]: expected an object with a phase name"
        out.append(entry)
    return out, None


class _Execution:
    """What execution.json says: its tasks, findings, and the task to resume."""

    def __init__(self) -> None:
        self.tasks: list[Task] = []
        self.findings: list[Finding] = []

    def read(self, source: Source, clock: _Clock, workflow_id: str | None) -> None:
        try:
            data = source.read(EXECUTION_PATH, "execution.json")
        except StateFileMissing:
            return
        try:
            top = load_json_object(data, EXECUTION_PATH)
        except DataError as exc:
            self.findings.append(finding("invalid-execution", "error", exc.message))
            return
        torn = _torn("execution.json", top)
        if torn is not None:
            self.findings.append(torn)
        theirs = top.get("workflow_id")
        if isinstance(theirs, str) and workflow_id is not None and theirs != workflow_id:
            message = (
                f"execution.json belongs to workflow {theirs!r}, phase.json to {workflow_id!r}: "
                f"a leftover of another workflow"
            )
            self.findings.append(finding("workflow-mismatch", "warning", message))
        for field in ("started_at", "last_updated"):
            clock.check(f"execution.json {field}", top.get(field))
        nodes = top.get("tasks")
        if isinstance(nodes, dict):
            pairs = [(str(k), v) for k, v in nodes.items()]
        elif isinstance(nodes, list):
            pairs = [(self._id(v, i), v) for i, v in enumerate(nodes)]
        elif nodes is None or nodes is False:
            pairs = []
        else:
            message = f"{EXECUTION_PATH}: tasks: expected an array, got {kind(nodes)}"
            self.findings.append(finding("invalid-execution", "error", message))
            pairs = []
        for task_id, node in pairs:
            self._task(source, clock, task_id, node)

    @staticmethod
    def _id(node: object, index: int) -> str:
        value = node.get("id") if isinstance(node, dict) else None
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
            return str(value)
        return f"#{index + 1}"

    def _task(self, source: Source, clock: _Clock, task_id: str, node: object) -> None:
        if not isinstance(node, dict):
            message = f"{EXECUTION_PATH}: task {task_id}: expected an object, got {kind(node)}"
            self.findings.append(finding("invalid-execution", "error", message, task_id))
            return
        output = node.get("output")
        output = output if isinstance(output, str) and output else None
        task, unknown = make_task(
            task_id,
            node.get("status"),
            done=_TASK_DONE,
            pending=_TASK_PENDING,
            default="pending",
            completed_at=node.get("completed_at"),
            extra={
                "output": output,
                "started_at": node.get("started_at"),
                "attempts": node.get("attempts"),
            },
        )
        self.tasks.append(task)
        if unknown is not None:
            self.findings.append(unknown)
        for field in ("started_at", "completed_at"):
            clock.check(f"execution.json task {task_id} {field}", node.get(field), task_id)
        if output is None:
            return
        exists = artifact_exists(source, output)
        if task.bucket == DONE and not exists:
            message = f"{task_id} is {task.status} but its output {output} does not exist"
            self.findings.append(finding("missing-output", "warning", message, task_id))
        elif task.status.lower() in _RUNNING and exists:
            message = (
                f"{task_id} is {task.status} but its output {output} exists: a crash after "
                f"the write, before the state update; read the status from the output"
            )
            evidence = {"output": output}
            code = "output-before-state-update"
            self.findings.append(finding(code, "warning", message, task_id, evidence))

    def next_task(self) -> Task | None:
        """The executor task to resume: the first running, else pending, else failed one."""
        for statuses in (_RUNNING, frozenset(("pending",)), frozenset(("failed",))):
            task = next((t for t in self.tasks if t.status.lower() in statuses), None)
            if task is not None:
                return task
        return next((t for t in self.tasks if t.bucket != DONE), None)


class CheckpointAdapter(Adapter):
    """memory/state/phase.json (with execution.json), one unit per workflow."""

    name = "checkpoint"
    convention = "checkpoint & resume, memory/state/phase.json + memory/state/execution.json"
    roots = ("memory",)
    time_sensitive = True  # "ancient" and "in the future" change with the clock alone
    codes = (  # every finding code it raises (docs/formats.md)
        "ancient-state", "future-timestamp", "invalid-execution", "invalid-phase-progression",
        "invalid-timestamp", "missing-field", "missing-output", "output-before-state-update",
        "phase-failed", "stray-tmp", "torn-checkpoint", "unknown-phase", "unknown-status",
        "workflow-mismatch"
    )

    @property
    def dialect(self) -> Dialect:
        """How `storyd reconcile` writes these files (imported when first asked)."""
        from storyd.core.formats.dialect import CheckpointDialect

        return CheckpointDialect(EXECUTION_PATH)

    def matches(self, relpath: str) -> bool:
        return relpath == STATE_PATH

    def owner(self, relpath: str) -> str | None:
        if relpath in _COMPANIONS or relpath.startswith("memory/reports/"):
            return STATE_PATH
        return None

    def load(self, source: Source, relpath: str) -> list[Unit]:
        top = load_json_object(source.read(relpath, "phase.json"), relpath)
        clock = _Clock(time.time())
        wid = top.get("workflow_id")
        workflow_id = wid if isinstance(wid, str) and wid else None
        key = workflow_id or "workflow"
        current_raw = top.get("current_phase")
        current = normal_status(current_raw).upper() if isinstance(current_raw, str) else None
        phase_status = normal_status(status_text(top.get("phase_status"), "pending"))
        labels = {
            "workflow_id": workflow_id or "",
            "phase": current or "",
            "phase_status": phase_status,
        }
        entries, error = _phase_entries(top)
        if error is not None:
            return [
                Unit("checkpoint", relpath, key, (), labels=labels, error=f"{relpath}: {error}")
            ]
        findings: list[Finding] = []
        for extra in (
            _torn("phase.json", top),
            stray_tmp(source, relpath),
            stray_tmp(source, EXECUTION_PATH),
        ):
            if extra is not None:
                findings.append(extra)
        completed = self._completed(source, clock, entries, findings)
        findings.extend(self._progression(entries, current, phase_status))
        tasks = self._phases(completed, current, phase_status, findings)
        approvals = top.get("user_checkpoints")
        for index, entry in enumerate(approvals if isinstance(approvals, list) else ()):
            if isinstance(entry, dict):
                clock.check(
                    f"phase.json user_checkpoints[{index}].approved_at", entry.get("approved_at")
                )
        clock.check("phase.json started_at", top.get("started_at"))
        last = clock.check("phase.json last_updated", top.get("last_updated"))
        execution = _Execution()
        execution.read(source, clock, workflow_id)
        findings.extend(execution.findings)
        point = self._resume_point(tasks, current, phase_status, execution)
        field = "last_updated" if last is not None else "started_at"
        age = last if last is not None else parse_epoch(top.get("started_at"))
        if age is not None and age < clock.now - STALE_AFTER and point != ALL_DONE:
            days = STALE_AFTER // 86400
            message = (
                f"phase.json {field} {top.get(field)} is more than {days} days old: stale "
                f"state; archive it and start fresh, or resume with caution"
            )
            findings.append(finding("ancient-state", "warning", message))
        findings.extend(clock.findings)
        labels["progress"] = progress(tasks)
        if execution.tasks:
            labels["execution"] = progress(execution.tasks)
        return [
            Unit(
                "checkpoint",
                relpath,
                key,
                tuple(tasks),
                resume_point=point,
                findings=tuple(findings),
                labels=labels,
            )
        ]

    @staticmethod
    def _completed(
        source: Source, clock: _Clock, entries: list[dict[str, object]], findings: list[Finding]
    ) -> dict[str, dict[str, object]]:
        """Known completed phases by name; outputs checked, unknown names reported."""
        completed: dict[str, dict[str, object]] = {}
        for index, entry in enumerate(entries):
            phase = normal_status(str(entry["phase"])).upper()
            if phase not in PHASES:
                message = f"completed_phases[{index}] names unknown phase {entry['phase']!r}"
                findings.append(finding("unknown-phase", "warning", message))
                continue
            completed.setdefault(phase, entry)
            clock.check(
                f"phase.json completed_phases[{index}].completed_at",
                entry.get("completed_at"),
                phase,
            )
            output = entry.get("output")
            if isinstance(output, str) and output and not artifact_exists(source, output):
                message = f"{phase} is complete but its output {output} does not exist"
                findings.append(finding("missing-output", "warning", message, phase))
        return completed

    @staticmethod
    def _progression(
        entries: list[dict[str, object]], current: str | None, status: str
    ) -> list[Finding]:
        """REQUIREMENTS → ARCHITECTURE → IMPLEMENTATION → VERIFICATION → REFLECTION, no gaps."""
        order = " → ".join(PHASES)
        names = [normal_status(str(e["phase"])).upper() for e in entries]
        known = [PHASES.index(n) for n in names if n in PHASES]
        if known != list(range(len(known))):
            message = (
                f"completed_phases is {', '.join(names)}; phases complete in the order {order}"
            )
            return [finding("invalid-phase-progression", "error", message)]
        if current is None:
            message = "phase.json has no current_phase; read as the first phase not completed"
            return [finding("missing-field", "info", message)]
        if current not in PHASES:
            message = f"current_phase {current!r} is not one of {', '.join(PHASES)}"
            return [finding("unknown-phase", "warning", message)]
        at, done = PHASES.index(current), len(known)
        if at == done or (at == done - 1 and status.lower() == "complete"):
            return []
        after = ", ".join(PHASES[i] for i in known) or "no completed phase"
        message = (
            f"current_phase {current} ({status}) does not follow {after}; expected order {order}"
        )
        return [finding("invalid-phase-progression", "error", message, current)]

    @staticmethod
    def _phases(
        completed: dict[str, dict[str, object]],
        current: str | None,
        status: str,
        findings: list[Finding],
    ) -> list[Task]:
        tasks = []
        for phase in PHASES:
            entry = completed.get(phase)
            if entry is not None:
                output = entry.get("output")
                completed_at = entry.get("completed_at")
                tasks.append(
                    Task(
                        phase,
                        "complete",
                        DONE,
                        completed_at=completed_at if isinstance(completed_at, str) else None,
                        extra={"output": output if isinstance(output, str) else None},
                    )
                )
            elif phase == current and status.lower() == "complete":
                # The seed's completion advances current_phase, then sets phase_status
                # complete: the new current phase has not started.
                tasks.append(Task(phase, "pending", PENDING, extra={"phase_status": status}))
            elif phase == current:
                task, unknown = make_task(
                    phase, status, done=frozenset(), pending=_PHASE_PENDING, default="pending"
                )
                tasks.append(task)
                if unknown is not None:
                    findings.append(unknown)
                if status.lower() == "failed":
                    findings.append(
                        finding("phase-failed", "warning", f"phase {phase} failed", phase)
                    )
            else:
                tasks.append(Task(phase, "pending", PENDING))
        return tasks

    @staticmethod
    def _resume_point(
        tasks: list[Task], current: str | None, status: str, execution: _Execution
    ) -> str:
        """The current phase (the first unfinished one when current_phase is finished or
        unknown), as `IMPLEMENTATION/<task-id>` when the executor has a task to resume."""
        by_name = {t.id: t for t in tasks}
        named = by_name.get(current or "")
        phase = named if named is not None and named.bucket != DONE else None
        phase = phase or next((t for t in tasks if t.bucket != DONE), None)
        pointer = None if phase is None else phase.id
        nxt = execution.next_task()
        if pointer == "IMPLEMENTATION" and nxt is not None:
            pointer = f"IMPLEMENTATION/{nxt.id}"
        started = (
            any(t.bucket == DONE for t in tasks)
            or status.lower() in ("in_progress", "failed")
            or any(t.bucket == DONE or t.status.lower() != "pending" for t in execution.tasks)
        )
        return resume_point(tasks, pointer, started=started)


ADAPTER = CheckpointAdapter()
