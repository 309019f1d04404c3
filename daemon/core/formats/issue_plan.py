"""The `issue-plan` format (seed 002, execution-state: a tasks array plus a journal).

.claude/plans/issue-<N>-<slug>/execution-state.json holds `issue {number, title,
branch}` and a `tasks` array of `{id, description, status, started_at, completed_at,
files_created, files_modified, notes, ...}`. journal.md (one `## Task <id>:` entry per
finished task) and tasks.md (the plan's `- [ ] <id>. <description>` checklist) beside it
are companions; tasks.md is the story file. One unit per plan folder.
"""

from __future__ import annotations

from storyd.core.formats.base import Adapter, Source, finding, load_json_object, make_task
from storyd.core.formats.common import (
    one_line,
    progress_labels,
    read_text,
    resume_point,
    string_list,
)
from storyd.core.jsonio import kind
from storyd.core.model import DONE, Finding, Task, Unit

TYPE_CHECKING = False  # `typing` costs start-up time; see daemon/core/model.py
if TYPE_CHECKING:
    pass

__all__ = ["ADAPTER", "IssuePlanAdapter", "journal_entries", "plan_task_ids"]

STATE_NAME = "execution-state.json"
JOURNAL_NAME = "journal.md"
TASKS_NAME = "tasks.md"
_COMPANIONS = frozenset((STATE_NAME, JOURNAL_NAME, TASKS_NAME))
_DONE = frozenset(("completed",))
_PENDING = frozenset(("pending", "in_progress", "failed"))
_VOCABULARY = ("completed", "in_progress", "pending", "failed")
_FINISHED = frozenset(("completed", "failed"))
_DIGITS = frozenset("0123456789")


def _plan_folder(name: str) -> bool:
    """`issue-<N>` or `issue-<N>-<slug>`."""
    number, _, _ = name.removeprefix("issue-").partition("-")
    return name.startswith("issue-") and bool(number) and set(number) <= _DIGITS


def _normal(task_id: str) -> str:
    """Ids compare without a trailing dot: the seed's tasks.md parser keeps `1.` as the id."""
    return task_id.strip().rstrip(".")


def _entry_status(line: str) -> str:
    lowered = line.lower()
    for word, status in (("complet", "completed"), ("fail", "failed"), ("progress", "in_progress")):
        if word in lowered:
            return status
    return "unknown"


def _heading(line: str) -> tuple[int, str] | None:
    """A markdown ATX heading's level and text (`### Task 3: x` is (3, "Task 3: x"))."""
    level = len(line) - len(line.lstrip("#"))
    if 1 <= level <= 6 and line[level : level + 1] in (" ", "\t"):
        return level, line[level:].strip()
    return None


def _status_line(line: str) -> str | None:
    """The text after `**Status**:` / `**Status:**` / `Status:` (bulleted or not), or None."""
    text = line.strip().lstrip("-*+ \t").lstrip("*_")
    if text[:6].lower() != "status":
        return None
    rest = text[6:].lstrip("*_ \t")
    return rest[1:].lstrip("*_") if rest.startswith(":") else None


def journal_entries(text: str) -> dict[str, str]:
    """Task id → the status of its last `Task <id>:` entry (completed, failed, in_progress
    or unknown), read from the entry's status line.

    Entries are the headings the seed greps for, at any level (`## Task 3:`, and the
    `### Task 3:` its grep also matches); the status is on a `**Status**:` or
    `**Status:**` line. A heading at the entry's level or above ends the entry.
    """
    entries: dict[str, str] = {}
    current: str | None = None
    level = 0
    for line in text.splitlines():
        heading = _heading(line)
        if heading is not None:
            if current is not None and heading[0] > level:
                continue  # a sub-heading inside the entry (`### What I Did`)
            current = None
            words = heading[1]
            if words[:5].lower() == "task " and ":" in words:
                current = _normal(words[5:].partition(":")[0])
                level = heading[0]
                entries[current] = "unknown"
        elif current is not None and (status := _status_line(line)) is not None:
            entries[current] = _entry_status(status)
            current = None
    return entries


