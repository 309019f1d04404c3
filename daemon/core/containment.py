"""The one containment rule: a state path, links resolved, stays inside its workspace and
out of git's own folders.

A repository decides where its state files' links lead. Staying inside the workspace is
not enough, since `.git/` is inside it too: a state file linked to `.git/config` would
make a reconcile write git's configuration (issue 39). So a path is refused when, links
resolved, it leaves the workspace or lies in a git directory: any `.git` folder on its
way (git itself refuses to commit such paths, so only a link leads there), or the
gitdir and common dir a `.git` file of the workspace names (a linked worktree's).

    resolve(workspace, path)   (resolved workspace, resolved path), or Refused
    Refused                    a UsageError (exit 64) whose message says which rule
"""

from __future__ import annotations

import os

from storyd.core.errors import UsageError

__all__ = ["Refused", "git_dirs", "resolve"]

_GITFILE_LIMIT = 4096  # a `gitdir: PATH` line, with room to spare


class Refused(UsageError):
    """A state path that leads out of the workspace or into git's directory."""


def resolve(workspace: str, path: str, *, git: bool = False) -> tuple[str, str]:
    """(the real workspace, the real `path`) when `path` (absolute, or relative to the
    workspace) stays inside the workspace and out of git's folders; Refused otherwise.
    `git`: a read of git's own file that a format asks for by name (`.git/HEAD`): the
    workspace rule alone."""
    base = os.path.realpath(workspace)
    real = os.path.realpath(os.path.join(base, path))
    if not real.startswith(base + os.sep):
        raise Refused(f"{path}: outside the workspace {workspace}")
    if git:
        return base, real
    inner = real[len(base):] + os.sep
    if f"{os.sep}.git{os.sep}" in inner or _under(real, git_dirs(base)):
        shown = os.path.relpath(real, base) if real.startswith(base + os.sep) else real
        raise Refused(f"{path}: leads into git's own directory ({shown}); a state file "
                      "there is refused, never read or written")
    return base, real


def _under(real: str, folders: tuple[str, ...]) -> bool:
    return any(real == f or real.startswith(f + os.sep) for f in folders)


def git_dirs(base: str) -> tuple[str, ...]:
    """The gitdir and common dir a `.git` file at the root of `base` names (a linked
    worktree); () for a `.git` folder (the component rule covers it) or none."""
    dotgit = os.path.join(base, ".git")
    if os.path.isdir(dotgit) or not os.path.lexists(dotgit):
        return ()
    try:
        from storyd.core.regular import read_regular

        text = read_regular(dotgit, _GITFILE_LIMIT).decode("utf-8", "replace")
    except OSError:
        return ()
    if not text.startswith("gitdir:"):
        return ()
    gitdir = os.path.realpath(os.path.join(base, text[7:].strip()))
    found = [gitdir]
    try:
        common = read_regular(os.path.join(gitdir, "commondir"), _GITFILE_LIMIT)
        found.append(os.path.realpath(os.path.join(gitdir, common.decode("utf-8",
                                                                         "replace").strip())))
    except OSError:
        pass
    return tuple(found)
