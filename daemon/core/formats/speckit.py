"""The `spec-kit` format: GitHub spec-kit's `specs/<NNN-feature>/tasks.md`.

Tasks are the checkbox lines whose box holds a space, `x` or `X` and whose first word
is a task id (`T001`, `T007a`, `T-XIAO-1`): `- [ ] T001 [P] [US1] Description`.
Done is `[x]`/`[X]`; the legend `- [P] tasks = ...`, `- [Story]`, link bullets and
acceptance checkboxes without an id are not tasks; text wrapped onto following lines
belongs to its task. The next task is the first unticked one in document order, as
`/implement` proceeds phase by phase (templates/commands/implement.md). Every feature
folder is a unit; the active one is labelled (`active_feature`). docs/formats.md.
"""

from __future__ import annotations

import os

from storyd.core.errors import StorydError
from storyd.core.formats.base import Adapter, Source, finding
from storyd.core.formats.checklist import boxes, repeated, struck_or_moved, token
from storyd.core.formats.common import progress, resume_point, text_of
from storyd.core.model import DONE, PENDING, Finding, Task, Unit

__all__ = ["ADAPTER", "SpecKitAdapter", "active_feature", "is_task_id"]

TASKS_NAME = "tasks.md"
ROOT = "specs"
_TICKED = frozenset("xX")
NEWER_CHECKED = 16  # newer feature folders read to find the newest with open tasks
_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")


def is_task_id(word: str) -> bool:
    """`T001`, `T007a`, `T-XIAO-1`: a `T`, then letters, digits and dashes, one digit at least."""
    if word[1:].isdigit() and word[:1] == "T":
        return True  # T001, the usual case
    return (
        len(word) >= 2
        and word[0] == "T"
        and (word[1].isdigit() or word[1] == "-")
        and set(word) <= _ID_CHARS
        and any(c.isdigit() for c in word)
    )


def _feature_number(name: str) -> str:
    head, _, _ = name.partition("-")
    return head if head.isdigit() else ""


def _branch(source: Source) -> str | None:
    """The checked-out branch from .git/HEAD (a plain repository; worktrees give None)."""
    try:
        head = source.read(".git/HEAD", git=True).decode("utf-8", "replace").strip()
    except Exception:
        return None
    prefix = "ref: refs/heads/"
    return head[len(prefix) :] if head.startswith(prefix) else None


def active_feature(source: Source) -> tuple[str, str] | None:
    """The active feature folder's name and how it was found: $SPECIFY_FEATURE_DIRECTORY,
    then `.specify/feature.json`'s `feature_directory`, then the branch's `NNN-` prefix
    (scripts/bash/common.sh, newer and older spec-kit). None: no rule names one."""
    named = os.environ.get("SPECIFY_FEATURE_DIRECTORY", "").strip()
    if named:
        return os.path.basename(named.rstrip("/")), "SPECIFY_FEATURE_DIRECTORY"
    if source.exists(".specify/feature.json"):
        from storyd.core.jsonio import JSONError, loads

        try:
            value = loads(source.read(".specify/feature.json"))
        except (JSONError, Exception):
            value = None
        folder = value.get("feature_directory") if isinstance(value, dict) else None
        if isinstance(folder, str) and folder.strip():
            return os.path.basename(folder.strip().rstrip("/")), ".specify/feature.json"
    branch = _branch(source)
    number = _feature_number(branch) if branch else ""
    if number:
        return f"{number}-*", f"branch {branch}"
    return None


def _newest_open(source: Source, name: str) -> bool:
    """Whether no feature folder numbered above `name` has an unticked task (checked
    newest first, at most NEWER_CHECKED of them: beyond that, no label rather than a
    read of every folder for every folder)."""
    number = _feature_number(name)
    try:
        names = os.listdir(source.path(ROOT))
    except OSError:
        return False
    if not number:
        return False
    newer = sorted((n for n in names if _feature_number(n) and int(_feature_number(n)) >
                    int(number)), key=lambda n: int(_feature_number(n)), reverse=True)
    if len(newer) > NEWER_CHECKED:
        return False
    for other in newer:
        relpath = f"{ROOT}/{other}/{TASKS_NAME}"
        if not source.exists(relpath):
            continue
        try:
            text = text_of(source.read(relpath, TASKS_NAME))
        except StorydError:
            continue
        if any(b.mark == " " and is_task_id(token(b.text)[0]) for b in boxes(text)):
            return False
    return True


