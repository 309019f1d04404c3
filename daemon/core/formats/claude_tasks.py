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

import errno
import os

from storyd.core.containment import git_dirs, resolve
from storyd.core.formats.base import Adapter, Source, finding, make_task
from storyd.core.formats.common import ALL_DONE, FRESH_START, progress_text
from storyd.core.jsonio import loads_each
from storyd.core.model import DONE, PENDING, Finding, Task, Unit, new_task

__all__ = ["ADAPTER", "MAX_TASK_BYTES", "MAX_TASK_FILES", "ROOT", "ClaudeTasksAdapter",
           "read_task_files", "task_names", "unit_of"]

ROOT = ".claude/tasks"
KEY = "tasks"
CHECKLIST = "tasks.md"  # a list's own checklist, committed beside it (haystack)
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_TYPE, _REGULAR = 0o170000, 0o100000  # stat.S_IFMT, S_IFREG (without a call)
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
Signature = tuple[int, int, int, int, int]  # Source.seen's: dev, ino, size, mtime, ctime
MAX_TASK_FILES = 2000  # a list this long is not Claude Code's; the rest are not read
MAX_TASK_BYTES = 256 * 1024  # one task's file; Claude Code's are a few hundred bytes
_DONE = frozenset(("completed",))
_PENDING = frozenset(("pending", "in_progress"))
_VOCABULARY = ("completed", "pending", "in_progress")
_BUCKET = {"completed": DONE, "pending": PENDING, "in_progress": PENDING}
_SHOWN = 20


def _id_order(ident: str) -> tuple[int, int, str]:
    """Ids in number order (`2` before `10`), other ids after them by text."""
    return (0, int(ident), "") if ident.isascii() and ident.isdigit() else (1, 0, ident)


def task_names(names: list[str]) -> list[str]:
    """The task files among a folder's names (`<id>.json`, not hidden), in id order."""
    found = sorted(names)
    hidden = 0  # `.lock`, `.highwatermark`: before every digit (unless a name has a
    while hidden < len(found) and found[hidden][:1] == ".":  # `-`: then the slow way)
        hidden += 1
    del found[:hidden]
    if _numbered("/".join(found), len(found)):
        # Claude Code's names, `<number>.json` without a leading zero: number order is
        # text order then length order (two sorts in C, no key nor test per name)
        found.sort(key=len)
        return found[:MAX_TASK_FILES]
    found = [n for n in found if n.endswith(".json") and n[:1] != "."]
    found.sort(key=lambda n: _id_order(n[:-5]))
    return found[:MAX_TASK_FILES]


def _numbered(text: str, count: int) -> bool:
    """Whether `count` names joined by `/` are each `<number>.json`, no leading zero."""
    return (text.isascii() and text.count(".") == count and text.count(".json") == count
            and "/0" not in "/" + text and "/." not in "/" + text
            and text.replace(".json", "").replace("/", "").isdigit())


def read_task_files(names: list[str], dir_fd: int, seen: dict[str, Signature | None], *,
                    prefix: str = "", limit: int = MAX_TASK_BYTES,
                    budget: int | None = None) -> list[tuple[str, bytes]]:  # fmt: skip
    """The (name, bytes) of each named file of the folder open as `dir_fd` that is a
    regular file, not a link (O_NOFOLLOW), and at most `limit` bytes; the others (a
    link, a FIFO, too large, gone since listed) are left out. Each file's signature is
    recorded in `seen` under `prefix + name` (None when left out). `budget`: the files
    stop before the one that takes their total past it."""
    opener, fstat, read, close = os.open, os.fstat, os.read, os.close
    found, total = [], 0
    for name in names:
        # O_NONBLOCK: a FIFO opens at once (then refused); a regular file's read ignores
        # it (storyd.core.regular's rule, with O_NOFOLLOW and a folder's descriptor added)
        try:
            fd = opener(name, _FILE, dir_fd=dir_fd)
        except OSError:
            seen[prefix + name] = None
            continue
        try:
            st = fstat(fd)
            size = st.st_size
            if st.st_mode & _TYPE != _REGULAR or size > limit:
                data = None
            else:  # the size fstat gave, and one byte more: a read of `limit` bytes
                # would allocate them (256 KiB: an mmap, mremap and munmap for a 400-byte
                # file, in a process whose allocator has not grown, 5x the four calls)
                data = read(fd, size + 1)
                if len(data) > size:  # it grew since fstat: read on, to the bound
                    data += read(fd, limit - size)
                    if len(data) > limit:
                        data = None
        except OSError:
            data = None
        finally:
            close(fd)
        if data is None:
            seen[prefix + name] = None
            continue
        seen[prefix + name] = (st.st_dev, st.st_ino, size, st.st_mtime_ns, st.st_ctime_ns)
        if budget is not None:
            total += len(data)
            if total > budget:
                break
        found.append((name, data))
    return found


