"""A workspace's git directories, and whether git is mid-operation, read from the files.

    git_dirs(ws)                       (gitdir, common dir), worktrees' `.git` files followed
    git_operation_in_progress(ws, w)   rebase, merge, cherry-pick or bisect under way; or an
                                       index.lock written less than `w` seconds ago
    git_lock_age(ws)                   (path, seconds since last written) of index.lock
    held_lock_findings(ws, w)          the warning that a lock older than `w` is there

The daemon defers its detectors while git is mid-operation (mid-rebase every rewritten
commit looks unreachable). index.lock is a lock, not an operation: one left behind by a
crashed git used to defer them for ever. It defers them only while it is younger than
`limits.git_lock_wait` (default 5 s); past that the detectors check anyway, and every
unit of the workspace carries a warning saying how long the lock has been held.
"""

from __future__ import annotations

import os
import time

from daemon.model import Finding
from daemon.regular import read_regular

__all__ = [
    "GIT_LOCK_WAIT",
    "git_dirs",
    "git_lock_age",
    "git_operation_in_progress",
    "held_lock_findings",
]

GIT_LOCK_WAIT = 5.0  # seconds: limits.git_lock_wait's default
_LOCK = "index.lock"
_OPERATION_MARKERS = (
    "rebase-merge",
    "rebase-apply",
    "MERGE_HEAD",
    "CHERRY_PICK_HEAD",
    "BISECT_LOG",
)


def git_dirs(workspace: str) -> tuple[str, str] | None:
    """(gitdir, common dir) of a workspace's repository; a linked worktree's `.git` file
    points at its own gitdir, whose `commondir` names the main repository's."""
    dotgit = os.path.join(workspace, ".git")
    if os.path.isdir(dotgit):
        return dotgit, dotgit
    try:  # a FIFO `.git` used to block the refresher here for ever
        line = read_regular(dotgit, 4096).decode("utf-8", "replace").partition("\n")[0].strip()
    except OSError:
        return None
    if not line.startswith("gitdir:"):
        return None
    gitdir = os.path.normpath(os.path.join(workspace, line[7:].strip()))
    try:
        text = read_regular(os.path.join(gitdir, "commondir"), 4096).decode("utf-8", "replace")
        common = os.path.normpath(os.path.join(gitdir, text.partition("\n")[0].strip()))
    except OSError:
        common = gitdir
    return (gitdir, common) if os.path.isdir(gitdir) else None


def git_lock_age(workspace: str) -> tuple[str, float] | None:
    """The workspace's index.lock and the seconds since it was last written, if any."""
    dirs = git_dirs(workspace)
    if dirs is None:
        return None
    path = os.path.join(dirs[0], _LOCK)
    try:
        written = os.stat(path).st_mtime
    except OSError:
        return None
    return path, max(0.0, time.time() - written)


def git_operation_in_progress(workspace: str, lock_wait: float = GIT_LOCK_WAIT) -> bool:
    """Whether a git operation is mid-way (rebase, merge, cherry-pick, bisect), or git
    wrote its index.lock less than `lock_wait` seconds ago."""
    dirs = git_dirs(workspace)
    if dirs is None:
        return False
    if any(os.path.exists(os.path.join(dirs[0], m)) for m in _OPERATION_MARKERS):
        return True
    lock = git_lock_age(workspace)
    return lock is not None and lock[1] < lock_wait


def held_lock_findings(workspace: str, lock_wait: float = GIT_LOCK_WAIT) -> tuple[Finding, ...]:
    """A warning when index.lock has been held `lock_wait` seconds or more."""
    lock = git_lock_age(workspace)
    if lock is None or lock[1] < lock_wait:
        return ()
    path, age = lock
    message = (
        f"a git lock has been held for {age:.0f} s ({path}): checked anyway after "
        f"{lock_wait:g} s; remove it if no git command is running"
    )
    return (Finding("git-lock", "git-lock-held", "warning", message),)
