"""One cached, self-validating view of a git repository, owned by one thread.

The detectors ask git a few questions, many times over: does this object exist, is it
in the history of that tip, when did this path last change, is it clean, which branch
is checked out, is the clone shallow. A `GitView` answers them for one repository and
keeps what it learns:

    objects     one persistent `git cat-file --batch-check`, asked in pipelined
                batches: full and abbreviated names, `missing` and `ambiguous`. A
                found full name is kept for good; any other answer until the object
                folder it would live in (objects/xx or objects/pack) changes
    ancestry    per tip, the set of commits reachable from it (one bounded
                `git rev-list`); when the tip fast-forwards only `rev-list new ^old`
                is read, because whatever the old tip reached the new one still does
    patch ids   per commit (`git patch-id --stable`), to find a rewritten commit's
                replacement on the branch
    scans       recent commits of a tip, keyed by the tip's sha

Every cache is keyed by what makes it true (an object name and its folder's mtime, a
tip's sha), and each question reads the tip's sha afresh, so nothing has to be told
that refs moved or objects arrived.
`refresh_views` exists for callers that want to drop the caches anyway.

A git view is not thread-safe: a view belongs to the thread that made it (the
detector Runner's worker keeps its views in its per-thread `local` dict, and a
replacement worker builds fresh ones; a request's `private_view` is its caller's until
it closes it). `git_context` is the Runner's context factory. Where a repository keeps
its files (git dir, common dir, HEAD) is storyd.core.gitstate's answer.

Errors: every OS failure is translated, in errors.py, into storyd.core.errors.GitError
(a git command failed, or the repository cannot be read).

    errors.py    the boundary where foreign errors become GitError
    spawn.py     a git process with pipes, by os.posix_spawn (no subprocess import)
    proc.py      git processes with a deadline: run, start/finish, pipes side by side
    objects.py   the cat-file pipe, object answers and their stamps
    view.py      GitView: one repository's caches
    registry.py  one view per repository and thread; a request's private view; the
                 Runner's context factory
"""

from __future__ import annotations

from storyd.core.errors import GitError
from storyd.detectors.gitview.objects import (
    AMBIGUOUS,
    FOUND,
    INVALID,
    MISSING,
    ObjectInfo,
    is_object_name,
)
from storyd.detectors.gitview.registry import (
    close_views,
    find_root,
    git_context,
    hold_tips,
    open_view,
    private_view,
    refresh_views,
    view_for,
)
from storyd.detectors.gitview.view import Commit, GitView

__all__ = [
    "AMBIGUOUS",
    "FOUND",
    "INVALID",
    "MISSING",
    "Commit",
    "GitError",
    "GitView",
    "ObjectInfo",
    "close_views",
    "find_root",
    "git_context",
    "hold_tips",
    "is_object_name",
    "open_view",
    "private_view",
    "refresh_views",
    "view_for",
]
