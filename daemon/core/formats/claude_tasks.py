"""The `claude-tasks` format: Claude Code's task lists, one JSON file per task.

Claude Code keeps a list in `~/.claude/tasks/<session id or CLAUDE_CODE_TASK_LIST_ID>/`,
one `<id>.json` per task: `id` (a string), `subject`, `status` (`pending`, `in_progress`,
`completed`; a deleted task's file is removed), `blocks`, `blockedBy`, `owner` (an agent
team's member). Repositories commit the list as `.claude/tasks/<id>.json`: that folder,
and each list folder below it, is one unit, answered by its first task file in id order
(the others answer none; the unit depends on every file and on the folder). The next
task is the first in progress, else the first pending one, in id order, whose
`blockedBy` are all completed (a blocker whose file is gone was deleted: it blocks
nothing). A file that is not a JSON object, a task without a string id, a status Claude
Code does not write (`done`) and a task completed before its blockers are findings.
`unit_of` builds the unit from the files' bytes, so a list outside the workspace
(storyd.core.formats.claude_lists) is read by the same rules. Task files are opened
without following a link, bounded, and without a lock (Claude Code takes none). docs/formats.md.
"""

from __future__ import annotations

import os
import stat

from storyd.core.containment import resolve
from storyd.core.formats.base import Adapter, Source, finding, make_task
from storyd.core.formats.common import ALL_DONE, FRESH_START, progress_labels
from storyd.core.jsonio import JSONError, loads
from storyd.core.model import DONE, Finding, Task, Unit
from storyd.core.regular import FileTooLarge, NotRegularFile

__all__ = ["ADAPTER", "MAX_TASK_BYTES", "MAX_TASK_FILES", "ROOT", "ClaudeTasksAdapter",
           "read_task_file", "task_names", "unit_of"]

ROOT = ".claude/tasks"
KEY = "tasks"
MAX_TASK_FILES = 2000  # a list this long is not Claude Code's; the rest are not read
MAX_TASK_BYTES = 256 * 1024  # one task's file; Claude Code's are a few hundred bytes
_DONE = frozenset(("completed",))
_PENDING = frozenset(("pending", "in_progress"))
_VOCABULARY = ("completed", "pending", "in_progress")
_SHOWN = 20


def _id_order(ident: str) -> tuple[int, int, str]:
    """Ids in number order (`2` before `10`), other ids after them by text."""
    return (0, int(ident), "") if ident.isascii() and ident.isdigit() else (1, 0, ident)


def task_names(names: list[str]) -> list[str]:
    """The task files among a folder's names (`<id>.json`, not hidden), in id order."""
    found = [n for n in names if n.endswith(".json") and not n.startswith(".")]
    found.sort(key=lambda n: _id_order(n[:-5]))
    return found[:MAX_TASK_FILES]


def read_task_file(path: str, *, dir_fd: int | None = None,
                   limit: int = MAX_TASK_BYTES) -> tuple[bytes, os.stat_result]:  # fmt: skip
    """A task file's bytes and status: a regular file, not a link (O_NOFOLLOW), at most
    `limit` bytes (OSError otherwise); `path` relative to the folder open as `dir_fd`."""
    # O_NONBLOCK: a FIFO opens at once (then refused); a regular file's read ignores it
    # (storyd.core.regular's rule, with O_NOFOLLOW and a folder's descriptor added)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY,
                 dir_fd=dir_fd)  # fmt: skip
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(path, st.st_mode)
        if st.st_size > limit:
            raise FileTooLarge(path, limit)
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise FileTooLarge(path, limit)
    return data, st


def _ids(value: object) -> list[str]:
    if not isinstance(value, list):
        return []
    return [str(v) for v in value if isinstance(v, str | int) and not isinstance(v, bool)]


class _Entry:
    __slots__ = ("blocked_by", "id", "owner", "status", "subject")

    def __init__(self, node: dict[str, object], ident: str, status: str) -> None:
        self.id = ident
        self.status = status
        self.blocked_by = _ids(node.get("blockedBy"))
        owner = node.get("owner")
        self.owner = owner.strip() if isinstance(owner, str) and owner.strip() else None
        subject = node.get("subject")
        self.subject = subject if isinstance(subject, str) else ""


def _parse(files: list[tuple[str, bytes]], findings: list[Finding]) -> list[tuple[Task, _Entry]]:
    got: dict[str, tuple[Task, _Entry]] = {}
    for name, data in files:
        try:
            node = loads(data)
        except (JSONError, ValueError, RecursionError):
            node = None
        if not isinstance(node, dict):
            message = f"{name} is not a JSON object (a torn or hand-edited write); skipped"
            findings.append(finding("torn-task-file", "warning", message))
            continue
        raw = node.get("id")
        if isinstance(raw, int) and not isinstance(raw, bool):
            message = (f"{name}: the id {raw} is a number, not a string; Claude Code's "
                       "task tools may not see this task")
            findings.append(finding("non-string-id", "warning", message, str(raw)))
            raw = str(raw)
        if not isinstance(raw, str) or not raw.strip():
            message = f"{name} holds a task without a string id; skipped"
            findings.append(finding("missing-task-id", "warning", message))
            continue
        if raw in got:
            message = f"task {raw} appears again in {name}; the later file wins"
            findings.append(finding("duplicate-task-id", "warning", message, raw))
        task, unknown = make_task(raw, node.get("status"), done=_DONE, pending=_PENDING,
                                  default="pending", extra={"subject": node.get("subject"),
                                                            "owner": node.get("owner")})
        if unknown is not None:
            findings.append(unknown)
        got[raw] = (task, _Entry(node, raw, task.status.lower()))
    return sorted(got.values(), key=lambda pair: _id_order(pair[0].id))


