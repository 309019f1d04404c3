"""Finding a workspace's view: one per repository and per thread (the Runner's worker
keeps its views in its per-thread `local` dict), and the Runner's context factory.

Where a repository's files are is storyd.core.gitstate's answer (`locate`, `work_tree_root`).

Two kinds of owner hold views in the daemon, never sharing one:

    view_for(local, ws)    the Runner's worker: cached per repository in its thread's
                           `local`, ended by `close_views` (a replaced worker's go with it)
    private_view(ws)       one request's own (the epic view's and reconcile's evidence, on
                           a pool thread or the reconcile thread): opened for the request,
                           used on that thread only, closed by the caller, never cached
"""

from __future__ import annotations

import os

from storyd.core.errors import GitError
from storyd.core.gitstate import is_work_tree, locate
from storyd.core.gitstate import work_tree_root as find_root
from storyd.detectors import ONE_SHOT_KEY, Context, unit_context
from storyd.detectors.gitview.errors import git_executable
from storyd.detectors.gitview.proc import GitStuck, check_git_files
from storyd.detectors.gitview.view import (
    DEFAULT_WALK_LIMIT,
    ONE_SHOT_PROBES,
    ONE_SHOT_WALK,
    GitView,
)

TYPE_CHECKING = False  # `typing` costs a hook's direct path start-up time (daemon/core/model.py)
if TYPE_CHECKING:
    from collections.abc import Mapping

    from storyd.core.model import Unit

__all__ = [
    "close_views",
    "find_root",
    "git_context",
    "hold_tips",
    "open_view",
    "private_view",
    "refresh_views",
    "view_for",
]

MAX_VIEWS = 64  # repositories whose views a thread keeps open (limits.max_workspaces' default)
_LOCAL_KEY = "storyd.gitviews"
_NO_GIT_KEY = "storyd.git-unavailable"
_HOLD_KEY = "storyd.hold-tips"
_ROOTS_KEY = "storyd.held-roots"  # workspace -> its work tree, during a held pass
_IDENT_KEY = "storyd.view-folders"  # work tree -> the folder it named when its view opened


def _folder(root: str) -> tuple[int, int] | None:
    """The folder `root` names now (st_dev, st_ino): a view is of that folder's
    repository, and a path that names another folder now (exchanged, moved away and
    replaced) needs a new view."""
    try:
        st = os.stat(root)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


def open_view(root: str, *, walk_limit: int = DEFAULT_WALK_LIMIT,
              widen_after: int | None = None) -> GitView | None:  # fmt: skip
    """A new view of the repository at `root` (GitView's arguments); None when git or
    the repository is unusable."""
    git = git_executable()
    if git is None:
        return None
    where = locate(root)
    if where is None:  # no `.git` there, a FIFO, or a `.git` file naming no folder
        return None
    try:  # a FIFO where git reads a file would hang it
        check_git_files(where.gitdir, where.common, names=("commondir",))
        if not os.path.isdir(where.common):
            return None
        view = GitView(root, where, git, walk_limit=walk_limit, widen_after=widen_after)
    except GitError:
        return None
    try:
        view.tip_sha("HEAD")  # starts cat-file: proves git runs here
    except GitStuck:
        return view  # a repository whose git hangs: each check says so (a git-error)
    except GitError:
        _close_quietly(view)
        return None
    return view


def _views(local: dict[str, object]) -> dict[str, GitView]:
    views = local.get(_LOCAL_KEY)
    if not isinstance(views, dict):
        views = {}
        local[_LOCAL_KEY] = views
    return views


def view_for(local: dict[str, object], workspace: str) -> GitView | None:
    """The cached view of the repository holding `workspace` (made on first use);
    None when it is not in a repository or git is unavailable."""
    if local.get(_NO_GIT_KEY):
        return None
    roots = local.get(_ROOTS_KEY)
    if isinstance(roots, dict):  # a held pass: each workspace's root is found once
        if workspace not in roots:
            roots[workspace] = find_root(workspace)
        root = roots[workspace]
    else:
        root = find_root(workspace)
    if root is None:
        return None
    views = _views(local)
    view = views.get(root)
    folders = local.setdefault(_IDENT_KEY, {})
    assert isinstance(folders, dict)
    folder = _folder(root)
    if view is not None and folders.get(root) == folder and is_work_tree(root):
        if next(reversed(views)) != root:  # the most recently used last
            views[root] = views.pop(root)
        return view
    if view is not None:
        views.pop(root)
        _close_quietly(view)
    _let_go(views, folders)
    if git_executable() is None:
        local[_NO_GIT_KEY] = True
        return None
    if local.get(ONE_SHOT_KEY):  # a one-shot scan: see GitView's walk_limit
        view = open_view(root, walk_limit=ONE_SHOT_WALK, widen_after=ONE_SHOT_PROBES)
    else:
        view = open_view(root)
    if view is not None:
        views[root] = view
        folders[root] = folder
        if local.get(_HOLD_KEY):
            view.hold_tips(True)
    return view


def _let_go(views: dict[str, GitView], folders: dict[object, object]) -> None:
    """Before a view opens: close those whose folder is gone or another one now (a
    workspace deleted after its unwatch), then the least recently used past MAX_VIEWS.
    Each view holds git children (cat-file) and their pipes until closed."""
    for root in [r for r in views if folders.get(r) != _folder(r)]:
        _close_quietly(views.pop(root))
        folders.pop(root, None)
    while len(views) >= MAX_VIEWS:
        root = next(iter(views))
        _close_quietly(views.pop(root))
        folders.pop(root, None)


def private_view(workspace: str) -> GitView | None:
    """A view of the repository holding `workspace` that belongs to one request: the
    calling thread alone uses it and closes it (`view.close()`); it is never cached nor
    lent. None outside a repository or when git is unusable. It runs beside the Runner's
    views safely: its own processes, read-only git (`--no-optional-locks`), each with a
    deadline (proc.py)."""
    root = find_root(workspace)
    return open_view(root) if root is not None else None


def git_context(
    local: dict[str, object],
    workspace: str,
    unit: Unit,
    envelope: Mapping[str, object] | None,
    staleness: str,
) -> Context:
    """The Runner's context factory: the workspace's cached git view (None outside a
    repository), and the unit's own branch as the tip when its format names one."""
    try:
        git = view_for(local, workspace)
    except GitError:
        git = None
    return unit_context(workspace, unit, envelope, staleness, git)


def hold_tips(local: dict[str, object], on: bool) -> None:
    """Every view of this thread (and every view it opens meanwhile) reads each tip once
    until `hold_tips(local, False)`: see GitView.hold_tips."""
    local[_HOLD_KEY] = on
    if on:
        local[_ROOTS_KEY] = {}
    else:
        local.pop(_ROOTS_KEY, None)
    for view in _views(local).values():
        view.hold_tips(on)


def refresh_views(local: dict[str, object]) -> None:
    """Drop every view's caches (never needed for correctness: they validate themselves)."""
    for view in _views(local).values():
        view.refresh()


def close_views(local: dict[str, object]) -> None:
    """End every view's processes; the next `view_for` makes fresh ones."""
    views = _views(local)
    while views:
        _, view = views.popitem()
        _close_quietly(view)


def _close_quietly(view: GitView) -> None:
    try:  # noqa: SIM105 (contextlib imports collections, functools...: a hook's start)
        view.close()
    except GitError:
        pass
