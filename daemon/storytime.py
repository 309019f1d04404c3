"""When a story file last changed: its mtime, or in git mode its last commit.

The seed compares the story file's mtime with each DONE task's completedAt. After a
clone or a checkout every file has a fresh mtime, so every DONE task looks stale. In
git mode (the default) a story file that git tracks and that is unmodified dates from
its last commit, when that is earlier than its mtime. `mtime` mode is the seed's
literal rule.

This module asks git through two short `git` subprocess calls (no GitPython: it sits
on `storyd resume`'s start-up path) and only when mtime alone would warn. The daemon
asks its cached GitView the same two questions, so both answer alike.
"""

from __future__ import annotations

import os

__all__ = ["MODES", "git_commit_time", "mtime_seconds"]

MODES = ("git", "mtime")
_GIT_TIMEOUT = 5.0


def mtime_seconds(path: str) -> int | None:
    """Whole-second mtime (as `stat -c %Y` prints it), None when the file is absent."""
    try:
        return int(os.stat(path).st_mtime)
    except OSError:
        return None


def git_commit_time(workspace: str, relpath: str) -> int | None:
    """Committer time of the last commit touching `relpath`, if it is tracked and clean.

    None when git is absent, the workspace is not a repository, or the file is
    untracked, staged or modified.
    """
    status = _git(workspace, "status", "--porcelain", "--untracked-files=all", "--", relpath)
    if status is None or status.strip():
        return None
    log = _git(workspace, "log", "-1", "--format=%ct", "--", relpath)
    stamp = (log or "").strip()
    return int(stamp) if stamp.isdigit() else None


def _git(workspace: str, *args: str) -> str | None:
    """A git command's stdout, or None when it cannot run or fails."""
    import subprocess  # here, not at the top: `storyd resume` rarely needs it

    try:
        out = subprocess.run(
            ["git", *args],
            cwd=workspace,
            capture_output=True,
            timeout=_GIT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.decode("utf-8", "replace")
