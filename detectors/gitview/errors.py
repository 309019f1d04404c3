"""The one boundary where GitPython's, gitdb's and the OS's errors become GitError.

Every call into GitPython runs inside `_translated`, so a detector only ever sees
storyd.core.errors.GitError (which it turns into a `git-error` finding).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from storyd.core.errors import GitError

__all__ = ["_describe", "_foreign_errors", "_git_module", "_translated"]


def _foreign_errors() -> tuple[type[BaseException], ...]:
    """GitPython's, gitdb's and the OS's exception types."""
    import git.exc

    return (git.exc.GitError, git.exc.ODBError, OSError, ValueError, subprocess.SubprocessError)


@contextmanager
def _translated(what: str) -> Iterator[None]:
    """Run a block; any GitPython, gitdb or OS error leaves it as GitError."""
    try:
        yield
    except GitError:
        raise
    except _foreign_errors() as exc:
        msg = f"git {what} failed: {_describe(exc)}"
        raise GitError(msg) from exc


def _describe(exc: BaseException) -> str:
    """A one-line description of a foreign error (GitPython's are multi-line)."""
    stderr = getattr(exc, "stderr", None)
    if isinstance(stderr, str) and stderr.strip():
        text = stderr.strip().removeprefix("stderr:").strip(" '\n")
        return " ".join(text.split())[:300]
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


def _git_module() -> Any | None:
    """GitPython, or None when it cannot start (git is not installed)."""
    try:
        import git
    except Exception:  # GitPython raises ImportError, or worse, when git is absent
        return None
    return git
