"""Versions from before the daemon watched: a committed state file's git history.

`versions_in_git(workspace, relpath, adapter, limit)` reads the file as each of its last
`limit` commits had it (`git log -- PATH`, `git show SHA:PATH`) through the format's own
adapter, companions (story files, a tasks file) read from the same commit. Oldest first.
A commit whose file does not parse is skipped. Whether a path exists in a commit is
answered from one listing of its tree (`git ls-tree -r`), never a git run per path: an
epic asks it of every story file, and 10,000 `git cat-file -e` runs held the history
writer for minutes at a 10,000-story warm-up. These versions are history to read,
never held progress: checking out an old commit is a git operation, not a lost write.

The daemon never parses old versions itself: `record_from_git` runs this module as a
child process (`python -m storyd.api.history_git`, niced), which records each unit's
versions whose tasks changed into the history database, in one transaction of its own,
while the daemon's writer (the holder of the database's lock) waits for it;
`rows_from_git` has the child print them as JSON lines instead. A 10,000-story file
parsed inside the daemon raised its resident memory by ~27 MB that stayed after the
parse was freed (CPython returns an arena only when nothing in it lives), and the parse
and the inserts took ~0.5 s of the daemon's interpreter during its warm-up.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from storyd.api.history_rules import Row, task_rows
from storyd.core.errors import StateFileMissing, StorydError
from storyd.core.formats.base import Source

if TYPE_CHECKING:
    from storyd.core.formats import Adapter
    from storyd.core.model import Unit

__all__ = ["GitHistoryError", "GitSource", "changed_rows", "main", "record_from_git",
           "rows_from_git", "versions_in_git"]  # fmt: skip

_TIMEOUT = 30.0  # one git run
CHILD_TIMEOUT = 600.0  # the whole child: every commit of one state file
NICE = 10  # the child's niceness: a warm-up's reads come first

Version = tuple[str, float, str, str, list[Row]]
"""A unit's version in git: commit, commit time, unit key, format, task rows."""


class GitHistoryError(Exception):
    """The child that reads a state file's git history failed or overran (the
    recorder's own: it logs it, no command exits with it)."""


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

    def read(self, relpath: str, name: str = "", *, git: bool = False) -> bytes:
        """`relpath` as the commit holds it (`git`: git's own file, which no commit holds:
        missing, as for a path the commit lacks)."""
        if git or not self.exists(relpath):
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
) -> Iterator[tuple[str, float, list[Unit]]]:
    """(commit, commit time, units) for the file's last `limit` commits, oldest first,
    one commit at a time; nothing when the file is not tracked or git fails."""
    try:
        log = _git(workspace, "log", f"-n{limit}", "--format=%H %ct", "--", relpath)
    except (OSError, subprocess.SubprocessError):
        return
    if log.returncode != 0:
        return
    for line in reversed(log.stdout.decode("ascii", "replace").splitlines()):
        sha, _, when = line.partition(" ")
        try:
            units = adapter.load(GitSource(workspace, sha), relpath)
        except (StorydError, OSError, subprocess.SubprocessError):
            continue
        yield sha, float(when or 0), units


def changed_rows(workspace: str, relpath: str, adapter: Adapter, limit: int) -> Iterator[Version]:
    """Each unit's versions in git whose tasks differ from its version before, oldest
    first."""
    last: dict[str, list[Row]] = {}
    for sha, when, units in versions_in_git(workspace, relpath, adapter, limit):
        for unit in units:
            rows = task_rows(unit.tasks)
            if last.get(unit.key) != rows:
                last[unit.key] = rows
                yield sha, when, unit.key, unit.format, rows


def _child(args: list[str], timeout: float) -> bytes:
    """What a child `python -m storyd.api.history_git ARGS` prints (niced; no thread of
    ours waits for it); GitHistoryError when it failed or ran over `timeout` seconds."""
    from storyd.core.children import group  # it and its gits end with the daemon

    argv = [sys.executable, "-m", "storyd.api.history_git", *args]
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, close_fds=True,
                             process_group=group())  # fmt: skip
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, child.pid, NICE)
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        raise GitHistoryError(
            f"reading the git history of {args[1]} failed: stopped after {timeout:g} s"
        ) from None
    if child.returncode != 0:
        said = err.decode("utf-8", "replace").strip()
        why = said.splitlines()[-1] if said else f"exit {child.returncode}"
        raise GitHistoryError(f"reading the git history of {args[1]} failed: {why}")
    return out


def rows_from_git(
    workspace: str, relpath: str, fmt: str, limit: int, timeout: float = CHILD_TIMEOUT
) -> Iterator[Version]:
    """`changed_rows`, worked out by a child process (for reading: the daemon records
    with `record_from_git`); GitHistoryError when it failed or overran."""
    import orjson

    for line in _child([workspace, relpath, fmt, str(limit)], timeout).splitlines():
        sha, when, key, unit_fmt, rows = orjson.loads(line)
        yield sha, when, key, unit_fmt, [tuple(r) for r in rows]


def record_from_git(
    workspace: str, relpath: str, fmt: str, limit: int, database: str,
    timeout: float = CHILD_TIMEOUT,
) -> int:  # fmt: skip
    """`changed_rows` recorded into `database` by a child process, in one transaction
    of its own (the caller, the writer holding the database's lock, waits for it): how
    many versions; GitHistoryError, and nothing recorded, when it failed or overran."""
    said = _child([workspace, relpath, fmt, str(limit), database], timeout)
    try:
        return int(said.strip() or b"0")
    except ValueError:
        raise GitHistoryError(f"reading the git history of {relpath}: said {said[:80]!r}"
                              ) from None  # fmt: skip


def _record(workspace: str, relpath: str, adapter: Adapter, limit: int, database: str) -> int:
    """The child's side of `record_from_git`."""
    import sqlite3

    from storyd.api import history_store as store

    conn = sqlite3.connect(database, timeout=30.0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        count = 0
        for sha, when, key, unit_fmt, rows in changed_rows(workspace, relpath, adapter, limit):
            uid = store.unit_id(conn, (workspace, relpath, key), unit_fmt)
            store.record(conn, uid, when, "", f"git:{sha}", "changed", rows)
            count += 1
        conn.execute("COMMIT")
        return count
    finally:
        conn.close()  # without its COMMIT, the transaction is rolled back


def main(argv: list[str] | None = None) -> int:
    """The child: `python -m storyd.api.history_git WORKSPACE RELPATH FORMAT LIMIT
    [DATABASE]` prints `changed_rows` as JSON lines [commit, time, unit, format, rows],
    or with DATABASE records them into it and prints how many."""
    import orjson

    from storyd.core.formats import all_adapters

    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (4, 5) or not args[3].isdigit():
        print("usage: python -m storyd.api.history_git WORKSPACE RELPATH FORMAT LIMIT"
              " [DATABASE]", file=sys.stderr)  # fmt: skip
        return 64
    workspace, relpath, fmt, limit = args[:4]
    adapter = next((a for a in all_adapters() if a.name == fmt), None)
    if adapter is None:
        print(f"no format named {fmt!r}", file=sys.stderr)
        return 64
    out = sys.stdout.buffer
    if len(args) == 5:
        out.write(b"%d\n" % _record(workspace, relpath, adapter, int(limit), args[4]))
    else:
        for version in changed_rows(workspace, relpath, adapter, int(limit)):
            out.write(orjson.dumps(version) + b"\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
