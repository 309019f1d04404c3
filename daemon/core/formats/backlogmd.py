"""The `backlog-md` format: Backlog.md's `backlog/tasks/<prefix>-<n> - <Title>.md` files
and `backlog/config.yml`.

The unit is the backlog (key `backlog`, state file `backlog/config.yml`); every task
file under `backlog/tasks/` (nested folders too) is a task, its YAML front matter read
by storyd.core.formats.yamlsubset. Statuses come from the config's `statuses`; done is
the LAST of them (`getTerminalStatus`), compared trimmed and case-insensitively. There
is no `next` command: an agent resumes a task in a started status (neither the default
nor the terminal one), else picks the first To-Do task whose `dependencies` are all done,
in board order (`sortByOrdinalAndPriority`: `ordinal` first, then priority high >
medium > low > none, then the id's numbers). Tasks in `backlog/completed/` are done
(dependencies on them are met). docs/formats.md.
"""

from __future__ import annotations

import os

from storyd.core.errors import DataError, StorydError
from storyd.core.formats.base import Adapter, Source, finding, make_task
from storyd.core.formats.checklist import boxes
from storyd.core.formats.common import ALL_DONE, FRESH_START, as_int, one_line, progress_labels
from storyd.core.formats.common import text_of as _text_of
from storyd.core.formats.plainread import PlainReader
from storyd.core.formats.yamlsubset import YamlError, front_matter, parse
from storyd.core.model import DONE, Finding, Task, Unit

__all__ = ["ADAPTER", "BacklogAdapter", "board_order", "id_key"]

CONFIG = "backlog/config.yml"
TASKS = "backlog/tasks"
COMPLETED = "backlog/completed"
KEY = "backlog"
MAX_TASK_FILES = 5000  # a backlog this size is read in about a second; beyond, a note
DEFAULT_STATUSES = ("To Do", "In Progress", "Done")
_CONFIG_KEYS = ("statuses", "default_status", "project_name", "task_prefix")
_PRIORITY = {"high": 0, "medium": 1, "low": 2}
_SHOWN = 20


def id_key(text: str) -> tuple[str, tuple[int, ...]] | None:
    """An id as Backlog.md compares it: lower-cased prefix and its numbers, zero padding
    ignored (`TASK-038` and `task-38`, `back-355.02` and `BACK-355.2` are one id). None
    when it holds no number."""
    prefix, _, number = text.strip().rpartition("-")
    parts = number.split(".")
    if not all(p.isascii() and p.isdigit() for p in parts):
        return None
    return prefix.lower(), tuple(int(p) for p in parts)


def _file_id(name: str) -> str:
    """The id a task file's name gives: `task-12 - Title.md` -> `task-12`."""
    stem = name[:-3] if name.endswith(".md") else name
    head = stem.split(" - ", 1)[0].strip()
    return head


class _Entry:
    __slots__ = ("deps", "id", "key", "ordinal", "path", "priority", "status", "task")

    def __init__(self, task: Task, path: str, fields: dict[str, object]) -> None:
        self.task = task
        self.id = task.id
        self.key = id_key(task.id)
        self.path = path
        self.status = task.status.lower()
        deps = fields.get("dependencies")
        self.deps = [d for d in deps if d.strip()] if isinstance(deps, list) else []
        self.ordinal = as_int(fields.get("ordinal"))
        priority = fields.get("priority")
        self.priority = priority.strip().lower() if isinstance(priority, str) else ""


def board_order(entry: _Entry) -> tuple[int, int, int, tuple[int, ...], str]:
    """sortByOrdinalAndPriority: tasks with an ordinal first (ascending), then by
    priority (high, medium, low, none), then the id's numbers."""
    ordinal = entry.ordinal
    numbers = entry.key[1] if entry.key is not None else ()
    return (0 if ordinal is not None else 1, ordinal or 0, _PRIORITY.get(entry.priority, 3),
            numbers, entry.id)


