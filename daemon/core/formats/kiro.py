"""The `kiro` format: Kiro's `.kiro/specs/<feature>/tasks.md` implementation plans.

Tasks are numbered checkbox items, `- [ ] 1. Title` and sub-items `- [ ] 1.1 Title`
(indented or, in the cc-sdd flavour, at column 0): the parent is the number's prefix.
`[x]` done, `[-]` in progress (Kiro's "Start task"), `[ ]` not started, and `- [ ]*` an
optional task, never the next one and never counted against all-done. Sub-tasks come
before their parent ("If the requested task has sub-tasks, always start with the sub
tasks"), numerically (5.10 after 5.9); the next task is the first required, unfinished
one in that order. `_completed/` and template folders are not active specs.
docs/formats.md.
"""

from __future__ import annotations

from storyd.core.formats.base import Adapter, Source, finding
from storyd.core.formats.checklist import boxes, repeated, struck_or_moved, token
from storyd.core.formats.common import ALL_DONE, FRESH_START, progress, text_of
from storyd.core.model import DONE, PENDING, Finding, Task, Unit

__all__ = ["ADAPTER", "KiroAdapter", "parse"]

TASKS_NAME = "tasks.md"
_MARKS = {"x": "done", "X": "done", "-": "in-progress", " ": "not-started"}