def _ids(value: object) -> list[str]:
    """The ids of a `blockedBy` that is not a list of strings: its strings and numbers."""
    if not isinstance(value, list):
        return []
    return [str(v) for v in value if isinstance(v, str | int) and not isinstance(v, bool)]


def _owner(task: Task) -> str | None:
    """The agent team member who owns the task (`owner`), if any."""
    owner = task.extra.get("owner")
    return owner.strip() or None if isinstance(owner, str) else None


def _subject(task: Task) -> str:
    subject = task.extra.get("subject")
    return subject if isinstance(subject, str) else ""


def _ident(name: str, node: dict[str, object], findings: list[Finding]) -> str | None:
    """The task's id, when it is not a plain string (a number is read as its text)."""
    raw = node.get("id")
    if isinstance(raw, int) and not isinstance(raw, bool):
        message = (f"{name}: the id {raw} is a number, not a string; Claude Code's "
                   "task tools may not see this task")
        findings.append(finding("non-string-id", "warning", message, str(raw)))
        raw = str(raw)
    if not isinstance(raw, str) or not raw.strip():
        message = f"{name} holds a task without a string id; skipped"
        findings.append(finding("missing-task-id", "warning", message))
        return None
    return raw


def _parse(files: list[tuple[str, bytes]], findings: list[Finding], ordered: bool,
           ) -> tuple[list[Task], dict[str, list[str]], dict[str, str]]:  # fmt: skip
    """The tasks in id order (`ordered`: the files come in task_names' order), each
    task's `blockedBy` when it has any, and each task's status in lower case."""
    got: dict[str, Task] = {}
    blockers: dict[str, list[str]] = {}
    status_of: dict[str, str] = {}
    named = ordered
    bucket_of = _BUCKET.get
    for (name, _), node in zip(files, loads_each([data for _, data in files]), strict=True):
        if not isinstance(node, dict):
            message = f"{name} is not a JSON object (a torn or hand-edited write); skipped"
            findings.append(finding("torn-task-file", "warning", message))
            continue
        get = node.get
        raw = get("id")
        if type(raw) is not str or not raw or raw.isspace():
            raw = _ident(name, node, findings)
            if raw is None:
                continue
        if named and raw != name[:-5]:
            named = False
        if raw in got:
            message = f"task {raw} appears again in {name}; the later file wins"
            findings.append(finding("duplicate-task-id", "warning", message, raw))
            blockers.pop(raw, None)
        status = get("status")
        extra = {"subject": get("subject"), "owner": get("owner")}
        if type(status) is str and (bucket := bucket_of(status)) is not None:
            got[raw] = new_task(raw, status, bucket, True, None, None, extra)  # its own word
            status_of[raw] = status
        else:
            got[raw], unknown = make_task(raw, status, done=_DONE, pending=_PENDING,
                                          default="pending", extra=extra)
            status_of[raw] = got[raw].status.lower()
            if unknown is not None:
                findings.append(unknown)
        deps = get("blockedBy")
        if deps:  # Claude Code's own, a list of strings, kept as read without a call
            if type(deps) is list:
                for v in deps:
                    if type(v) is not str:
                        deps = _ids(deps)
                        break
            else:
                deps = _ids(deps)
            blockers[raw] = deps
    if named and len(got) == len(files):  # each id its file's name, the names in id order
        return list(got.values()), blockers, status_of
    return sorted(got.values(), key=lambda task: _id_order(task.id)), blockers, status_of


