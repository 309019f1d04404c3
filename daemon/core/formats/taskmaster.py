"""The `task-master` format: Task Master's `.taskmaster/tasks/tasks.json` (legacy
`tasks/tasks.json`).

The file is tagged (`{"<tag>": {"tasks": [...], "metadata": {...}}, ...}`) or a single
list (`{"tasks": [...], "meta"|"metadata": {...}}`); each tag is a unit, the current
one named by `.taskmaster/state.json`'s `currentTag`. Ids and dependencies are numbers
or strings; a subtask is `P.S`. The next task is find-next-task.js's: subtasks of
in-progress parents first, then top-level tasks, those whose dependencies are all
done, by priority, fewer dependencies, then id. A `tasks/tasks.json` that is not Task
Master's (ids like `TASK-001`) is refused. docs/formats.md.
"""

from __future__ import annotations

from storyd.core.errors import DataError
from storyd.core.formats.base import Adapter, Source, finding, load_json_object, make_task
from storyd.core.formats.common import ALL_DONE, FRESH_START, as_int, progress_labels
from storyd.core.jsonio import kind
from storyd.core.model import DONE, Finding, Task, Unit

__all__ = ["ADAPTER", "TaskMasterAdapter", "ready_queue", "tags"]

PATH = ".taskmaster/tasks/tasks.json"
LEGACY = "tasks/tasks.json"
STATE = ".taskmaster/state.json"
_DONE = frozenset(("done", "completed"))
_PENDING = frozenset(("pending", "in-progress", "review", "deferred", "cancelled", "blocked"))
_VOCABULARY = ("done", "pending", "in-progress", "review", "deferred", "cancelled", "blocked")
_ACTIONABLE = frozenset(("pending", "in-progress"))
_FINISHED = frozenset(("done", "completed", "cancelled"))  # nothing left to do
_PRIORITY = {"critical": 4, "high": 3, "medium": 2, "low": 1}


def _ident(value: object) -> str | None:
    """A task id as text: `3`, `"3"`, `"3.2"`; None for anything else."""
    if type(value) is int:
        return str(value)  # the usual case, first (a 1.5 MB file has 20,000 ids)
    number = as_int(value)
    if number is not None:
        return str(number)
    if isinstance(value, str):
        parts = value.strip().split(".")
        if all(p.isascii() and p.isdigit() for p in parts) and len(parts) <= 2:
            return ".".join(str(int(p)) for p in parts)
    return None


def tags(top: dict[str, object], relpath: str) -> dict[str, list[object]]:
    """Tag -> its tasks array. A single-list file is the one tag `master`."""
    if isinstance(top.get("tasks"), list):
        return {"master": top["tasks"]}  # type: ignore[dict-item]
    found = {
        name: node["tasks"]
        for name, node in top.items()
        if isinstance(node, dict) and isinstance(node.get("tasks"), list)
    }
    if not found:
        msg = (
            f"{relpath}: not a Task Master tasks file: no `tasks` array and no tag holding "
            f"one (top-level keys: {', '.join(list(top)[:8]) or 'none'})"
        )
        raise DataError(msg)
    return found


class _Node:
    """One task or subtask as find-next-task reads it."""

    __slots__ = ("deps", "id", "parent", "priority", "status", "sub")

    def __init__(self, ident: str, status: str, priority: int, deps: list[str],
                 parent: int, sub: int) -> None:
        self.id = ident
        self.status = status
        self.priority = priority
        self.deps = deps
        self.parent = parent
        self.sub = sub


def _deps(raw: object, parent: str | None) -> list[str]:
    """Dependency ids as text; a subtask's bare number is a sibling (`P.n`)."""
    if not raw or not isinstance(raw, list):
        return []
    out = []
    for dep in raw:
        ident = _ident(dep)
        if ident is None:
            continue
        out.append(f"{parent}.{ident}" if parent is not None and "." not in ident else ident)
    return out


def ready_queue(nodes: list[_Node]) -> tuple[list[_Node], str]:
    """find-next-task.js's candidates in its order (the first is the next task), and why:
    the ready subtasks of in-progress parents, else the ready top-level tasks."""
    completed = {n.id for n in nodes if n.status in _DONE}

    def ready(node: _Node) -> bool:
        return all(d in completed for d in node.deps)

    def order(node: _Node) -> tuple[int, int, int, int]:
        return (-node.priority, len(node.deps), node.parent, node.sub)

    parents = {n.id for n in nodes if n.sub == 0 and n.status == "in-progress"}
    subs = [
        n for n in nodes
        if n.sub and str(n.parent) in parents and n.status in _ACTIONABLE and ready(n)
    ]
    if subs:
        subs.sort(key=order)
        return subs, f"a subtask of in-progress task {subs[0].parent}, its dependencies done"
    tops = sorted((n for n in nodes if n.sub == 0 and n.status in _ACTIONABLE and ready(n)),
                  key=order)
    return tops, "the top-level task with its dependencies done, by priority"


