"""The one boundary where the OS's errors become GitError.

Every git process is started inside `_translated`, so a detector only ever sees
storyd.core.errors.GitError (which it turns into a `git-error` finding). git itself
is found on PATH (`git_executable`): the views run git's plumbing, with deadlines,
and import no git library (GitPython's import alone cost a hook ~30 ms; it is no
longer a dependency: docs/design.md, "git without GitPython").
"""

from __future__ import annotations

from storyd.core.errors import GitError

TYPE_CHECKING = False  # annotations only (daemon/core/model.py)
if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["_describe", "_foreign_errors", "_translated", "git_executable"]


def _foreign_errors() -> tuple[type[BaseException], ...]:
    """The OS's exception types (git runs through storyd.detectors.gitview.spawn, not
    subprocess: its failures are OSError, a timeout TimeoutError)."""
    return (OSError, ValueError)


class _translated:
    """Run a block; any OS error leaves it as GitError (a class, not contextlib's
    contextmanager: contextlib's import costs a hook's start)."""

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 _tb: TracebackType | None) -> None:  # fmt: skip
        if exc is None or isinstance(exc, GitError) or not isinstance(exc, _foreign_errors()):
            return
        msg = f"git {self.what} failed: {_describe(exc)}"
        raise GitError(msg) from exc


def _describe(exc: BaseException) -> str:
    """A one-line description of a foreign error."""
    stderr = getattr(exc, "stderr", None)
    if isinstance(stderr, str) and stderr.strip():
        text = stderr.strip().removeprefix("stderr:").strip(" '\n")
        return " ".join(text.split())[:300]
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


def git_executable() -> str | None:
    """The git on PATH, or None when git is not installed (shutil.which's answer,
    without shutil's import: storyd.core.paths.which)."""
    from storyd.core.paths import which

    return which("git")
