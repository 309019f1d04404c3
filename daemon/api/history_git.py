"""Versions from before the daemon watched: a committed state file's git history.

`versions_in_git(workspace, relpath, adapter, limit)` reads the file as each of its last
`limit` commits had it (`git log -- PATH`, `git show SHA:PATH`) through the format's own
adapter, companions (story files, a tasks file) read from the same commit. Oldest first.
A commit whose file does not parse is skipped. Whether a path exists in a commit is
answered from one listing of its tree (`git ls-tree -r`), never a git run per path: an
epic asks it of every story file, and 10,000 `git cat-file -e` runs held the history
writer for minutes at a 10,000-story warm-up. These versions are history to read,
never held progress: checking out an old commit is a git operation, not a lost write.
"""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

from storyd.core.errors import StateFileMissing, StorydError
from storyd.core.formats.base import Source

if TYPE_CHECKING:
    from storyd.core.formats import Adapter
    from storyd.core.model import Unit

__all__ = ["GitSource", "versions_in_git"]

_TIMEOUT = 30.0


def _git(workspace: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", workspace, *args], capture_output=True,
                          timeout=_TIMEOUT, check=False)  # fmt: skip


class GitSource(Source):
    """A Source that reads files as one commit has them (no lock: git objects never
    change)."""

    __slots__ = ("_paths", "commit")

    def __init__(self, workspace: str, commit: str) -> None:
        super().__init__(workspace)
        self.commit = commit
        self._paths: frozenset[str] | None = None  # the commit's files and folders

    def read(self, relpath: str, name: str = "") -> bytes:
        if not self.exists(relpath):
            raise StateFileMissing(f"{relpath} is not in commit {self.commit[:12]}")
        done = _git(self.workspace, "show", f"{self.commit}:./{relpath}")  # ./: the workspace's
        if done.returncode != 0:
            raise StateFileMissing(f"{relpath} is not in commit {self.commit[:12]}")
        return done.stdout

    def exists(self, relpath: str) -> bool:
        if self._paths is None:
            self._paths = _tree(self.workspace, self.commit)
        return relpath.strip("/") in self._paths


def _tree(workspace: str, commit: str) -> frozenset[str]:
    """Every file and folder of a commit under the workspace, relative to it (ls-tree
    lists from the working directory down; empty when git fails)."""
    done = _git(workspace, "ls-tree", "-r", "-z", "--name-only", commit)
    if done.returncode != 0:
        return frozenset()
    paths: set[str] = set()
    for name in done.stdout.decode("utf-8", "surrogateescape").split("\0"):
        path = name
        while path and path not in paths:  # the file, then each folder above it
            paths.add(path)
            path = path.rpartition("/")[0]
    return frozenset(paths)


def versions_in_git(
    workspace: str, relpath: str, adapter: Adapter, limit: int
) -> list[tuple[str, float, list[Unit]]]:
    """(commit, commit time, units) for the file's last `limit` commits, oldest first;
    empty when the file is not tracked or git fails."""
    try:
        log = _git(workspace, "log", f"-n{limit}", "--format=%H %ct", "--", relpath)
    except (OSError, subprocess.SubprocessError):
        return []
    if log.returncode != 0:
        return []
    found = []
    for line in reversed(log.stdout.decode("ascii", "replace").splitlines()):
        sha, _, when = line.partition(" ")
        try:
            units = adapter.load(GitSource(workspace, sha), relpath)
        except (StorydError, OSError, subprocess.SubprocessError):
            continue
        found.append((sha, float(when or 0), units))
    return found