def _open_blockers(entry: _Entry, status: dict[str, str]) -> list[str]:
    """The entry's blockers not completed (a blocker whose file is gone blocks nothing)."""
    return [b for b in entry.blocked_by if status.get(b, "completed") != "completed"]


def _next(entries: list[_Entry], status: dict[str, str]) -> dict[str, object] | None:
    working = [e for e in entries if e.status == "in_progress"]

    def free(entry: _Entry) -> bool:
        return not _open_blockers(entry, status)

    ready = [e for e in entries if e.status == "pending" and free(e)]
    chosen = working[0] if working else ready[0] if ready else None
    if chosen is None:
        return None
    why = ("in progress (the first by id)" if working else
           "the first pending task, by id, whose blockedBy are all completed")
    nxt: dict[str, object] = {"task": chosen.id, "why": why, "status": chosen.status,
                              "subject": chosen.subject,
                              "ready": [e.id for e in ready[:_SHOWN]],
                              "inProgress": [e.id for e in working[:_SHOWN]]}
    if chosen.owner is not None:
        nxt["owner"] = chosen.owner
    return nxt


def unit_of(files: list[tuple[str, bytes]], state_file: str,
            findings: list[Finding] | None = None) -> Unit:  # fmt: skip
    """The unit of one list folder from its task files' (name, bytes), in any order."""
    findings = [] if findings is None else findings
    pairs = _parse(files, findings)
    tasks = [t for t, _ in pairs]
    entries = [e for _, e in pairs]
    status = {e.id: e.status for e in entries}
    for entry in entries:
        early = _open_blockers(entry, status)
        if entry.status == "completed" and early:
            message = (f"task {entry.id} is completed while its blocker(s) "
                       f"{', '.join(early[:5])} are not")
            findings.append(finding("done-before-blocker", "info", message, entry.id))
    nxt = _next(entries, status)
    if tasks and all(t.bucket == DONE for t in tasks):
        point = ALL_DONE
    elif nxt is None:
        point = "blocked" if tasks else FRESH_START
        if tasks:
            message = "no task is in progress and every pending task waits on a blocker"
            findings.append(finding("no-next-task", "warning", message))
    elif not any(t.bucket == DONE for t in tasks) and not nxt["inProgress"]:
        point = FRESH_START
    else:
        point = f"task-{nxt['task']}"
    labels = progress_labels(tasks, _VOCABULARY)
    owners: dict[str, int] = {}
    for entry in entries:
        if entry.owner is not None:
            owners[entry.owner] = owners.get(entry.owner, 0) + 1
    if owners:
        labels["owners"] = ", ".join(f"{o}: {n}" for o, n in sorted(owners.items())[:_SHOWN])
    waiting = [f"{e.id} on {', '.join(early[:5])}" for e in entries
               if e.status != "completed" and (early := _open_blockers(e, status))]
    if waiting:  # the open tasks' open blockers (blockedBy): what each waits on
        labels["waiting"] = "; ".join(waiting[:_SHOWN]) + (
            f"; and {len(waiting) - _SHOWN} more" if len(waiting) > _SHOWN else "")
    return Unit("claude-tasks", state_file, KEY, tuple(tasks), resume_point=point,
                findings=tuple(findings), labels=labels, next=nxt)


def _list_folder(relpath: str) -> bool:
    """`.claude/tasks` itself, or a list folder right below it (a name without a dot)."""
    if relpath == ROOT:
        return True
    parent, _, name = relpath.rpartition("/")
    return parent == ROOT and bool(name) and "." not in name


class ClaudeTasksAdapter(Adapter):
    """.claude/tasks/ and its list folders: one unit per folder, answered by the folder's
    first task file (in id order); the other task files answer no unit of their own."""

    name = "claude-tasks"
    convention = "Claude Code task lists, .claude/tasks/<id>.json"
    roots = (ROOT,)
    ordered = False  # ids, not the order work is done in
    records_commits = False
    codes = ("done-before-blocker", "duplicate-task-id", "missing-task-id", "no-next-task",
             "non-string-id", "torn-task-file", "unknown-status")

    def matches(self, relpath: str) -> bool:
        folder, _, name = relpath.rpartition("/")
        return name.endswith(".json") and not name.startswith(".") and _list_folder(folder)

    def load(self, source: Source, relpath: str) -> list[Unit]:
        folder = relpath.rpartition("/")[0]
        source.exists(folder)  # the folder's own signature: a task file added or removed
        try:
            names = task_names(os.listdir(source.path(folder)))
        except OSError:
            names = []
        if not names or f"{folder}/{names[0]}" != relpath:
            return []  # the folder's unit is its first task file's
        resolve(source.workspace, folder)  # Refused: the folder leads out of the workspace
        files = []
        for name in names:
            rel = f"{folder}/{name}"
            try:  # no link followed out of the folder; Claude Code takes no lock
                data, st = read_task_file(source.path(rel))
            except OSError:
                source.seen[rel] = None
                continue  # a link, a FIFO, too large, or gone since listed
            source.seen[rel] = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            files.append((name, data))
        return [unit_of(files, relpath)]


ADAPTER = ClaudeTasksAdapter()
