"""A failure reported by the daemon or the resume path, as the typed error for its code.

The doors catch StorydError and use its `code` (the exit code) and `message`; the
daemon's `{ok: false, error: {code, name, message}}` and a resume Output's exit code
become the same classes a direct read raises (daemon/core/errors.py).
"""

from __future__ import annotations

from storyd.core.errors import (
    DataError,
    LockTimeout,
    SetupError,
    StateFileMissing,
    StorydError,
    StoryNotInState,
    UsageError,
)

__all__ = ["error_for", "refusal", "refused"]

_BY_CODE: dict[int, type[StorydError]] = {
    cls.code: cls
    for cls in (StateFileMissing, StoryNotInState, UsageError, DataError, LockTimeout, SetupError)
}


def error_for(code: int, message: str) -> StorydError:
    """The typed error for an exit code (a plain StorydError carrying any other code)."""
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls(message)
    exc = StorydError(message)
    exc.code = code
    return exc


def _message(answer: dict[str, object]) -> str:
    error = answer.get("error")
    return str(error.get("message") if isinstance(error, dict) else None)


def refusal(answer: dict[str, object]) -> UsageError:
    """A daemon's `ok: false` answer to a listing as a UsageError (its message)."""
    return UsageError(_message(answer))


def refused(answer: dict[str, object]) -> StorydError:
    """A daemon's `ok: false` answer as the typed error for the code it carries (a
    UsageError when it carries none)."""
    error = answer.get("error")
    if isinstance(error, dict) and isinstance(error.get("code"), int):
        return error_for(int(error["code"]), _message(answer))
    return refusal(answer)