def _criteria(body: str) -> tuple[int, int]:
    """Checked and unchecked acceptance criteria (`<!-- AC:BEGIN -->` ... `AC:END`, else
    the `## Acceptance Criteria` section)."""
    start = body.find("<!-- AC:BEGIN -->")
    if start >= 0:
        end = body.find("<!-- AC:END -->", start)
        section = body[start : end if end >= 0 else len(body)]
    else:
        at = body.find("## Acceptance Criteria")
        if at < 0:
            return 0, 0
        rest = body[at + 22 :]
        cut = rest.find("\n## ")
        section = rest if cut < 0 else rest[:cut]
    marks = [b.mark for b in boxes(section)]
    checked = sum(1 for m in marks if m in "xX")
    return checked, sum(1 for m in marks if m == " ")


class _Config:
    """What `backlog/config.yml` says: the statuses, the default, the terminal one."""

    def __init__(self, reader: PlainReader, relpath: str) -> None:
        text = _text_of(reader.read(relpath, "config.yml"))
        try:
            fields = parse(text)
        except YamlError as exc:
            msg = (f"{relpath}: {exc} (storyd reads the YAML Backlog.md writes: scalars, "
                   "quoted strings, inline and block lists)")
            raise DataError(msg) from None
        if not any(k in fields for k in _CONFIG_KEYS):
            msg = (f"{relpath}: not a Backlog.md config: it has none of "
                   f"{', '.join(_CONFIG_KEYS)}")
            raise DataError(msg)
        statuses = fields.get("statuses")
        if isinstance(statuses, list) and [s for s in statuses if s.strip()]:
            self.statuses = tuple(s.strip() for s in statuses if s.strip())
        else:
            self.statuses = DEFAULT_STATUSES
        default = fields.get("default_status")
        self.default = default.strip() if isinstance(default, str) and default.strip() \
            else self.statuses[0]  # fmt: skip
        self.terminal = self.statuses[-1]
        self.lowered = [s.lower() for s in self.statuses]


def _task(reader: PlainReader, relpath: str, config: _Config,
          findings: list[Finding]) -> tuple[Task, dict[str, object]] | str:  # fmt: skip
    """One task file's task and front matter, else why it is none: `note` (no front
    matter: a readme, notes) or `refused` (front matter outside the subset: a finding)."""
    text = _text_of(reader.read(relpath, os.path.basename(relpath)))
    try:
        found = front_matter(text)
    except YamlError as exc:
        message = (f"{relpath}: front matter {exc}; the task is not counted (storyd reads "
                   "the YAML Backlog.md writes: scalars, quoted strings, inline and block lists)")
        findings.append(finding("front-matter-unreadable", "warning", message))
        return "refused"
    if found is None:
        return "note"
    fields, body_line = found
    raw_id = fields.get("id")
    ident = raw_id.strip() if isinstance(raw_id, str) and raw_id.strip() \
        else _file_id(os.path.basename(relpath))  # fmt: skip
    del body_line  # the body is what follows the closing `---` line
    body = text[text.find("\n---", 3) + 4 :]
    checked, unchecked = _criteria(body)
    title = fields.get("title")
    done = frozenset((config.terminal.lower(),))
    pending = frozenset(config.lowered) - done
    extra: dict[str, object] = {"title": title if isinstance(title, str) else "",
                                "file": relpath, "criteria": f"{checked}/{checked + unchecked}"}
    task, unknown = make_task(ident, fields.get("status"), done=done, pending=pending,
                              default=config.default, completed_at=fields.get("updated_date"),
                              extra=extra)
    if unknown is not None:
        findings.append(unknown)
    if task.bucket == DONE and unchecked:
        message = (f"task {ident} is {task.status!r} (Backlog.md's terminal status) but "
                   f"{unchecked} of {checked + unchecked} acceptance criteria are unchecked in "
                   f"{relpath}: the finalization guide checks them before Done; the board "
                   "trusts the status")
        findings.append(finding("done-with-open-criteria", "warning", message, ident))
    return task, dict(fields)


