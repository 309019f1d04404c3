"""Helpers the built-in detectors share: options, the tip to check, common findings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from storyd.core.model import Finding

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


def no_tip(detector: str, tip: str) -> Finding:
    """The info finding for a tip that names no commit (a branch not created yet)."""
    return Finding(
        detector, "no-tip", "info", f"{tip} does not name a commit in the repository; not checked"
    )


def git_failed(detector: str, exc: GitError) -> Finding:
    """The error finding for a git failure during a check."""
    return Finding(detector, "git-error", "error", exc.message)