def _number(word: str) -> tuple[int, ...] | None:
    """`3.` or `3.2` (a trailing dot allowed) as (3,) or (3, 2); None if not a number."""
    parts = word.rstrip(".").split(".")
    if not all(p.isascii() and p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


class _Item:
    __slots__ = ("label", "line", "number", "optional", "status", "text")

    def __init__(self, line: int, number: tuple[int, ...], status: str, optional: bool,
                 text: str) -> None:
        self.line = line
        self.number = number
        self.status = status
        self.optional = optional
        self.text = text
        self.label = ""  # `#3`: the third item of a list that numbers none

    @property
    def id(self) -> str:
        return self.label or ".".join(map(str, self.number))


def _items(text: str, findings: list[Finding]) -> list[_Item]:
    """The numbered items; in a list that numbers none, its unnested items as `#1`, `#2`..."""
    items: list[_Item] = []
    plain: list[_Item] = []
    seen: dict[tuple[int, ...], int] = {}
    for box in boxes(text):
        status = _MARKS.get(box.mark)
        if status is None:
            continue
        body = box.text
        optional = body.startswith("*")
        word, rest = token(body.lstrip("*"))
        number = _number(word)
        if number is None:  # a step under the task above, unless nothing is numbered
            if box.indent == 0:
                plain.append(_Item(box.line, (len(plain) + 1,), status, optional, body))
            continue
        if number in seen:
            ident = ".".join(map(str, number))
            message = repeated("task", ident, box.line, seen[number])
            findings.append(finding("duplicate-task-id", "warning", message, ident))
            continue
        seen[number] = box.line
        items.append(_Item(box.line, number, status, optional, rest))
    if items or not plain:
        return items
    for item in plain:
        item.label = f"#{item.number[0]}"
    message = f"no item is numbered; its {len(plain)} unnested checkbox items are the tasks"
    findings.append(finding("unnumbered-tasks", "info", message))
    return plain


def _ordered(items: list[_Item]) -> list[_Item]:
    """Groups in document order of their top number; in each, sub-tasks numerically,
    then the parent."""
    groups: dict[int, list[_Item]] = {}
    for item in items:
        groups.setdefault(item.number[0], []).append(item)
    ordered: list[_Item] = []
    for members in groups.values():
        ordered.extend(sorted(members, key=lambda i: (len(i.number) == 1, i.number)))
    return ordered


def _agreement(items: list[_Item]) -> list[Finding]:
    """A parent ticked with a required sub-task open, or every sub-task ticked and the
    parent not (Kiro keeps them in step in 219 of 221 real parent groups)."""
    children: dict[tuple[int, ...], list[_Item]] = {}
    for item in items:
        if len(item.number) > 1:
            children.setdefault(item.number[:-1], []).append(item)
    findings = []
    for item in items:
        required = [c for c in children.get(item.number, ()) if not c.optional]
        if not required:
            continue
        open_ = [c.id for c in required if c.status != "done"]
        if item.status == "done" and open_:
            message = f"task {item.id} is ticked but its sub-task(s) {', '.join(open_)} are not"
            findings.append(finding("parent-done-child-open", "warning", message, item.id))
        elif item.status != "done" and not open_:
            message = f"every sub-task of {item.id} is ticked but {item.id} itself is not"
            findings.append(finding("children-done-parent-open", "info", message, item.id))
    return findings


def parse(text: str) -> tuple[list[Task], list[Finding], Task | None]:
    """The tasks in Kiro's execution order, the file's findings, and the next task."""
    findings: list[Finding] = []
    items = _ordered(_items(text, findings))
    findings.extend(_agreement(items))
    tasks = []
    for item in items:
        status = "optional" if item.optional and item.status != "done" else item.status
        bucket = DONE if item.status == "done" else PENDING
        task = Task(item.id, status, bucket,
                    extra={"line": item.line, "description": item.text,
                           "optional": item.optional})
        tasks.append(task)
        why = struck_or_moved(item.text) if bucket == DONE else None
        if why is not None:
            message = f"task {item.id} is ticked but {why} (line {item.line})"
            findings.append(finding("ticked-not-done", "info", message, item.id))
    picked = _next(items)
    return tasks, findings, None if picked is None else tasks[items.index(picked)]


def _next(items: list[_Item]) -> _Item | None:
    """The task to resume: a started (`[-]`) task with no required sub-task open, else the
    first open sub-task of a started parent, else the first open required task; always
    in execution order (sub-tasks first)."""
    open_ = [i for i in items if i.status != "done" and not i.optional]
    if not open_:
        return None
    parents = {i.number[:-1] for i in open_ if len(i.number) > 1}
    started = [i for i in open_ if i.status == "in-progress"]
    leaf = next((i for i in started if i.number not in parents), None)
    if leaf is not None:
        return leaf
    if started:
        group = started[0].number
        return next(i for i in open_ if i.number[: len(group)] == group)
    return open_[0]


class KiroAdapter(Adapter):
    """.kiro/specs/<feature>/tasks.md, one unit per spec."""

    name = "kiro"
    convention = "Kiro specs, .kiro/specs/<feature>/tasks.md"
    roots = (".kiro/specs",)
    records_commits = False  # commit messages name tasks: task-named
    codes = ("children-done-parent-open", "duplicate-task-id", "no-tasks",
             "parent-done-child-open", "ticked-not-done", "unnumbered-tasks")

    def matches(self, relpath: str) -> bool:
        parts = relpath.split("/")
        return (
            len(parts) == 4
            and parts[:2] == [".kiro", "specs"]
            and parts[3] == TASKS_NAME
            and bool(parts[2])
            and not parts[2].startswith((".", "_"))
            and "template" not in parts[2].lower()
        )

    def load(self, source: Source, relpath: str) -> list[Unit]:
        key = relpath.split("/")[2]
        tasks, findings, nxt = parse(text_of(source.read(relpath, TASKS_NAME)))
        if not tasks:
            message = f"{relpath} has no numbered task lines (`- [ ] 1. Title`)"
            findings.append(finding("no-tasks", "info", message))
        required = [t for t in tasks if t.status != "optional"]
        started = any(t.bucket == DONE or t.status == "in-progress" for t in tasks)
        if required and nxt is None:
            point = ALL_DONE
        elif not started or nxt is None:
            point = FRESH_START
        else:
            point = f"task-{nxt.id}"
        optional = sum(1 for t in tasks if t.status == "optional")
        labels = {"spec": key, "progress": progress(required), "optional": str(optional)}
        return [
            Unit(
                "kiro",
                relpath,
                key,
                tuple(tasks),
                resume_point=point,
                findings=tuple(findings),
                labels=labels,
                next=None if nxt is None else {
                    "task": nxt.id,
                    "why": "the first required task not ticked, sub-tasks before their "
                    "parent (optional `[ ]*` tasks are never next)",
                    "status": nxt.status,
                    "line": nxt.extra["line"],
                },
            )
        ]


ADAPTER = KiroAdapter()