class TaskMasterAdapter(Adapter):
    """.taskmaster/tasks/tasks.json or tasks/tasks.json, one unit per tag."""

    name = "task-master"
    convention = "Task Master, .taskmaster/tasks/tasks.json (legacy tasks/tasks.json)"
    roots = (".taskmaster/tasks", "tasks")
    ordered = False  # next by dependencies and priority, not file order
    records_commits = False  # commit messages name tasks: task-named
    codes = ("cancelled-dependency", "done-parent-open-subtask", "duplicate-task-id",
             "missing-task-id", "no-next-task", "task-files-disagree", "unknown-dependency",
             "unknown-status")

    def matches(self, relpath: str) -> bool:
        return relpath in (PATH, LEGACY)

    def owner(self, relpath: str) -> str | None:
        if relpath == STATE:
            return PATH
        return relpath if self.matches(relpath) else None

    def load(self, source: Source, relpath: str) -> list[Unit]:
        top = load_json_object(source.read(relpath, "tasks.json"), relpath)
        by_tag = tags(top, relpath)
        current = self._current(source, relpath, by_tag)
        units = [self._unit(relpath, tag, nodes, tag == current) for tag, nodes in by_tag.items()]
        if not any(t.tasks for t in units) and not any(u.error for u in units):
            return units
        _refuse_lookalike(by_tag, relpath)
        disagree = self._other_file(source, relpath, by_tag)
        if disagree:
            for unit in units:
                if unit.key == current:
                    unit.findings = (*unit.findings, disagree)
        return units

    @staticmethod
    def _current(source: Source, relpath: str, by_tag: dict[str, list[object]]) -> str:
        """state.json's currentTag; `master`, or the first tag when master is absent."""
        wanted = "master"
        if source.exists(STATE):
            try:
                state = load_json_object(source.read(STATE), STATE)
            except DataError:
                state = {}
            tag = state.get("currentTag")
            if isinstance(tag, str) and tag in by_tag:
                wanted = tag
        return wanted if wanted in by_tag else next(iter(by_tag))

    def _unit(self, relpath: str, tag: str, raw: list[object], current: bool) -> Unit:
        labels = {"tag": tag}
        if current:
            labels["current"] = "yes"
        tasks: list[Task] = []
        findings: list[Finding] = []
        nodes: list[_Node] = []
        seen: set[str] = set()
        for index, node in enumerate(raw):
            if not isinstance(node, dict):
                error = f"{relpath}: {tag}: tasks[{index}]: expected an object, got {kind(node)}"
                return Unit("task-master", relpath, tag, (), labels=labels, error=error)
            self._task(node, index, None, tasks, nodes, findings, seen)
        findings.extend(_dependency_findings(nodes, {n.id: n for n in nodes}))
        queue, why = ready_queue(nodes)
        labels.update(progress_labels(tasks, _VOCABULARY))
        labels["ready"] = str(len(queue))
        nxt: dict[str, object] | None = None
        if queue:
            node = queue[0]
            nxt = {"task": node.id, "why": why, "tag": tag, "dependencies": node.deps,
                   "priority": next((k for k, v in _PRIORITY.items() if v == node.priority),
                                    "medium"),
                   "ready": [n.id for n in queue[:20]]}
        point = _resume_point(tasks, nodes, nxt)
        if point == "blocked":
            findings.append(_why_none(nodes))
        return Unit("task-master", relpath, tag, tuple(tasks), resume_point=point,
                    findings=tuple(findings), labels=labels, next=nxt)

    def _task(self, node: dict[str, object], index: int, parent: str | None,
              tasks: list[Task], nodes: list[_Node], findings: list[Finding],
              seen: set[str]) -> None:
        local = _ident(node.get("id"))
        if local is None:
            local = f"#{index + 1}"
            message = f"task {parent + '.' if parent else ''}{local} has no numeric id"
            findings.append(finding("missing-task-id", "warning", message))
        ident = f"{parent}.{local}" if parent is not None else local
        task, unknown = make_task(ident, node.get("status"), done=_DONE, pending=_PENDING,
                                  default="pending", extra={"title": node.get("title")})
        if ident in seen:
            message = f"task id {ident} appears more than once"
            findings.append(finding("duplicate-task-id", "warning", message, ident))
        tasks.append(task)
        if unknown is not None:
            findings.append(unknown)
        raw_priority = node.get("priority")
        priority = _PRIORITY.get(raw_priority.lower(), 2) if isinstance(raw_priority, str) else 2
        head, _, tail = ident.partition(".")
        seen.add(ident)
        nodes.append(_Node(ident, task.status.lower(), priority,
                           _deps(node.get("dependencies"), parent),
                           int(head) if head.isdigit() else 0,
                           int(tail) if tail.isdigit() else 0))
        subtasks = node.get("subtasks")
        if parent is None and isinstance(subtasks, list):
            open_subs = []
            for sub_index, sub in enumerate(subtasks):
                if isinstance(sub, dict):
                    self._task(sub, sub_index, ident, tasks, nodes, findings, seen)
                    if tasks[-1].bucket != DONE and tasks[-1].status.lower() != "cancelled":
                        open_subs.append(tasks[-1].id)
            if task.bucket == DONE and open_subs:
                message = (f"task {ident} is done but subtask(s) {', '.join(open_subs[:10])} "
                           f"are not (set-status done cascades to subtasks)")
                findings.append(finding("done-parent-open-subtask", "warning", message, ident))

    @staticmethod
    def _other_file(
        source: Source, relpath: str, by_tag: dict[str, list[object]]
    ) -> Finding | None:
        """Both PATH and LEGACY exist and their master lists disagree on a task's status."""
        other = LEGACY if relpath == PATH else PATH
        if not source.exists(other):
            return None
        try:
            theirs = tags(load_json_object(source.read(other), other), other)
        except DataError:
            return None

        def statuses(tasks: list[object]) -> dict[str, object]:
            return {str(t.get("id")): t.get("status") for t in tasks if isinstance(t, dict)}

        mine = statuses(next(iter(by_tag.values())))
        their = statuses(next(iter(theirs.values())))
        differ = sorted(k for k in mine.keys() | their.keys() if mine.get(k) != their.get(k))
        if not differ:
            return None
        message = (f"{relpath} and {other} disagree on {len(differ)} task(s) "
                   f"({', '.join(differ[:8])}); Task Master reads {PATH}")
        return finding("task-files-disagree", "warning", message,
                       evidence={"other": other, "tasks": ",".join(differ[:50])})