def _markdown(workspace: str, root: str) -> list[str]:
    """Every `.md` file below `root` as base.walk lists it (folders named `.*` skipped, a
    link to a folder not entered), sorted: one scandir per folder, with no os.walk and
    relpath per folder (most of a small backlog's listing cost)."""
    found: list[str] = []
    folders = [root]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(os.path.join(workspace, folder)) as listing:
                for entry in listing:
                    rel = f"{folder}/{entry.name}"
                    try:
                        is_dir = entry.is_dir()
                    except OSError:
                        is_dir = False
                    if not is_dir:
                        if rel.endswith(".md"):
                            found.append(rel)
                    elif not entry.name.startswith(".") and not entry.is_symlink():
                        folders.append(rel)
        except OSError:
            continue
    return sorted(found)


def _task_files(source: Source) -> list[str]:
    return _markdown(source.workspace, TASKS)


def _completed_ids(source: Source) -> set[tuple[str, tuple[int, ...]]]:
    """The ids of the tasks moved to `backlog/completed/` (from their names: done)."""
    names = _markdown(source.workspace, COMPLETED)
    keys = (id_key(_file_id(os.path.basename(n))) for n in names)
    return {k for k in keys if k is not None}


class _Resolver:
    """Dependency ids to tasks: the same prefix and numbers, else the numbers alone when
    one task has them (`task-24.1` in a project whose prefix became `back`)."""

    def __init__(self, entries: list[_Entry]) -> None:
        self.exact: dict[tuple[str, tuple[int, ...]], _Entry] = {}
        by_number: dict[tuple[int, ...], list[_Entry]] = {}
        for entry in entries:
            if entry.key is not None:
                self.exact.setdefault(entry.key, entry)
                by_number.setdefault(entry.key[1], []).append(entry)
        self.numbers = {n: e[0] for n, e in by_number.items() if len(e) == 1}

    def find(self, dep: str) -> _Entry | None:
        key = id_key(dep)
        if key is None:
            return None
        return self.exact.get(key) or self.numbers.get(key[1])


class BacklogAdapter(Adapter):
    """backlog/config.yml and backlog/tasks/**: one unit, the backlog."""

    name = "backlog-md"
    convention = "Backlog.md, backlog/tasks/task-<n> - <title>.md with backlog/config.yml"
    roots = ("backlog",)
    ordered = False  # files sort by name; the board sorts by ordinal and priority
    records_commits = False  # commit messages name tasks: task-named
    codes = ("done-with-open-criteria", "duplicate-task-id", "front-matter-unreadable",
             "future-dependency", "no-next-task", "not-a-task-file", "task-files-capped",
             "terminal-status", "unknown-dependency", "unknown-status")

    def matches(self, relpath: str) -> bool:
        return relpath == CONFIG

    def owner(self, relpath: str) -> str | None:
        if relpath == CONFIG or relpath.startswith((TASKS + "/", COMPLETED + "/")):
            return CONFIG
        return None

    def load(self, source: Source, relpath: str) -> list[Unit]:
        reader = PlainReader(source)  # storyd never writes Backlog.md's files
        config = _Config(reader, relpath)
        findings: list[Finding] = []
        files = _task_files(source)
        if len(files) > MAX_TASK_FILES:
            message = (f"{len(files)} files under {TASKS}/: the first {MAX_TASK_FILES} "
                       "(by name) are read")
            findings.append(finding("task-files-capped", "info", message))
            files = files[:MAX_TASK_FILES]
        entries: list[_Entry] = []
        seen: dict[str, str] = {}
        plain: list[str] = []
        for path in files:
            try:
                got = _task(reader, path, config, findings)
            except StorydError as exc:  # gone or refused since the walk: not counted
                message = f"{path}: {one_line(exc.message)}; the task is not counted"
                findings.append(finding("front-matter-unreadable", "warning", message))
                continue
            if isinstance(got, str):
                if got == "note":
                    plain.append(path)
                continue
            task, fields = got
            folded = task.id.lower()
            if folded in seen:
                message = (f"task id {task.id} in {path} is also {seen[folded]}'s; "
                           "the later file is not counted")
                findings.append(finding("duplicate-task-id", "warning", message, task.id))
                continue
            seen[folded] = path
            entries.append(_Entry(task, path, fields))
        if plain:
            shown = ", ".join(os.path.basename(p) for p in plain[:5])
            message = (f"{len(plain)} markdown file(s) under {TASKS}/ have no front matter "
                       f"({shown}): notes, not tasks")
            findings.append(finding("not-a-task-file", "info", message))
        findings.extend(_terminal_note(config, entries))
        entries.sort(key=board_order)
        return [_unit(relpath, config, entries, _completed_ids(source), findings)]


