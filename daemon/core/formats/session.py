"""The `session` format (seed 001, session-resume, schema 3.0).

agent-output/<project>/00-session-state.json holds `steps.<N>` with `{status, sub_step,
artifacts, started, completed}`. One unit per project, keyed by the project folder; its
tasks are the steps in the writer's order (1, 2, 3, 3_5, 4, ...). The story file, for
staleness, is 01-requirements.md, the project's specification; not 00-handoff.md, which
the orchestrator rewrites at every gate, after every step (docs/formats.md says why).
Files at schema 1.0, 2.0 or with no version are read as if migrated to 3.0 (storyd
never rewrites them); an empty or unparsable file falls back to `.bak`.
"""

from __future__ import annotations

from storyd.core.errors import DataError, StateFileMissing
from storyd.core.formats.base import Adapter, Source, finding, load_json_object, make_task
from storyd.core.formats.common import (
    artifact_exists,
    as_int,
    progress_labels,
    resume_point,
    stray_tmp,
    string_list,
)
from storyd.core.jsonio import kind
from storyd.core.model import DONE, Finding, Task, Unit

TYPE_CHECKING = False  # `typing` costs start-up time; see daemon/core/model.py
if TYPE_CHECKING:
    pass

__all__ = ["ADAPTER", "SessionAdapter", "step_rank"]

STATE_NAME = "00-session-state.json"
# The story file: the project's requirements, what every step is built from. Not
# 00-handoff.md, which the orchestrator rewrites at every gate, after every step.
SPEC_NAME = "01-requirements.md"
SCHEMA = "3.0"
_OLD_SCHEMAS = frozenset(("1.0", "2.0"))
_OBSOLETE_TOP = ("lock", "stale_threshold_ms")
_DONE = frozenset(("complete", "skipped"))
_PENDING = frozenset(("pending", "in_progress"))
OPTIONAL_STEPS = frozenset(("step-3",))
"""Steps the writer's workflow graph marks optional (`"name": "Design (optional)"`):
no later step waits for them."""
_VOCABULARY = ("pending", "in_progress", "complete", "skipped")


def _parse(data: bytes, relpath: str) -> tuple[dict[str, object] | None, str]:
    """The state object, or None and why it cannot be used."""
    if not data.strip():
        return None, f"{relpath} is empty"
    try:
        return load_json_object(data, relpath), ""
    except DataError as exc:
        return None, exc.message


def _read(source: Source, relpath: str) -> tuple[dict[str, object], str, list[Finding]]:
    """The state object, the path it came from, and a finding when `.bak` stood in."""
    top, problem = _parse(source.read(relpath, STATE_NAME), relpath)
    if top is not None:
        return top, relpath, []
    bak = relpath + ".bak"
    try:
        bak_data = source.read(bak, STATE_NAME + ".bak")
    except StateFileMissing:
        msg = f"{problem}; no {STATE_NAME}.bak to fall back to"
        raise DataError(msg) from None
    top, bak_problem = _parse(bak_data, bak)
    if top is None:
        msg = f"{problem}; the fallback {bak_problem}"
        raise DataError(msg)
    message = f"{problem}; read {bak} instead"
    evidence = {"backup": bak, "stateFile": relpath}
    return top, bak, [finding("restored-from-backup", "warning", message, None, evidence)]


