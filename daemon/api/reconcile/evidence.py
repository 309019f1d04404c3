"""The evidence behind a repair: a commit (sha, subject, time, patch id), a journal line,
an output file. Each is read afresh from git or the disk when the plan is made; a repair
is planned only when its evidence is found.

Git is asked through the detectors' own `GitView`: one private view per plan
(storyd.detectors.gitview.private_view), used and closed on the planning thread.
"""

from __future__ import annotations

import json
import os

from storyd.api.reconcile.targets import utc_stamp
from storyd.core.regular import open_regular, read_regular
from storyd.detectors.gitview import GitError, GitView, private_view

__all__ = [
    "CommitEvidence",
    "Evidence",
    "JournalEntry",
    "OutputFile",
    "read_journal_entry",
    "read_output",
]

_MAX_OUTPUT = 16 * 1024 * 1024


class CommitEvidence:
    """One commit as git has it now."""

    __slots__ = ("patch_id", "sha", "subject", "time")

    def __init__(self, sha: str, subject: str, time: int, patch_id: str | None) -> None:
        self.sha = sha
        self.subject = subject
        self.time = time
        self.patch_id = patch_id

    def as_dict(self) -> dict[str, object]:
        """The plan's data form."""
        return {
            "commit": self.sha,
            "subject": self.subject,
            "committedAt": utc_stamp(self.time),
            "patchId": self.patch_id,
        }


class JournalEntry:
    """A task's `## Task <id>:` entry in journal.md: its status line and end time."""

    __slots__ = ("end", "line", "number", "path")

    def __init__(self, path: str, number: int, line: str, end: str | None) -> None:
        self.path = path
        self.number = number
        self.line = line
        self.end = end

    def as_dict(self) -> dict[str, object]:
        """The plan's data form."""
        return {"journal": self.path, "line": self.number, "text": self.line, "end": self.end}


class OutputFile:
    """A checkpoint task's output file: the status it records and when it was written."""

    __slots__ = ("completed_at", "mtime", "path", "status")

    def __init__(self, path: str, status: str | None, completed_at: str | None, mtime: float):
        self.path = path
        self.status = status
        self.completed_at = completed_at
        self.mtime = mtime

    def as_dict(self) -> dict[str, object]:
        """The plan's data form."""
        return {
            "output": self.path,
            "status": self.status,
            "completedAt": self.completed_at,
            "written": utc_stamp(self.mtime),
        }


class Evidence:
    """Git evidence for one plan; open it, ask it, close it (one thread only)."""

    def __init__(self, workspace: str) -> None:
        self.workspace = workspace
        self._view: GitView | None = None
        self._opened = False
        self._on_head: dict[str, bool] = {}

    def view(self) -> GitView | None:
        """The repository's view, opened on first use; None without a repository."""
        if not self._opened:
            self._opened = True
            self._view = private_view(self.workspace)
        return self._view

    def commit(self, name: str) -> CommitEvidence | None:
        """A commit by (abbreviated) sha, or None when git does not have it."""
        view = self.view()
        if view is None:
            return None
        try:
            sha = view.resolve(name)
            if sha is None:
                return None
            found = view.commits(sha, None, 1)
            if not found or found[0].sha != sha:
                return None
            subject = found[0].message.strip().split("\n", 1)[0].strip()
            patch_id = view.patch_ids([sha]).get(sha)
        except GitError:
            return None
        return CommitEvidence(sha, subject, found[0].time, patch_id)

    def on_head(self, sha: str) -> bool:
        """Whether the commit `sha` is in the history of the work tree's HEAD (`git
        merge-base --is-ancestor`): the only commits a repair writes (issue 40)."""
        known = self._on_head.get(sha)
        if known is None:
            from storyd.api.history import on_branch

            known = self._on_head[sha] = on_branch(self.workspace, sha)
        return known

    def close(self) -> None:
        """End the view's git processes."""
        if self._view is not None:
            self._view.close()
            self._view = None


def _heading_id(line: str) -> str | None:
    for prefix in ("## Task ", "### Task "):
        if line.startswith(prefix) and ":" in line:
            return line[len(prefix) :].partition(":")[0].strip().rstrip(".")
    return None


def _end_time(line: str) -> str | None:
    """`**Time**: 2026-01-20T11:00:00Z → 2026-01-20T11:45:00Z` → the end time."""
    for arrow in ("→", "->"):
        if arrow in line:
            end = line.rsplit(arrow, 1)[1].strip().strip("*` ")
            return end or None
    return None


def read_journal_entry(workspace: str, path: str, task_id: str) -> JournalEntry | None:
    """The last entry a journal (workspace-relative `path`) has for a task, if it says
    completed."""
    try:
        text = read_regular(os.path.join(workspace, path), _MAX_OUTPUT)
    except OSError:  # absent, unreadable, too large, or not a regular file (a FIFO)
        return None
    lines = text.decode("utf-8", "replace").splitlines()
    wanted = task_id.strip().rstrip(".")
    found: JournalEntry | None = None
    current = False
    status: tuple[int, str] | None = None
    for number, line in enumerate(lines, 1):
        heading = _heading_id(line)
        if heading is not None or line.startswith("# "):
            current = heading == wanted
            status = None
            continue
        if not current:
            continue
        if "**Status" in line:
            status = (number, line.strip())
            found = None
            if "complet" in line.lower():
                found = JournalEntry(path, number, line.strip(), None)
        elif "**Time" in line and found is not None and status is not None:
            found.end = _end_time(line)
    return found


def read_output(workspace: str, output: str) -> OutputFile | None:
    """A checkpoint output file's recorded status (None when it is absent or unreadable)."""
    relpath = output.replace("\\", "/")
    full = relpath if os.path.isabs(relpath) else os.path.join(workspace, relpath)
    try:
        fd = open_regular(full)  # a FIFO here used to hang reconcile and the daemon
    except OSError:
        return None
    try:
        stat = os.fstat(fd)
        if stat.st_size > _MAX_OUTPUT:
            return None
        with os.fdopen(os.dup(fd), "rb") as handle:
            document = json.loads(handle.read(_MAX_OUTPUT + 1))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    status = document.get("status") if isinstance(document, dict) else None
    completed = document.get("completed_at") if isinstance(document, dict) else None
    return OutputFile(
        relpath,
        status.strip() if isinstance(status, str) else None,
        completed if isinstance(completed, str) else None,
        stat.st_mtime,
    )