def _terminal_note(config: _Config, entries: list[_Entry]) -> list[Finding]:
    """The config's last status is not `Done` but some tasks say `Done` (panic's
    `[To Do, In Progress, Done, Abandoned, Thought Bubbles]`)."""
    if config.terminal.lower() == "done":
        return []
    named = [e.id for e in entries if e.status == "done"]
    if not named:
        return []
    message = (f"{CONFIG}'s statuses end with {config.terminal!r}: Backlog.md's terminal "
               f"status, so the {len(named)} task(s) in 'Done' ({', '.join(named[:5])}) "
               "count as not done")
    return [finding("terminal-status", "info", message)]


Key = tuple[str, tuple[int, ...]]


def _unit(relpath: str, config: _Config, entries: list[_Entry], completed: set[Key],
          findings: list[Finding]) -> Unit:  # fmt: skip
    resolver = _Resolver(entries)
    terminal = config.terminal.lower()
    default = config.default.lower()
    waiting: dict[str, list[str]] = {}
    for entry in entries:
        if entry.task.bucket == DONE:
            continue
        open_deps = []
        for dep in entry.deps:
            target = resolver.find(dep)
            key = id_key(dep)
            if target is None:
                if key is not None and (key in completed or any(
                        k[1] == key[1] for k in completed)):
                    continue  # moved to backlog/completed/: done
                message = f"task {entry.id} depends on {dep}, which no task file holds"
                findings.append(finding("unknown-dependency", "warning", message, entry.id))
                open_deps.append(dep)
                continue
            if target.task.bucket != DONE:
                open_deps.append(target.id)
            if (entry.key and target.key and target.key[0] == entry.key[0]
                    and target.key[1] > entry.key[1]):
                message = (f"task {entry.id} depends on the later task {target.id} "
                           "(Backlog.md: never reference future tasks)")
                findings.append(finding("future-dependency", "info", message, entry.id))
        waiting[entry.id] = open_deps
    started = [e for e in entries if e.task.bucket != DONE and e.task.known
               and e.status not in (default, terminal)]
    ready = [e for e in entries if e.status == default and e.task.bucket != DONE
             and not waiting.get(e.id)]
    tasks = tuple(e.task for e in entries)
    nxt: dict[str, object] | None = None
    if started:
        first = started[0]
        nxt = {"task": first.id, "why": f"in progress ({first.task.status}): resumed before "
               "any To-Do task is picked up, in board order", "status": first.task.status}
    elif ready:
        first = ready[0]
        nxt = {"task": first.id, "why": f"the first {config.default!r} task whose "
               "dependencies are all done, in board order (ordinal, priority, id)",
               "status": first.task.status}
    if nxt is not None:
        nxt.update({"priority": first.priority or None, "ordinal": first.ordinal,
                    "dependencies": first.deps, "file": first.path,
                    "ready": [e.id for e in ready[:_SHOWN]],
                    "inProgress": [e.id for e in started[:_SHOWN]],
                    "blocked": [{"id": e.id, "waitingFor": waiting[e.id]}
                                for e in entries if waiting.get(e.id)][:_SHOWN]})
    if tasks and all(t.bucket == DONE for t in tasks):
        point = ALL_DONE
    elif nxt is None:
        point = "blocked" if any(waiting.values()) else FRESH_START
    elif not started and not any(t.bucket == DONE for t in tasks):
        point = FRESH_START
    else:
        point = f"task-{nxt['task']}"
    if point == "blocked":
        message = ("no task is in progress and every To-Do task waits on a dependency "
                   "that is not done")
        findings.append(finding("no-next-task", "warning", message))
    labels = progress_labels(tasks, [s.lower() for s in config.statuses])
    labels["ready"] = str(len(ready))
    labels["terminal"] = config.terminal
    return Unit("backlog-md", relpath, KEY, tasks, resume_point=point,
                findings=tuple(findings), labels=labels, next=nxt)


ADAPTER = BacklogAdapter()
