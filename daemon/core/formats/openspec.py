"""The `openspec` format: OpenSpec's `openspec/changes/<id>/tasks.md` checklists, and the
finished changes moved to `openspec/changes/archive/YYYY-MM-DD-<id>/`.

A task is any line OpenSpec's parser counts (`src/utils/task-progress.ts`):
`^\\s*[-*]\\s*\\[([\\sxX])\\]\\s*(.*)`, indented sub-tasks, code fences and HTML comments
included; `[x]`/`[X]` done, `[ ]` open; `[~]`, `[-]` and any other mark make the line
no task at all. The id is the leading `N.M` (`1.1`, `2.3.1`, `4.2a`), else `#<position>`.
The next task is the first open one with text, in document order (`/opsx:apply`).
There is no current-change pointer: the only active change is the one apply picks
("Auto-select if only one active change exists"). An archived change is finished and not
in flight, whatever its tasks.md still says: OpenSpec's archive is the ledger it trusts.
docs/formats.md.
"""

from __future__ import annotations

import os

from storyd.core.formats.base import Adapter, Source, finding
from storyd.core.formats.common import ALL_DONE, FRESH_START, progress, text_of
from storyd.core.model import DONE, PENDING, Finding, Task, Unit

__all__ = ["ADAPTER", "OpenSpecAdapter", "archive_date", "parse", "task_number"]

ROOT = "openspec/changes"
ARCHIVE = "archive"
TASKS_NAME = "tasks.md"
_MARKS = frozenset(" \txX")
_OTHER_SHOWN = 10


def task_number(word: str) -> bool:
    """`1`, `1.1`, `2.3.1`, `4.2a` (a trailing dot allowed): an OpenSpec task number."""
    word = word.rstrip(".")
    if not word or not word[0].isdigit():
        return False
    parts = word.split(".")
    last = parts[-1]
    if last and not last[-1].isdigit() and last[:-1].isdigit():
        parts[-1] = last[:-1]  # a letter suffix, `4.2a`
    return all(p.isascii() and p.isdigit() for p in parts)


def archive_date(folder: str) -> tuple[str | None, str]:
    """`2026-01-31-add-x` -> ("2026-01-31", "add-x"); an undated name -> (None, name)."""
    head = folder[:11]
    if len(head) == 11 and head[4] == head[7] == head[10] == "-" and \
            head.replace("-", "").isdigit():  # fmt: skip
        return head[:10], folder[11:] or folder
    return None, folder


def _box(line: str) -> tuple[str, str] | None:
    """The mark and text of a line OpenSpec's pattern takes, `[-*]\\s*\\[(.)\\]\\s*(.*)`
    after any indent; also the marks it does not (for the `not-a-task-mark` note)."""
    stripped = line.lstrip()
    if stripped[:1] not in ("-", "*"):
        return None
    rest = stripped[1:].lstrip()
    if len(rest) < 3 or rest[0] != "[" or rest[2] != "]":
        return None
    return rest[1], rest[3:].strip()


def parse(text: str) -> tuple[list[Task], list[Finding]]:
    """The tasks of a tasks.md in document order, and what the file itself shows."""
    tasks: list[Task] = []
    findings: list[Finding] = []
    seen: dict[str, int] = {}
    other: list[str] = []
    heading = ""
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
            continue
        if "[" not in line or (got := _box(line)) is None:
            continue
        mark, body = got
        if mark not in _MARKS:
            if body[:1] != "(":  # `- [a](url)`: a link, no box at all
                other.append(f"`[{mark}]` line {number}")
            continue
        word = body.split(" ", 1)[0].strip("*_`")
        ident = f"#{len(tasks) + 1}"
        if task_number(word):
            wanted = word.rstrip(".")
            if wanted in seen:
                message = (f"task {wanted} appears again at line {number} (first at line "
                           f"{seen[wanted]}); both count, as OpenSpec counts every box: "
                           f"this one is {ident}")
                findings.append(finding("duplicate-task-id", "warning", message, wanted))
            else:
                seen[wanted] = number
                ident = wanted
        ticked = mark in "xX"
        tasks.append(Task(ident, "done" if ticked else "open", DONE if ticked else PENDING,
                          extra={"line": number, "description": body, "group": heading}))
    if other:
        shown = ", ".join(other[:_OTHER_SHOWN])
        message = (f"{len(other)} checkbox line(s) with another mark ({shown}): "
                   "OpenSpec counts only [ ] and [x], so it neither counts these nor reports "
                   "them open when archiving")
        findings.append(finding("not-a-task-mark", "info", message))
    return tasks, findings