def _why_none(nodes: list[_Node]) -> Finding:
    """The no-next-task warning: open tasks wait on dependencies, or none is actionable."""
    if any(n.status in _ACTIONABLE for n in nodes):
        message = "no task is ready: every pending task waits on a dependency not done"
    else:
        left = sorted({n.status for n in nodes if n.status not in _FINISHED})
        message = (f"no task is ready: the open tasks are {', '.join(left)}, "
                   f"none pending or in progress")
    return finding("no-next-task", "warning", message)


def _dependency_findings(nodes: list[_Node], by_id: dict[str, _Node]) -> list[Finding]:
    findings = []
    for node in nodes:
        if node.status not in _ACTIONABLE:
            continue
        for dep in node.deps:
            target = by_id.get(dep)
            if target is None:
                message = f"task {node.id} depends on {dep}, which the tag does not hold"
                findings.append(finding("unknown-dependency", "warning", message, node.id))
            elif target.status in ("cancelled", "deferred"):
                message = (f"task {node.id} depends on {dep}, which is {target.status}: "
                           f"that dependency is never satisfied")
                findings.append(finding("cancelled-dependency", "warning", message, node.id))
    return findings


def _resume_point(tasks: list[Task], nodes: list[_Node], nxt: dict[str, object] | None) -> str:
    if nxt is not None:
        started = any(t.bucket == DONE or n.status == "in-progress"
                      for t, n in zip(tasks, nodes, strict=True))
        return f"task-{nxt['task']}" if started else FRESH_START
    closed = {n.id for n in nodes if n.sub == 0 and n.status in _DONE}
    left = [n for n in nodes if n.status not in _FINISHED and str(n.parent) not in closed]
    # "review" is "completed and waiting for review"; a done parent's subtasks are done
    # by set-status's cascade (a finding says when the file missed it)
    if all(n.status == "review" for n in left):
        return ALL_DONE
    return "blocked"


def _refuse_lookalike(by_tag: dict[str, list[object]], relpath: str) -> None:
    """A tasks file none of whose ids Task Master could have written (Huckleberry's
    `TASK-001`/`todo`) is refused, not read as Task Master's."""
    ids = [t.get("id") for tasks in by_tag.values() for t in tasks if isinstance(t, dict)]
    if ids and all(_ident(i) is None for i in ids):
        shown = ", ".join(repr(i) for i in ids[:3])
        msg = (f"{relpath}: not a Task Master tasks file: its task ids ({shown}) are not "
               f"Task Master's numbers")
        raise DataError(msg)


ADAPTER = TaskMasterAdapter()