def _waiting(status: dict[str, str], blockers: dict[str, list[str]]) -> dict[str, list[str]]:
    """Each task's blockers that are not completed (a blocker whose file is gone was
    deleted: it blocks nothing), for the tasks that have any."""
    waits = {}
    get = status.get
    for ident, deps in blockers.items():
        early = None  # a loop, not a comprehension: no frame made per task
        for b in deps:
            if get(b, "completed") != "completed":
                if early is None:
                    early = waits[ident] = [b]
                else:
                    early.append(b)
    return waits


class _Queue:
    """One pass over the tasks in id order: the producer's queues (in progress, ready:
    pending with nothing open before it, blocked: open and waiting on a blocker), the
    count of each status word and of each owner's tasks."""

    __slots__ = ("blocked", "counts", "early", "other", "owners", "ready", "working")

    def __init__(self, tasks: list[Task], status: dict[str, str],
                 waits: dict[str, list[str]]) -> None:  # fmt: skip
        self.working: list[Task] = []
        self.ready: list[Task] = []
        self.blocked: list[Task] = []
        self.early: list[Task] = []  # completed while a blocker is not
        counts = self.counts = dict.fromkeys(_VOCABULARY, 0)
        owners: dict[str, int] = {}
        other = 0
        working, ready, owner_count = self.working.append, self.ready.append, owners.get
        for task in tasks:
            ident = task.id
            word = status[ident]
            if word in counts:
                counts[word] += 1
            else:
                other += 1
            if word == "in_progress":
                working(task)
            elif word == "pending" and ident not in waits:
                ready(task)
            if waits and ident in waits:
                (self.early if word == "completed" else self.blocked).append(task)
            owner = task.extra["owner"]  # _owner's rule, without a call per task
            if type(owner) is str and (owner := owner.strip()):
                owners[owner] = owner_count(owner, 0) + 1
        self.other = other
        self.owners = owners

    def next(self, status: dict[str, str], waits: dict[str, list[str]],
             ) -> dict[str, object] | None:  # fmt: skip
        """The producer's next task and why: the first in progress, else the first ready."""
        working, ready = self.working, self.ready
        chosen = working[0] if working else ready[0] if ready else None
        if chosen is None:
            return None
        why = ("in progress (the first by id)" if working else
               "the first pending task, by id, whose blockedBy are all completed")
        nxt: dict[str, object] = {"task": chosen.id, "why": why, "status": status[chosen.id],
                                  "subject": _subject(chosen),
                                  "ready": [t.id for t in ready[:_SHOWN]],
                                  "inProgress": [t.id for t in working[:_SHOWN]],
                                  "blocked": [{"id": t.id, "waitingFor": waits[t.id]}
                                              for t in self.blocked[:_SHOWN]]}
        owner = _owner(chosen)
        if owner is not None:
            nxt["owner"] = owner
        return nxt

    def labels(self, total: int) -> dict[str, str]:
        """progress_labels' labels, from the counts: progress, each status word's, other."""
        counts = self.counts
        labels = {"progress": progress_text(counts["completed"], total)}
        for word, n in counts.items():
            labels[word] = str(n)
        if self.other:
            labels["other"] = str(self.other)
        return labels


def unit_of(files: list[tuple[str, bytes]], state_file: str,
            findings: list[Finding] | None = None,
            checklist: tuple[str, bytes] | None = None, ordered: bool = False) -> Unit:  # fmt: skip
    """The unit of one list folder from its task files' (name, bytes), in any order
    (`ordered`: in task_names' order); `checklist` the folder's own `tasks.md` (its
    path, bytes) when it has one."""
    findings = [] if findings is None else findings
    tasks, blockers, status = _parse(files, findings, ordered)
    waits = _waiting(status, blockers) if blockers else {}
    queue = _Queue(tasks, status, waits)
    for task in queue.early:
        message = (f"task {task.id} is completed while its blocker(s) "
                   f"{', '.join(waits[task.id][:5])} are not")
        findings.append(finding("done-before-blocker", "info", message, task.id))
    if checklist is not None:
        findings.extend(_ledgers(tasks, state_file, *checklist))
    nxt = queue.next(status, waits)
    labels = queue.labels(len(tasks))
    done = queue.counts["completed"]  # Claude Code's one done status
    if tasks and done == len(tasks):
        point = ALL_DONE
    elif nxt is None:
        point = "blocked" if tasks else FRESH_START
        if tasks:
            message = "no task is in progress and every pending task waits on a blocker"
            findings.append(finding("no-next-task", "warning", message))
    elif not done and not queue.working:
        point = FRESH_START
    else:
        point = f"task-{nxt['task']}"
    labels["ready"] = str(len(queue.ready))
    if queue.owners:
        labels["owners"] = ", ".join(f"{o}: {n}" for o, n in sorted(queue.owners.items())[:_SHOWN])
    blocked = queue.blocked
    if blocked:  # the open tasks' open blockers (blockedBy): what each waits on
        waiting = [f"{t.id} on {', '.join(waits[t.id][:5])}" for t in blocked[:_SHOWN]]
        labels["waiting"] = "; ".join(waiting) + (
            f"; and {len(blocked) - _SHOWN} more" if len(blocked) > _SHOWN else "")
    return Unit("claude-tasks", state_file, KEY, tuple(tasks), resume_point=point,
                findings=tuple(findings), labels=labels, next=nxt)


