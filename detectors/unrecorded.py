"""unrecorded-commit: git has work that the state file does not record.

Two shapes of "crash after write, before state update" (seed 004) and "the sub-agent did
not update state" (seed 002), found in a bounded scan of the tip's recent commits: those
since its merge-base with the default branch, else the last `scan_depth`.

    unrecorded             warning  a commit's message names a task that is not DONE,
                                    such as TASK-0049-0013-004
    in-progress-committed  warning  an in_progress task (with `started_at` and
                                    `files_created`/`files_modified`, as issue-plan
                                    records them) has a commit after its start that
                                    touches its files

Only ids with a letter, a digit and at least `min_id_length` (default 8) characters are
looked for in messages: `1` or `step-3` would match far too much. The newest matching
commit is reported, with a fixed-length sha so the message is stable.
Options: `branch`, `default_branch` (default origin/HEAD, else main, else master),
`scan_depth` (default 200), `min_id_length` (default 8).
"""

from __future__ import annotations

import os

from storyd.core.isotime import parse_epoch
from storyd.core.model import Finding, Task, Unit
from storyd.core.words import is_run
from storyd.detectors import Context
from storyd.detectors.codes import CODES
from storyd.detectors.common import format_says, git_failed, int_option, short, str_option, tip_name
from storyd.detectors.gitview import Commit, GitError, GitView

__all__ = ["DETECTOR", "UnrecordedDetector", "searchable"]

NAME = "unrecorded-commit"
DEFAULT_SCAN_DEPTH = 200
DEFAULT_MIN_ID_LENGTH = 8
_SUBJECT = 72
_SHOWN_FILES = 3


def searchable(task_id: str, min_length: int = DEFAULT_MIN_ID_LENGTH) -> bool:
    """Whether a task id is distinctive enough to look for in commit messages."""
    return (
        len(task_id) >= min_length
        and any(c.isalpha() for c in task_id)
        and any(c.isdigit() for c in task_id)
    )


class _Scope:
    """One check's scan: the tip, its recent commits' range and the depth bound."""

    __slots__ = ("base", "depth", "git", "tip", "tip_sha")

    def __init__(self, git: GitView, tip: str, tip_sha: str, base: str | None, depth: int) -> None:
        self.git = git
        self.tip = tip
        self.tip_sha = tip_sha
        self.base = base
        self.depth = depth

    def commits(self, paths: tuple[str, ...] = ()) -> list[Commit]:
        """The scanned commits, newest first (only those touching `paths`, if given)."""
        return self.git.commits(self.tip_sha, self.base, self.depth, paths)


class UnrecordedDetector:
    """Finds committed work the state file has not caught up with."""

    name = NAME
    codes = CODES[NAME]  # every finding code it raises

    def prepare(self, unit: Unit, context: Context) -> None:
        """Start the scan's `git log` that `check` will read for the ids it looks for
        (detectors/runner.py's prepare step: it runs beside commit-in-history's git)."""
        if context.git is None or all(t.done for t in unit.tasks):
            return
        if not format_says(unit.format, "records_commits") or not _pending(unit, context):
            return
        scope = self._scope(unit, context, context.git)
        if scope is not None:
            context.git.prefetch_commits(scope.tip_sha, scope.base, scope.depth)

    def check(self, unit: Unit, context: Context) -> list[Finding]:
        """Findings for pending tasks that git shows as (partly) done."""
        if context.git is None or all(t.done for t in unit.tasks):
            return []
        if not format_says(unit.format, "records_commits"):
            return []  # its task ids in messages are task-named's (detectors/mentions.py)
        try:
            scope = self._scope(unit, context, context.git)
            if scope is None:
                return []
            return _named(unit, context, scope) + _in_progress(unit, context, scope)
        except GitError as exc:
            return [git_failed(NAME, exc)]

    @staticmethod
    def _scope(unit: Unit, context: Context, git: GitView) -> _Scope | None:
        tip = tip_name(unit, context, git)
        tip_sha = git.tip_sha(tip)
        if tip_sha is None:
            return None  # commit-in-history reports the missing tip
        default = str_option(context.options, "default_branch") or git.default_branch()
        base = git.scan_base(tip_sha, default)
        depth = int_option(context.options, "scan_depth", DEFAULT_SCAN_DEPTH)
        return _Scope(git, tip, tip_sha, base, depth)


