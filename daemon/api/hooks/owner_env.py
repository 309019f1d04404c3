"""Leave the session's owner in the agent's environment: Claude Code's `$CLAUDE_ENV_FILE`.

Claude Code gives its SessionStart hooks a file, `$CLAUDE_ENV_FILE`, and sources the
`export` lines they append to it before each command of its Bash tool. `export
STORYD_OWNER='session:<id>'` there makes the agent's own `storyd claim`, `release` and
`reconcile` act as its session (storyd.api.claims.default_owner reads $STORYD_OWNER).

The file is Claude Code's, and its path and the session id come from outside: one line
is appended, and only to a regular file of the user's with one link, at most MAX_BYTES
long, opened O_APPEND|O_NOFOLLOW|O_NONBLOCK (a symlink, a FIFO, a device, a folder or
another user's file there is left alone, never waited on); the id is written only when
it is 1 to MAX_ID characters of SAFE (a UUID's, and `_` and `.`), so the quoted line
cannot say anything else. Any failure: nothing written, nothing said.
"""

from __future__ import annotations

import os
import stat

__all__ = ["MAX_BYTES", "MAX_ID", "SAFE", "export_owner", "owner_line"]

SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
MAX_ID = 128
MAX_BYTES = 1 << 20  # an env file longer than this is not Claude Code's usual few lines


def owner_line(session: str | None) -> str | None:
    """`export STORYD_OWNER='session:<id>'`, or None for an id that is not SAFE."""
    if not session or len(session) > MAX_ID or not SAFE.issuperset(session):
        return None
    return f"export STORYD_OWNER='session:{session}'\n"


def export_owner(path: str | None, session: str | None) -> bool:
    """Append the owner's export line to the env file at `path`; whether it was written."""
    line = owner_line(session)
    if line is None or not path or "\0" in path or not os.path.isabs(path):
        return False
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError:
        return False
    try:
        found = os.fstat(fd)
        if (not stat.S_ISREG(found.st_mode) or found.st_uid != os.getuid()
                or found.st_nlink != 1 or found.st_size > MAX_BYTES):  # fmt: skip
            return False
        data = ("\n" if found.st_size else "") + line  # a last line left unended stays whole
        return os.write(fd, data.encode("ascii")) == len(data)
    except OSError:
        return False
    finally:
        os.close(fd)
