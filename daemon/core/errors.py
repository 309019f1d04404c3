"""storyd's error hierarchy: every failure a user can see, with its exit code.

    StorydError (70, internal)
    ├── StateFileMissing (1)      the state file is absent or not a regular file
    ├── StoryNotInState (2)       the unit is not in the state file
    ├── UsageError (64)           bad flags, ids, or request fields
    │   ├── FlagError (64)            a flag the parser refuses (its message ends with
    │   │                             the usage line, so it is printed as it is)
    │   └── containment.Refused (64)  a state path leads out of the workspace or into
    │                                 git's folders (never read or written)
    ├── DataError (65)            the state file is not valid JSON or not the expected shape
    ├── LockTimeout (75)          a writer held the lock longer than the bound
    │   ├── reconcile.plan.Moved (75)   a state file changed between the findings and the
    │   │                             plan (made again, then this)
    │   ├── reconcile.apply.GitOperationUnderWay (75)  a rebase, merge, ... is stopped
    │   │                             mid-way: reconcile --apply waits for its end
    │   ├── api.claims.Held (75)  another owner holds the claim (or a newer grant exists)
    │   └── fleet.claims_kv.FleetOffline (75)  a fleet unit, and the server cannot be reached
    ├── GitError (70)             git failed or the repository cannot be read (detectors
    │                             turn it into a finding; it never reaches a client)
    │   └── storyd.detectors.gitview.proc.GitStuck (70)  git did not answer in time (killed), or
    │                             would not (a FIFO where it reads a file)
    ├── SetupError (78)           the environment is misconfigured:
    │   ├── config.ConfigError (78)       config.toml has problems (each with field and line)
    │   ├── server.systemd.SystemdError (78)  a passed socket is not what the unit promises
    │   └── server.launchd.LaunchdError (78)  launchd's socket cannot be taken, or is not one
    ├── server.bind.AlreadyRunning (1)    another daemon answers on the socket
    ├── server.subscribers.TooManySubscribers (75)  `limits.max_subscribers` are subscribed
    ├── server.hookop.Unanswered (75)     the `hook` op leaves this hook to `storyd hook`
    ├── reconcile.undo.NothingToUndo (1)  `reconcile --undo` with no apply recorded
    ├── reconcile.undo.UndoRefused (65)   a file changed after the apply; undo would lose it
    ├── reconcile.failures.WriteFailed (74)  reconcile could not write: disk full, I/O error
    │   └── reconcile.failures.WriteDenied (77)  reconcile may not write there (EACCES, EROFS)
    ├── commands.install.UnitWriteError (73)  a systemd unit file cannot be written
    ├── commands.mcp_serve.ExtraMissing (69)  `storyd mcp` without the `mcp` extra
    ├── commands.top.Unavailable (69)         `storyd top` (live) without the `tui` extra
    └── fleet.reader.FleetUnavailable (69)    `storyd fleet`: the NATS server cannot be read

Every subclass anywhere in storyd is listed here, with its code: tests/test_errors.py
imports every module and checks this tree against the classes it finds.

The codes are the seed skill's (0, 1, 2, 64) plus sysexits for the rest; the socket
protocol reuses them in `{ok: false, error: {code, name, message}}`.
"""

from __future__ import annotations

__all__ = [
    "DataError",
    "FlagError",
    "GitError",
    "LockTimeout",
    "SetupError",
    "StateFileMissing",
    "StoryNotInState",
    "StorydError",
    "UsageError",
    "name_of",
]


class StorydError(Exception):
    """A failure with an exit code and a one-line message for stderr."""

    code = 70
    name = "INTERNAL_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class StateFileMissing(StorydError):
    """The state file is absent or not a regular file."""

    code = 1
    name = "STATE_FILE_MISSING"


class StoryNotInState(StorydError):
    """The requested unit is not registered in the state file."""

    code = 2
    name = "STORY_NOT_IN_STATE"


class UsageError(StorydError):
    """Unknown, missing or malformed flags, ids or request fields."""

    code = 64
    name = "EX_USAGE"


class FlagError(UsageError):
    """An unknown flag, a missing value or a stray word; the message ends with the usage.

    `storyd <command>` prints it as it is, where other errors get a `storyd <command>: `
    prefix (see daemon/cli/__init__.py).
    """


class DataError(StorydError):
    """A state file that is not valid JSON, or not the shape its format requires."""

    code = 65
    name = "EX_DATAERR"


class LockTimeout(StorydError):
    """A writer held its exclusive lock longer than the configured bound."""

    code = 75
    name = "EX_TEMPFAIL"


class SetupError(StorydError):
    """The configuration, the service setup or a plugin is wrong (sysexits EX_CONFIG)."""

    code = 78
    name = "EX_CONFIG"


class GitError(StorydError):
    """A git command failed, or the repository cannot be read."""

    code = 70
    name = "GIT_ERROR"


def name_of(code: int) -> str:
    """The protocol's error name for an exit code (INTERNAL_ERROR for any other)."""
    for cls in (StateFileMissing, StoryNotInState, UsageError, DataError, LockTimeout, SetupError):
        if cls.code == code:
            return cls.name
    return StorydError.name