def _ledgers(tasks: list[Task], state_file: str, path: str, data: bytes) -> list[Finding]:
    """A finding per task whose JSON and the list's own checklist (`tasks.md`) disagree,
    naming both and which one Claude Code trusts."""
    from storyd.core.formats.claude_checklist import disagreements

    folder = state_file.rpartition("/")[0]
    found = []
    for task, said in disagreements(tasks, data):
        status = task.status if task.known else (
            f"{task.status!r} (not a status Claude Code writes: not completed)")
        message = (f"task {task.id} is {status} in {folder}/{task.id}.json but {said} in "
                   f"{path}: Claude Code's task tools trust the JSON (TaskList reads only "
                   "it); a session told to do \"the next unchecked task\" follows the "
                   "checklist")
        found.append(finding("checklist-disagrees", "warning", message, task.id,
                             {"json": f"{folder}/{task.id}.json", "checklist": path,
                              "checklist_says": said, "json_says": task.status}))
    return found


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
    codes = ("checklist-disagrees", "done-before-blocker", "duplicate-task-id", "missing-task-id",
             "no-next-task",
             "non-string-id", "torn-task-file", "unknown-status")

    def matches(self, relpath: str) -> bool:
        folder, _, name = relpath.rpartition("/")
        return name.endswith(".json") and not name.startswith(".") and _list_folder(folder)

    def load(self, source: Source, relpath: str) -> list[Unit]:
        folder = relpath.rpartition("/")[0]
        try:
            dfd, inside = _open_folder(source.workspace, folder)
        except (OSError, ValueError):
            source.seen.setdefault(folder, None)
            return []
        try:
            st = os.fstat(dfd)  # the folder's own signature: a task file added or removed
            source.seen.setdefault(folder, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                                            st.st_ctime_ns))
            listed = os.listdir(dfd)
            names = task_names(listed)
            if not names or f"{folder}/{names[0]}" != relpath:
                return []  # the folder's unit is its first task file's
            if not inside:  # Refused: the folder leads out of the workspace or into git's
                resolve(source.workspace, folder)
            # no link followed out of the folder; Claude Code takes no lock
            prefix = folder + "/"
            files = read_task_files(names, dfd, source.seen, prefix=prefix)
            checklist = None
            if CHECKLIST in listed:  # the list's own markdown checklist (a second ledger)
                got = read_task_files([CHECKLIST], dfd, source.seen, prefix=prefix)
                checklist = (prefix + CHECKLIST, got[0][1]) if got else None
        finally:
            os.close(dfd)
        return [unit_of(files, relpath, checklist=checklist, ordered=True)]


def _open_folder(workspace: str, folder: str) -> tuple[int, bool]:
    """The list folder open, and whether it is known to be inside the workspace: opened
    from the workspace one folder at a time without following a link, it is (unless a
    linked worktree's `.git` file names a gitdir, which containment's whole rule
    judges); with a link on the way it is opened by path, for resolve to judge."""
    if not git_dirs(workspace):
        fd = os.open(workspace, _FOLDER)
        try:
            for part in folder.split("/"):
                inner = os.open(part, _FOLDER | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = inner
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise  # missing, unreadable
        else:
            return fd, True
    return os.open(os.path.join(workspace, folder), _FOLDER), False


ADAPTER = ClaudeTasksAdapter()