def _subject(commit: Commit) -> str:
    line = commit.message.strip().split("\n", 1)[0].strip()
    return line if len(line) <= _SUBJECT else line[: _SUBJECT - 1] + "…"


def _pending(unit: Unit, context: Context) -> dict[str, Task]:
    """The pending tasks whose ids are looked for in messages."""
    min_length = int_option(context.options, "min_id_length", DEFAULT_MIN_ID_LENGTH)
    return {t.id: t for t in unit.tasks if not t.done and searchable(t.id, min_length)}


def _named(unit: Unit, context: Context, scope: _Scope) -> list[Finding]:
    """Pending tasks whose id a scanned commit message names (the newest such commit)."""
    pending = _pending(unit, context)
    if not pending:
        return []
    newest: dict[str, Commit] = {}
    if all(is_run(task_id) for task_id in pending):
        # An id made of word characters and hyphens is named exactly when it is one of
        # the message's maximal such runs: a set lookup in words split once per commit,
        # instead of a regex compiled for every unit (0.5 s of a 2,000-unit pass).
        ids = set(pending)
        for commit in scope.commits():
            for task_id in ids & commit.words():
                newest.setdefault(task_id, commit)
    else:
        import re  # only for ids of other characters (`re` costs a hook's start)

        ids_by_length = sorted(pending, key=len, reverse=True)
        alternatives = "|".join(map(re.escape, ids_by_length))
        pattern = re.compile(r"(?<![\w-])(" + alternatives + r")(?![\w-])")
        for commit in scope.commits():
            for task_id in pattern.findall(commit.message):
                newest.setdefault(task_id, commit)
    findings = []
    for task in unit.tasks:
        if task.id not in newest:
            continue
        commit = newest.pop(task.id)
        message = (
            f'commit {short(commit.sha)} "{_subject(commit)}" on {scope.tip} names task '
            f"{task.id}, which is still {task.status}: the state file is behind git "
            "(crash after the commit, before the state update?)"
        )
        evidence = {"commit": commit.sha, "tip": scope.tip}
        findings.append(Finding(NAME, "unrecorded", "warning", message, task.id, evidence))
    return findings


def _task_paths(task: Task, workspace: str, git: GitView) -> tuple[str, ...]:
    """The task's files_created and files_modified, relative to the work tree."""
    listed: list[str] = []
    for key in ("files_created", "files_modified"):
        value = task.extra.get(key)
        if isinstance(value, list):
            listed.extend(v for v in value if isinstance(v, str) and v.strip())
    paths = (git.relpath(os.path.join(workspace, p)) for p in listed)
    return tuple(sorted({p for p in paths if p and p != "."}))


def _in_progress(unit: Unit, context: Context, scope: _Scope) -> list[Finding]:
    """in_progress tasks with a commit after their start touching their files."""
    findings = []
    for task in unit.tasks:
        started = task.extra.get("started_at")
        if task.status.lower() != "in_progress" or not isinstance(started, str):
            continue
        since = parse_epoch(started)
        paths = _task_paths(task, context.workspace, scope.git)
        if since is None or not paths:
            continue
        later = next((c for c in scope.commits(paths) if c.time > since), None)
        if later is None:
            continue
        touched = sorted(later.paths)
        shown = ", ".join(touched[:_SHOWN_FILES]) + (" …" if len(touched) > _SHOWN_FILES else "")
        message = (
            f"task {task.id} is {task.status}, but commit {short(later.sha)} on {scope.tip}, "
            f"after its started_at {started}, touches {shown}: the sub-agent did not "
            "update the state file"
        )
        evidence = {"commit": later.sha, "tip": scope.tip, "startedAt": started}
        finding = Finding(NAME, "in-progress-committed", "warning", message, task.id, evidence)
        findings.append(finding)
    return findings


DETECTOR = UnrecordedDetector()