def _is_active(name: str, active: tuple[str, str] | None) -> str | None:
    if active is None:
        return None
    wanted, how = active
    if wanted.endswith("-*"):
        return how if _feature_number(name) == wanted[:-2] else None
    return how if name == wanted else None


def parse(text: str) -> tuple[list[Task], list[Finding]]:
    """The tasks of a tasks.md in document order, and what the file itself shows."""
    tasks: list[Task] = []
    findings: list[Finding] = []
    seen: dict[str, int] = {}
    for box in boxes(text):
        if box.mark not in _TICKED and box.mark != " ":
            continue  # `- [P] tasks = ...`, `- [-]`: not a spec-kit task
        word, rest = token(box.text)
        if not is_task_id(word):
            continue
        ticked = box.mark in _TICKED
        if word in seen:
            message = repeated("task id", word, box.line, seen[word])
            findings.append(finding("duplicate-task-id", "warning", message, word))
            continue
        seen[word] = box.line
        extra: dict[str, object] = {"line": box.line, "description": rest,
                                    "phase": box.heading, "parallel": "[P]" in rest[:12]}
        tasks.append(Task(word, "done" if ticked else "open", DONE if ticked else PENDING,
                          extra=extra))
        why = struck_or_moved(rest) if ticked else None
        if why is not None:
            message = f"task {word} is ticked but {why} (line {box.line}): not implemented work"
            findings.append(finding("ticked-not-done", "info", message, word))
    return tasks, findings


class SpecKitAdapter(Adapter):
    """specs/<NNN-feature>/tasks.md, one unit per feature folder."""

    name = "spec-kit"
    convention = "GitHub spec-kit, specs/<NNN-feature>/tasks.md"
    roots = (ROOT,)
    records_commits = False  # commit messages name tasks: task-named
    codes = ("duplicate-task-id", "no-tasks", "ticked-not-done")

    def matches(self, relpath: str) -> bool:
        parts = relpath.split("/")
        return (
            len(parts) == 3
            and parts[0] == ROOT
            and parts[2] == TASKS_NAME
            and bool(parts[1])
            and not parts[1].startswith((".", "_"))
        )

    def load(self, source: Source, relpath: str) -> list[Unit]:
        key = relpath.split("/")[1]
        tasks, findings = parse(text_of(source.read(relpath, TASKS_NAME)))
        if not tasks:
            message = f"{relpath} has no task lines (`- [ ] T001 ...`)"
            findings.append(finding("no-tasks", "info", message))
        labels = {"feature": key, "progress": progress(tasks)}
        nxt = next((t for t in tasks if t.bucket != DONE), None)
        active = active_feature(source)
        how = _is_active(key, active)
        if how is None and active is None and nxt is not None and _newest_open(source, key):
            how = "the newest feature folder with open tasks"
        if how is not None:
            labels["active"] = how
        pointer = None if nxt is None else f"task-{nxt.id}"
        started = any(t.bucket == DONE for t in tasks)
        return [
            Unit(
                "spec-kit",
                relpath,
                key,
                tuple(tasks),
                resume_point=resume_point(tasks, pointer, started=started),
                findings=tuple(findings),
                labels=labels,
                next=None if nxt is None else {
                    "task": nxt.id,
                    "why": "the first unticked task in document order (/implement goes "
                    "phase by phase, in order)",
                    "line": nxt.extra["line"],
                    "phase": nxt.extra["phase"],
                    "parallel": nxt.extra["parallel"],
                },
            )
        ]


ADAPTER = SpecKitAdapter()
