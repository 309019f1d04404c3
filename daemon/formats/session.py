"""The `session` format (seed 001, session-resume, schema 3.0).

agent-output/<project>/00-session-state.json holds `steps.<N>` with `{status, sub_step,
artifacts, started, completed}`; 00-handoff.md beside it is the story file. One unit per
project, keyed by the project folder; its tasks are the steps in numeric order.
Files at schema 1.0, 2.0 or with no version are read as if migrated to 3.0 (storyd
never rewrites them); an empty or unparsable file falls back to `.bak`.
"""

from __future__ import annotations

from daemon.errors import DataError, StateFileMissing
from daemon.formats.base import Adapter, Source, finding, load_json_object, make_task
from daemon.formats.common import (
    artifact_exists,
    as_int,
    progress_labels,
    resume_point,
    stray_tmp,
    string_list,
)
from daemon.jsonio import kind
from daemon.model import DONE, Finding, Task, Unit

__all__ = ["ADAPTER", "SessionAdapter"]

STATE_NAME = "00-session-state.json"
HANDOFF_NAME = "00-handoff.md"
SCHEMA = "3.0"
_OLD_SCHEMAS = frozenset(("1.0", "2.0"))
_OBSOLETE_TOP = ("lock", "stale_threshold_ms")
_DONE = frozenset(("complete", "skipped"))
_PENDING = frozenset(("pending", "in_progress"))
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
    return top, bak, [finding("restored-from-backup", "warning", message)]


def _steps(top: dict[str, object], where: str) -> tuple[list[tuple[str, object]], str | None]:
    """(step key, node) pairs in step order (numeric keys by value, then the rest in file
    order), or an error when `steps` has the wrong shape."""
    steps = top.get("steps")
    if steps is None or steps is False:
        return [], None
    if isinstance(steps, dict):
        pairs = list(steps.items())
    elif isinstance(steps, list):  # not the 3.0 shape; tolerated for old files
        pairs = []
        for index, node in enumerate(steps, 1):
            number = (
                as_int(node.get("step", node.get("number"))) if isinstance(node, dict) else None
            )
            pairs.append((str(index if number is None else number), node))
    else:
        return [], f"{where}: steps: expected an object, got {kind(steps)}"
    order = {key: i for i, (key, _) in enumerate(pairs)}

    def rank(pair: tuple[str, object]) -> tuple[int, int]:
        number = as_int(pair[0])
        return (0, number) if number is not None else (1, order[pair[0]])

    return sorted(pairs, key=rank), None


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
        current = as_int(top.get("current_step"))
        point = self._pointer(tasks, running, None if current is None else f"step-{current}")
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
                story_file=f"{project_dir}/{HANDOFF_NAME}",
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
    def _pointer(tasks: list[Task], running: list[Task], current: str | None) -> Task | None:
        """The step to resume: current_step if unfinished, else the first in_progress step,
        else the first unfinished one."""
        active = [t for t in tasks if t.bucket != DONE]
        named = next((t for t in active if t.id == current), None)
        return named or (running[0] if running else None) or (active[0] if active else None)

    @staticmethod
    def _label(task: Task, sub_steps: dict[str, str | None]) -> str:
        sub_step = sub_steps.get(task.id)
        return f"{task.id}:{sub_step}" if sub_step else task.id


ADAPTER = SessionAdapter()
