"""Lineage: whether a version of a state file that lost finished work is git moving the
work tree (a switch, reset, stash, pull, rebase...) rather than a lost update.

A unit's held progress (history_rules.py) belongs to one *lineage*: the folder at the
workspace's path, its repository, the branch HEAD names and HEAD's commit when the
progress was seen (a `Stamp`). A version that loses finished work is explained, and
starts a new lineage, when (cheap checks first):

    moved(before, now)         the folder or the repository is another one (a swapped,
                               moved or re-created workspace), HEAD names another branch,
                               or HEAD moved to a commit that does not descend from the
                               one it was at (reset, rebase, checkout); a commit on top is
                               no explanation: a second session commits too
    from_git(workspace, path)  the file's bytes are what some commit holds at that path
                               (`git hash-object` against HEAD's, ORIG_HEAD's, the
                               reflog's recent commits' blobs, then the commits of the
                               last MAX_COMMITS that changed the path, on every ref,
                               reflogs and stash included): what a checkout, switch,
                               reset, stash, pull, merge, rebase or cherry-pick writes

While git is writing the work tree (`busy`: a fresh index.lock, or an operation stopped
mid-way) a loss is not judged at all: a checkout writes a file in place, and a
Markdown file read half written parses, with tasks missing. Git is asked only when a
version loses work (rare), each run bounded by TIMEOUT; a git
that fails or is absent explains nothing. git's own files are read through
storyd.core.gitstate.
"""

from __future__ import annotations

import os

from storyd.core import gitstate

__all__ = ["MAX_COMMITS", "REFLOG", "TIMEOUT", "Stamp", "branch", "busy", "explain",
           "from_git", "moved", "stamp"]  # fmt: skip

Stamp = tuple[int, int, int, int, str, str]
"""The folder's st_dev and st_ino, the repository's (its common git folder's), the ref
HEAD names ("" when detached or no repository) and HEAD's commit ("" when unknown)."""

MAX_COMMITS = 200  # commits that changed the path, looked through for the file's blob
REFLOG = 20  # HEAD's most recent reflog entries whose blobs are asked first
TIMEOUT = 10.0  # seconds a git run may take
_NO_REPO = (0, 0, "", "")


def stamp(workspace: str) -> Stamp | None:
    """The lineage `workspace` is in now; None when the folder is gone."""
    try:
        st = os.stat(workspace)
    except (OSError, ValueError):
        return None
    top = gitstate.work_tree_root(workspace)
    where = gitstate.locate(top) if top is not None else None
    if where is None:
        return (st.st_dev, st.st_ino, *_NO_REPO)
    try:
        repo = os.stat(where.common)
        ref = where.head_ref() or ""
    except OSError:
        return (st.st_dev, st.st_ino, *_NO_REPO)
    return (st.st_dev, st.st_ino, repo.st_dev, repo.st_ino, ref, where.head_commit() or "")


def busy(workspace: str) -> bool:
    """Whether git is writing the work tree now (its index.lock is fresh) or an operation
    is stopped mid-way: a file read now may be half written, or a step of a rebase; the
    loss is judged once git settles (the daemon rechecks then)."""
    top = gitstate.work_tree_root(workspace)
    return top is not None and gitstate.git_operation_in_progress(top)


def branch(stamp: Stamp | None) -> str | None:
    """The branch HEAD named in a lineage (None: detached, no repository, unknown)."""
    ref = stamp[4] if stamp is not None else ""
    return ref.removeprefix("refs/heads/") if ref.startswith("refs/heads/") else None


def _short(ref: str) -> str:
    return ref.removeprefix("refs/heads/") if ref else "a detached HEAD"


def moved(workspace: str, before: Stamp | None, now: Stamp | None) -> str | None:
    """Why `now` is another lineage than `before` (None: the same one, or unknown)."""
    if before is None or now is None or before == now:
        return None
    if before[:2] != now[:2]:
        return "another folder is at the workspace's path (swapped, moved or re-created)"
    if before[2:4] != now[2:4]:
        return "the workspace is in another repository"
    if before[4] != now[4]:
        return f"HEAD moved from {_short(before[4])} to {_short(now[4])}"
    old, new = before[5], now[5]
    if old and new and old != new and not _descends(workspace, old, new):
        return f"HEAD moved from {old[:12]} to {new[:12]}, which does not descend from it"
    return None


def _git(workspace: str, *args: str, data: bytes | None = None) -> str | None:
    """git's stdout in `workspace`, None when it fails (or is absent, or times out)."""
    import subprocess  # only when a version lost work: not on a read that lost none

    try:
        done = subprocess.run(["git", "-C", workspace, *args], input=data,
                              capture_output=True, timeout=TIMEOUT, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.decode("utf-8", "replace") if done.returncode == 0 else None


def _descends(workspace: str, old: str, new: str) -> bool:
    """Whether commit `new` has `old` in its history (a commit, merge or pull on top)."""
    return _git(workspace, "merge-base", "--is-ancestor", old, new) is not None


def _recent(workspace: str) -> list[str]:
    """HEAD, ORIG_HEAD and the commits of HEAD's last REFLOG reflog entries (newest
    first), read from git's own files."""
    top = gitstate.work_tree_root(workspace)
    where = gitstate.locate(top) if top is not None else None
    if where is None:
        return []
    found = ["HEAD", "ORIG_HEAD"]
    try:
        with open(os.path.join(where.gitdir, "logs", "HEAD"), "rb") as log:
            log.seek(max(0, os.fstat(log.fileno()).st_size - 256 * REFLOG))
            lines = log.read().splitlines()[-REFLOG:]
    except OSError:
        return found
    for line in reversed(lines):
        parts = line.split(b" ", 2)
        if len(parts) == 3 and len(parts[1]) in (40, 64):
            found.append(parts[1].decode("ascii", "replace"))
    return found


def from_git(workspace: str, relpath: str) -> str | None:
    """The commit (or `HEAD`, `ORIG_HEAD`) that holds the file at `relpath` exactly as it
    is now; None when none of those looked at does."""
    # with the repository's conversions (core.autocrlf, eol): the blob a checkout wrote
    blob = _git(workspace, "hash-object", "--", relpath)
    if blob is None:
        return None
    blob = blob.strip()
    revs = _recent(workspace)
    asked = "".join(f"{rev}:./{relpath}\n" for rev in revs).encode()
    answer = _git(workspace, "cat-file", "--batch-check=%(objectname)", data=asked)
    for rev, line in zip(revs, (answer or "").splitlines(), strict=False):
        if line.strip() == blob:
            return rev
    walked = _git(workspace, "log", "--all", "--reflog", f"-n{MAX_COMMITS}", "--format=%H",
                  "--raw", "--no-abbrev", "--no-renames", "--diff-merges=first-parent",
                  "--", relpath)  # fmt: skip
    commit = ""
    for line in (walked or "").splitlines():
        if line.startswith(":"):
            fields = line.split()
            if len(fields) >= 4 and fields[3] == blob:
                return commit
        elif line.strip():
            commit = line.strip()
    return None


def explain(workspace: str, relpath: str, before: Stamp | None, now: Stamp | None) -> str | None:
    """Why the version of `relpath` read now is git's doing, not a lost update (None:
    nothing explains it)."""
    why = moved(workspace, before, now)
    if why is not None:
        return why
    commit = from_git(workspace, relpath)
    if commit is None:
        return None
    return f"the file is as {commit if len(commit) < 40 else commit[:12]} has it"
