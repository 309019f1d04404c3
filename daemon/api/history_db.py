"""The history database: where it lives, its schema, and opening it to read or to write.

`$XDG_STATE_HOME/storyd/history.sqlite3` (default `~/.local/state`), SQLite from the
standard library in WAL mode, file mode 0600. One writer: the daemon that holds the
lock file beside it (`history.sqlite3.lock`, `flock -x -n`) writes; any other daemon
runs without recording. Readers (`storyd history`) open it read-only and wait at most
`busy` seconds for a lock, then say so (LockTimeout, 75). A file that is not a database
(or fails SQLite's quick check) is moved aside as `history.sqlite3.corrupt-<time>` by
the writer, with one log line, and a new one is started.

    units     one row per (workspace, state file, unit)
    tasks     a unit's distinct task states as JSON, deduplicated by hash
    envelopes distinct summaries as JSON, deduplicated by hash
    versions  one row per version: unit, time, clock, source (daemon or git:<sha>),
              kind (changed, removed, accepted), tasks done/total, its tasks (packed
              ids of `tasks` rows), its envelope
    marks     per unit, its held progress (history_rules.py) as JSON
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import time

from storyd.core.errors import LockTimeout, SetupError
from storyd.core.regular import NotRegularFile, open_regular

__all__ = ["CACHE_KIB", "SCHEMA", "Writer", "default_path", "open_reader", "open_writer"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS units(
    id INTEGER PRIMARY KEY, workspace TEXT NOT NULL, state_file TEXT NOT NULL,
    unit TEXT NOT NULL, format TEXT NOT NULL, UNIQUE(workspace, state_file, unit));
CREATE TABLE IF NOT EXISTS tasks(
    id INTEGER PRIMARY KEY, unit_id INTEGER NOT NULL, hash INTEGER NOT NULL,
    body TEXT NOT NULL, UNIQUE(unit_id, hash));
CREATE TABLE IF NOT EXISTS envelopes(
    id INTEGER PRIMARY KEY, hash INTEGER NOT NULL UNIQUE, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS versions(
    id INTEGER PRIMARY KEY, unit_id INTEGER NOT NULL, at REAL NOT NULL, clock TEXT,
    source TEXT NOT NULL, kind TEXT NOT NULL, done INTEGER NOT NULL, total INTEGER NOT NULL,
    tasks BLOB, envelope INTEGER);
CREATE INDEX IF NOT EXISTS versions_unit ON versions(unit_id, id);
CREATE TABLE IF NOT EXISTS marks(unit_id INTEGER PRIMARY KEY, body TEXT NOT NULL);
"""


CACHE_KIB = 512  # the writer's page cache (SQLite's default is 2,000 KiB; see docs/history.md)


def default_path() -> str:
    """$STORYD_HISTORY, else $XDG_STATE_HOME/storyd/history.sqlite3 (~/.local/state)."""
    from storyd.core.paths import history_path

    return history_path()


def configured_or_default() -> str:
    """The database read (and accepted into) without the daemon: where the configuration
    has the daemon record ([history] path: config.loader.history_database), or the
    default one while [history] is off (the versions it holds are still shown)."""
    from storyd.config.loader import history_database

    return history_database() or default_path()


def open_reader(path: str, busy: float = 2.0) -> sqlite3.Connection:
    """The database read-only; SetupError (78) when it does not exist or is not a
    regular file (SQLite's read-only open(2) of a FIFO waits for a writer for ever; the
    writer's read-write one does not, and moves it aside as corrupt)."""
    try:
        os.close(open_regular(path))
    except FileNotFoundError:
        raise SetupError(f"no history yet: {path} does not exist (the daemon records it)") from None
    except NotRegularFile as exc:
        raise SetupError(f"cannot read history database {path}: {exc.strerror}") from None
    except OSError:
        pass  # SQLite says why in its own words below
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=busy,
                               check_same_thread=False)  # fmt: skip
        conn.execute("SELECT 1 FROM versions LIMIT 1").fetchall()
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise LockTimeout(f"history database {path} is locked: waited {busy:g} s") from None
        raise SetupError(f"cannot read history database {path}: {exc}") from None
    except sqlite3.DatabaseError as exc:
        raise SetupError(f"history database {path} is not readable: {exc}") from None
    return conn


class Writer:
    """The one writer's connection and its lock file."""

    def __init__(self, conn: sqlite3.Connection, lock_fd: int, path: str, moved: str | None):
        self.conn = conn
        self.lock_fd = lock_fd
        self.path = path
        self.moved = moved  # where a corrupt database was moved, or None

    def close(self) -> None:
        """Close the connection and free the lock."""
        try:
            self.conn.close()
        finally:
            os.close(self.lock_fd)


def _lock(path: str) -> int:
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise LockTimeout(
            f"another daemon writes {path}: this one does not record history"
        ) from None
    return fd


def _connect(path: str) -> sqlite3.Connection:
    old = os.umask(0o077)
    try:
        conn = sqlite3.connect(path, timeout=5.0, check_same_thread=False, isolation_level=None)
    finally:
        os.umask(old)
    conn.execute("PRAGMA auto_vacuum=INCREMENTAL")  # a new file only: pruning gives space back
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
    ok = conn.execute("PRAGMA quick_check").fetchone()
    if ok is None or ok[0] != "ok":
        conn.close()
        raise sqlite3.DatabaseError(f"quick_check: {ok[0] if ok else 'no answer'}")
    conn.executescript(SCHEMA)
    os.chmod(path, 0o600)
    return conn


def open_writer(path: str) -> Writer:
    """The database for writing, under its lock file. A corrupt one is moved aside (its
    new name in `Writer.moved`) and a new one started; LockTimeout when another daemon
    holds the lock; SetupError when the folder cannot be made or written."""
    try:
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    except OSError as exc:
        raise SetupError(f"cannot create {os.path.dirname(path)}: {exc.strerror}") from None
    fd = _lock(path)
    moved = None
    try:
        try:
            conn = _connect(path)
        except sqlite3.DatabaseError:
            moved = f"{path}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}"
            os.replace(path, moved)
            for suffix in ("-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.replace(path + suffix, moved + suffix)
            conn = _connect(path)
    except (OSError, sqlite3.Error) as exc:
        os.close(fd)
        raise SetupError(f"cannot open history database {path}: {exc}") from None
    return Writer(conn, fd, path, moved)
