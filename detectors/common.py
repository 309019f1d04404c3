"""Helpers the built-in detectors share: options, the tip to check, common findings."""

from __future__ import annotations

from storyd.core.gitstate import locate
from storyd.core.model import Finding

TYPE_CHECKING = False  # `typing` costs a hook's direct path start-up time (daemon/core/model.py)
if TYPE_CHECKING:
    from storyd.core.model import Unit
    from storyd.detectors import Context
    from storyd.detectors.gitview import GitError, GitView

__all__ = [
    "SHORT", "format_says", "git_failed", "int_option", "no_tip",
    "short", "str_option", "tip_name",
]

SHORT = 12  # digits of a sha in messages: fixed, so a message never changes as a repo grows


def short(sha: str) -> str:
    """A sha abbreviated to a fixed length for messages."""
    return sha[:SHORT]


def int_option(options: dict[str, object], key: str, default: int) -> int:
    """A positive integer option; `default` when absent or not a positive integer."""
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return default
    return value


def str_option(options: dict[str, object], key: str) -> str | None:
    """A non-empty string option, else None."""
    value = options.get(key)
    return value if isinstance(value, str) and value.strip() else None


def tip_name(story: Unit, context: Context, git: GitView) -> str:
    """The tip to check against: the unit's branch when its format names one, else the
    detector's `branch` option, else the context's tip, else the checked-out branch
    (`HEAD` when detached)."""
    return story.branch or str_option(context.options, "branch") or context.tip or git.head_name()


def format_says(format: str, capability: str) -> bool:
    """A format adapter's yes/no capability (`ordered`, `records_commits`); True for a
    format no longer installed, so it is checked as before."""
    from storyd.core.errors import UsageError
    from storyd.core.formats import named

    try:
        return bool(getattr(named(format), capability, True))
    except UsageError:
        return True


def no_tip(detector: str, tip: str, workspace: str | None = None) -> Finding:
    """The finding for a tip git finds no commit at: info for a branch not created yet;
    a `repository-corrupt` warning when the ref files do name a commit that git cannot
    read (a truncated pack, lost objects), never "0 problems"."""
    named = _ref_sha(workspace, tip) if workspace is not None else None
    if named is not None:
        message = (
            f"{tip} points at {named[:12]}, which the repository cannot read (a truncated "
            "pack or lost objects?): the commits are not checked; run `git fsck`"
        )
        return Finding(detector, "repository-corrupt", "warning", message)
    return Finding(
        detector, "no-tip", "info", f"{tip} does not name a commit in the repository; not checked"
    )


def _ref_sha(workspace: str, tip: str) -> str | None:
    """The sha the ref files give for `tip` (a branch, `HEAD`, a full ref), no objects read."""
    where = locate(workspace)
    if where is None:
        return None
    if tip == "HEAD":
        return where.head_commit()
    for ref in (tip, f"refs/heads/{tip}", f"refs/remotes/{tip}", f"refs/tags/{tip}"):
        sha = where.resolve(ref) if ref.startswith("refs/") else None
        if sha is not None:
            return sha
    return None


def git_failed(detector: str, exc: GitError) -> Finding:
    """The error finding for a git failure during a check."""
    return Finding(detector, "git-error", "error", exc.message)