def step_rank(key: str) -> tuple[int, ...] | None:
    """A step key's place in the writer's order: `3` is (3,), `3_5` and `3.5` are (3, 5),
    so they sort between 3 and 4; None for a key that is not a step number."""
    parts = key.strip().replace("_", ".").split(".")
    if not all(p.isascii() and p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def _steps(top: dict[str, object], where: str) -> tuple[list[tuple[str, object]], str | None]:
    """(step key, node) pairs in step order (numbered keys by number, `3_5` and `3.5`
    between 3 and 4, then the rest in file order), or an error when `steps` has the
    wrong shape."""
    steps = top.get("steps")
    if steps is None or steps is False:
        return [], None
    if isinstance(steps, dict):
        pairs = list(steps.items())
    elif isinstance(steps, list):  # not the 3.0 shape; tolerated for old files
        pairs = []
        for index, node in enumerate(steps, 1):
            number = node.get("step", node.get("number")) if isinstance(node, dict) else None
            key = _current_key(number)
            pairs.append((str(index) if key is None else key, node))
    else:
        return [], f"{where}: steps: expected an object, got {kind(steps)}"
    order = {key: i for i, (key, _) in enumerate(pairs)}

    def rank(pair: tuple[str, object]) -> tuple[int, tuple[int, ...], int]:
        number = step_rank(pair[0])
        return (0, number, 0) if number is not None else (1, (), order[pair[0]])

    return sorted(pairs, key=rank), None


def _current_key(value: object) -> str | None:
    """`current_step` (or an array step's number) as a step key: 3, "3", "3_5", 3.5."""
    if isinstance(value, float) and not value.is_integer():
        return repr(value)
    number = as_int(value)
    if number is not None:
        return str(number)
    if isinstance(value, float):
        return str(int(value))
    if isinstance(value, str) and step_rank(value) is not None:
        return value.strip()
    return None


def _migration(top: dict[str, object], steps: list[tuple[str, object]]) -> Finding | None:
    version = top.get("schema_version")
    if version == SCHEMA:
        return None
    if version is not None and not (isinstance(version, str) and version in _OLD_SCHEMAS):
        shown = version if isinstance(version, str) else kind(version)
        message = f"schema_version {shown!r} is not {SCHEMA}, 2.0 or 1.0; read as {SCHEMA}"
        return finding("unknown-schema-version", "warning", message)
    dropped = [name for name in _OBSOLETE_TOP if name in top]
    dropped += [
        f"steps.{key}.claim" for key, node in steps if isinstance(node, dict) and "claim" in node
    ]
    named = "no schema_version" if version is None else f"schema_version {version}"
    note = f" (ignored: {', '.join(dropped)})" if dropped else ""
    message = f"{named}: read as migrated to {SCHEMA}{note}; storyd does not rewrite the file"
    return finding("schema-migrated", "info", message)


def _sub_step(value: object, task_id: str, findings: list[Finding]) -> str | None:
    if value is None or value is False or value == "":
        return None
    if isinstance(value, str):
        return value
    number = as_int(value)
    if number is not None:
        return str(number)
    message = f"sub_step of {task_id} is {kind(value)}, not a name or a number; ignored"
    findings.append(finding("invalid-sub-step", "warning", message, task_id))
    return None


class SessionAdapter(Adapter):
    """agent-output/<project>/00-session-state.json, one unit per project."""

    name = "session"
    convention = "session-resume, agent-output/<project>/00-session-state.json"
    roots = ("agent-output",)
    dialect_name = "SESSION"  # how reconcile writes these files
    codes = (  # every finding code it raises (docs/formats.md)
        "invalid-sub-step", "missing-artifact", "prerequisite-pending", "restored-from-backup",
        "schema-migrated", "several-in-progress", "stray-tmp", "unknown-schema-version",
        "unknown-status"
    )

    def matches(self, relpath: str) -> bool:
        parts = relpath.split("/")
        return (
            len(parts) == 3
            and parts[0] == "agent-output"
            and bool(parts[1])
            and not parts[1].startswith(".")
            and parts[2] == STATE_NAME
        )

    def owner(self, relpath: str) -> str | None:
        # Anything in the project folder: .bak, .tmp, the handoff, and the artifacts.
        parts = relpath.split("/")
        if len(parts) < 3 or parts[0] != "agent-output":
            return None
        candidate = f"agent-output/{parts[1]}/{STATE_NAME}"
        return candidate if self.matches(candidate) else None

    def load(self, source: Source, relpath: str) -> list[Unit]:
        project_dir, _, _ = relpath.rpartition("/")
        project = project_dir.rsplit("/", 1)[-1]
        top, where, findings = _read(source, relpath)
        tmp = stray_tmp(source, relpath)
        if tmp is not None:
            findings.append(tmp)
        steps, error = _steps(top, where)
        if error is not None:
            return [Unit("session", relpath, project, (), error=error)]
        migrated = _migration(top, steps)
        if migrated is not None:
            findings.append(migrated)
        tasks: list[Task] = []
        sub_steps: dict[str, str | None] = {}
        for key, node in steps:
            task_id = f"step-{key}"
            if node is None or node is False:
                continue
            if not isinstance(node, dict):
                error = f"{where}: steps.{key}: expected an object, got {kind(node)}"
                return [Unit("session", relpath, project, (), error=error)]
            sub_steps[task_id] = _sub_step(node.get("sub_step"), task_id, findings)
            artifacts = string_list(node.get("artifacts"))
            completed = node.get("completed", node.get("completed_at"))
            task, unknown = make_task(
                task_id,
                node.get("status"),
                done=_DONE,
                pending=_PENDING,
                default="pending",
                completed_at=completed,
                extra={
                    "sub_step": sub_steps[task_id],
                    "artifacts": artifacts,
                    "started": node.get("started"),
                },
            )
            tasks.append(task)
            if unknown is not None:
                findings.append(unknown)
            findings.extend(
                finding(
                    "missing-artifact",
                    "warning",
                    f"{task_id} lists artifact {path}, which does not exist",
                    task_id,
                )
                for path in artifacts
                if not artifact_exists(source, path, project_dir)
            )
        running = [t for t in tasks if t.status.lower() == "in_progress"]
        if len(running) > 1:
            names = ", ".join(t.id for t in running)
            message = f"steps {names} are all in_progress; only one agent runs at a time"
            findings.append(finding("several-in-progress", "warning", message))
        current = _current_key(top.get("current_step"))
        point, passed_over = self._pointer(tasks, running, current)
        if point is not None and passed_over is not None:
            message = (
                f"current_step is {current} but {point.id} is still {point.status}; "
                f"the workflow runs {point.id} before {passed_over.id} "
                f"(workflow-graph.json), so the resume point is {point.id}"
            )
            findings.append(finding("prerequisite-pending", "info", message, point.id))
        started = bool(running) or any(sub_steps.values())
        labels = {
            "project": project,
            "current_step": "" if current is None else str(current),
            **progress_labels(tasks, _VOCABULARY),
        }
        return [
            Unit(
                "session",
                relpath,
                project,
                tuple(tasks),
                story_file=f"{project_dir}/{SPEC_NAME}",
                resume_point=resume_point(
                    tasks,
                    None if point is None else self._label(point, sub_steps),
                    started=started,
                ),
                findings=tuple(findings),
                labels=labels,
            )
        ]

    @staticmethod
    def _pointer(
        tasks: list[Task], running: list[Task], current: str | None
    ) -> tuple[Task | None, Task | None]:
        """(the step to resume, the current step it stands in for).

        current_step if unfinished, else the first in_progress step, else the first
        unfinished one; `current_step` 3.5 names step `3_5` too. When the current step
        is unfinished but a step its writer's workflow graph puts before it is not done,
        that step: apex's workflow-graph.json makes step 4 wait for gate 2.5 (Governance,
        `3_5`), and every step wait for the ones before it, except the optional Design
        (step 3). The writer stores the integer 3 for `3_5`, so `current_step` 4 is the
        first sign that Governance was passed over.
        """
        active = [t for t in tasks if t.bucket != DONE]
        rank = None if current is None else step_rank(current)
        named = next((t for t in active if rank is not None and step_rank(t.id[5:]) == rank), None)
        if named is not None and rank is not None:
            for task in active:
                before = step_rank(task.id[5:])
                if before is not None and before < rank and task.id not in OPTIONAL_STEPS:
                    return task, named
        return named or (running[0] if running else None) or (active[0] if active else None), None

    @staticmethod
    def _label(task: Task, sub_steps: dict[str, str | None]) -> str:
        sub_step = sub_steps.get(task.id)
        return f"{task.id}:{sub_step}" if sub_step else task.id


ADAPTER = SessionAdapter()