def _active_changes(source: Source) -> list[str] | None:
    """The active change folders (every folder under changes/ but archive/), or None
    when the folder cannot be listed."""
    try:
        names = os.listdir(source.path(ROOT))
    except OSError:
        return None
    return sorted(n for n in names if n != ARCHIVE and not n.startswith(".")
                  and os.path.isdir(source.path(f"{ROOT}/{n}")))


class OpenSpecAdapter(Adapter):
    """openspec/changes/<id>/tasks.md and archive/<date>-<id>/tasks.md, a unit each."""

    name = "openspec"
    convention = "OpenSpec, openspec/changes/<id>/tasks.md (archive/YYYY-MM-DD-<id>/)"
    roots = (ROOT,)
    records_commits = False  # commit messages name the change and its tasks: task-named
    codes = ("archived-with-open-tasks", "done-not-archived", "duplicate-task-id", "no-tasks",
             "not-a-task-mark")

    def matches(self, relpath: str) -> bool:
        parts = relpath.split("/")
        if parts[:2] != ["openspec", "changes"] or parts[-1] != TASKS_NAME:
            return False
        if len(parts) == 4:
            return bool(parts[2]) and parts[2] != ARCHIVE and not parts[2].startswith(".")
        return len(parts) == 5 and parts[2] == ARCHIVE and bool(parts[3]) \
            and not parts[3].startswith(".")  # fmt: skip

    def load(self, source: Source, relpath: str) -> list[Unit]:
        parts = relpath.split("/")
        archived = len(parts) == 5
        folder = parts[3] if archived else parts[2]
        date, change = archive_date(folder) if archived else (None, folder)
        tasks, findings = parse(text_of(source.read(relpath, TASKS_NAME)))
        if not tasks:
            message = f"{relpath} has no task lines (`- [ ] 1.1 ...`)"
            findings.append(finding("no-tasks", "info", message))
        open_ = [t for t in tasks if t.bucket != DONE]
        labels = {"change": change, "progress": progress(tasks)}
        nxt: dict[str, object] | None = None
        if archived:
            labels["archived"] = date or "undated"
            point = ALL_DONE
            if open_:
                message = (f"change {change} is archived ({ROOT}/{ARCHIVE}/{folder}/) with "
                           f"{len(open_)} of {len(tasks)} tasks open in its tasks.md: OpenSpec "
                           "trusts the archive (archiving warned and was confirmed), so the "
                           "change is finished and not in flight; tasks.md was left as it was")
                findings.append(finding("archived-with-open-tasks", "warning", message))
        else:
            active = _active_changes(source)
            if active == [folder]:
                labels["active"] = "the only active change (/opsx:apply auto-selects it)"
            with_text = [t for t in open_ if t.extra["description"]]
            if tasks and not open_:
                point = ALL_DONE
                message = (f"every task of change {change} is ticked but the change is not "
                           f"archived: tasks.md says done, the archive does not yet; OpenSpec's "
                           f"next step is `openspec archive {change}`")
                findings.append(finding("done-not-archived", "info", message))
            elif not with_text:
                point = FRESH_START if not tasks or not any(t.done for t in tasks) else ALL_DONE
            else:
                first = with_text[0]
                nxt = {"task": first.id, "why": "the first open task in document order "
                       "(/opsx:apply takes pending tasks in order and ticks each)",
                       "status": first.status, "line": first.extra["line"],
                       "group": first.extra["group"], "change": change}
                started = any(t.bucket == DONE for t in tasks)
                point = f"task-{first.id}" if started else FRESH_START
        return [Unit("openspec", relpath, change, tuple(tasks), resume_point=point,
                     findings=tuple(findings), labels=labels, next=nxt)]


ADAPTER = OpenSpecAdapter()