def _checklist_id(line: str) -> str | None:
    """The id of a tasks.md line the seed's parser accepts (`- [ ] 1. Desc`, `- [ ] 1.1 Desc`);
    checked boxes count too."""
    if not line.startswith(("- [ ] ", "- [x] ", "- [X] ")):
        return None
    token, _, description = line[6:].partition(" ")
    number = token.rstrip(".")
    whole, _, fraction = number.partition(".")
    ok = bool(whole) and set(whole) <= _DIGITS and set(fraction) <= _DIGITS
    return number if ok and token.count(".") <= 2 and description.strip() else None


def plan_task_ids(text: str) -> list[str]:
    """The task ids of tasks.md, in order."""
    return [i for line in text.splitlines() if (i := _checklist_id(line)) is not None]


def _task_id(node: dict[str, object]) -> str | None:
    value = node.get("id")
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _commit(node: dict[str, object]) -> str | None:
    sha = node.get("commit_sha", node.get("commitSha"))
    return sha if isinstance(sha, str) and sha else None


class IssuePlanAdapter(Adapter):
    """.claude/plans/issue-<N>-<slug>/execution-state.json, one unit per plan."""

    name = "issue-plan"
    convention = "execution-state, .claude/plans/issue-<N>-<slug>/execution-state.json"
    roots = (".claude/plans",)
    dialect_name = "ISSUE_PLAN"  # how reconcile writes these files
    codes = (  # every finding code it raises (docs/formats.md)
        "duplicate-task-id", "failed-task", "journal-not-updated", "missing-journal",
        "missing-task-id", "state-not-updated", "task-not-in-plan", "task-not-in-state",
        "unknown-status"
    )

    def matches(self, relpath: str) -> bool:
        parts = relpath.split("/")
        return (
            len(parts) == 4
            and parts[:2] == [".claude", "plans"]
            and _plan_folder(parts[2])
            and parts[3] == STATE_NAME
        )

    def owner(self, relpath: str) -> str | None:
        folder, _, leaf = relpath.rpartition("/")
        candidate = f"{folder}/{STATE_NAME}"
        return candidate if leaf in _COMPANIONS and self.matches(candidate) else None

    def load(self, source: Source, relpath: str) -> list[Unit]:
        plan_dir = relpath.rpartition("/")[0]
        key = plan_dir.rpartition("/")[2]
        top = load_json_object(source.read(relpath, STATE_NAME), relpath)
        issue = top.get("issue")
        issue = issue if isinstance(issue, dict) else {}
        branch = issue.get("branch")
        labels = {"plan": key}
        for field in ("number", "title", "branch"):
            value = issue.get(field)
            if isinstance(value, str | int) and not isinstance(value, bool):
                labels["issue" if field == "number" else field] = str(value)

        def broken(error: str) -> list[Unit]:
            return [Unit("issue-plan", relpath, key, (), labels=labels, error=error)]

        nodes = top.get("tasks")
        if nodes is None or nodes is False:
            nodes = []
        if not isinstance(nodes, list):
            return broken(f"{relpath}: tasks: expected an array, got {kind(nodes)}")
        tasks: list[Task] = []
        findings: list[Finding] = []
        for index, node in enumerate(nodes):
            if not isinstance(node, dict):
                return broken(f"{relpath}: tasks[{index}]: expected an object, got {kind(node)}")
            task, found = self._task(node, index)
            tasks.append(task)
            findings.extend(found)
        findings.extend(self._duplicates(tasks))
        findings.extend(self._journal(source, f"{plan_dir}/{JOURNAL_NAME}", tasks))
        findings.extend(self._plan(source, f"{plan_dir}/{TASKS_NAME}", tasks))
        labels.update(progress_labels(tasks, _VOCABULARY))
        return [
            Unit(
                "issue-plan",
                relpath,
                key,
                tuple(tasks),
                story_file=f"{plan_dir}/{TASKS_NAME}",
                branch=branch if isinstance(branch, str) and branch else None,
                resume_point=self._resume_point(tasks),
                findings=tuple(findings),
                labels=labels,
            )
        ]

    @staticmethod
    def _task(node: dict[str, object], index: int) -> tuple[Task, list[Finding]]:
        findings = []
        task_id = _task_id(node)
        if task_id is None:
            task_id = f"#{index + 1}"
            message = f"tasks[{index}] has no string id; called {task_id}"
            findings.append(finding("missing-task-id", "warning", message, task_id))
        notes = node.get("notes")
        notes = notes if isinstance(notes, str) else ""
        task, unknown = make_task(
            task_id,
            node.get("status"),
            done=_DONE,
            pending=_PENDING,
            default="pending",
            commit_sha=_commit(node),
            completed_at=node.get("completed_at"),
            extra={
                "description": node.get("description"),
                "started_at": node.get("started_at"),
                "files_created": string_list(node.get("files_created")),
                "files_modified": string_list(node.get("files_modified")),
                "notes": notes,
            },
        )
        if unknown is not None:
            findings.append(unknown)
        if task.status.lower() == "failed":
            told = f": {one_line(notes)}" if notes.strip() else " with no notes"
            findings.append(
                finding("failed-task", "warning", f"task {task_id} failed{told}", task_id)
            )
        return task, findings

    @staticmethod
    def _duplicates(tasks: list[Task]) -> list[Finding]:
        seen: set[str] = set()
        findings = []
        for task in tasks:
            if task.id in seen:
                message = f"task id {task.id} appears more than once in tasks"
                findings.append(finding("duplicate-task-id", "warning", message, task.id))
            seen.add(task.id)
        return findings

    @staticmethod
    def _journal(source: Source, path: str, tasks: list[Task]) -> list[Finding]:
        """The seed's "Verify State Updated" check, from the journal's side."""
        text = read_text(source, path)
        finished = [t for t in tasks if t.status.lower() in _FINISHED]
        if text is None:
            if not finished:
                return []
            message = f"{path} does not exist, but {len(finished)} task(s) finished"
            return [finding("missing-journal", "info", message)]
        entries = journal_entries(text)
        findings = []
        for task in tasks:
            status = task.status.lower()
            logged = entries.get(_normal(task.id))
            if status == "in_progress" and logged in _FINISHED:
                message = (
                    f"task {task.id} is in_progress but journal.md records it {logged}: "
                    f"the sub-agent did not update execution-state.json"
                )
                evidence = {"journal": path, "journalStatus": str(logged)}
                findings.append(finding("state-not-updated", "warning", message, task.id, evidence))
            elif status in _FINISHED and logged is None:
                message = (
                    f"task {task.id} is {status} but journal.md has no '## Task {task.id}:' entry"
                )
                findings.append(finding("journal-not-updated", "info", message, task.id))
        return findings

    @staticmethod
    def _plan(source: Source, path: str, tasks: list[Task]) -> list[Finding]:
        """Drift between tasks.md and the tasks array (skipped when tasks.md has no checklist)."""
        text = read_text(source, path)
        planned = plan_task_ids(text) if text is not None else []
        if not planned:
            return []
        in_plan = {_normal(i) for i in planned}
        in_state = {_normal(t.id) for t in tasks}
        findings = [
            finding(
                "task-not-in-state",
                "warning",
                f"tasks.md lists task {i}, which execution-state.json does not track",
            )
            for i in dict.fromkeys(_normal(p) for p in planned)
            if i not in in_state
        ]
        findings.extend(
            finding("task-not-in-plan", "info", f"task {t.id} is not in tasks.md", t.id)
            for t in tasks
            if _normal(t.id) not in in_plan
        )
        return findings

    @staticmethod
    def _resume_point(tasks: list[Task]) -> str:
        """The seed's "Get Next Pending Task": the first pending task, else the first
        in_progress one; then a failed one (to retry); as `task-<id>`."""
        by_status: dict[str, Task] = {}
        for task in tasks:
            by_status.setdefault(task.status.lower(), task)
        nxt = next(
            (by_status[s] for s in ("pending", "in_progress", "failed") if s in by_status), None
        )
        nxt = nxt or next((t for t in tasks if t.bucket != DONE), None)
        started = any(s in by_status for s in ("in_progress", "failed"))
        return resume_point(tasks, None if nxt is None else f"task-{nxt.id}", started=started)


ADAPTER = IssuePlanAdapter()
