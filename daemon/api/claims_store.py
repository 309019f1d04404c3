"""The claims database on one machine: who holds which unit or task, until when, and the
fencing token of each grant.

`$XDG_STATE_HOME/storyd/claims.sqlite3` (beside the history database; `$STORYD_CLAIMS`
overrides), SQLite from the standard library in WAL mode, file mode 0600. Every process
writes it (the daemon, `storyd claim` without a daemon, the hooks): a grant is one
`BEGIN IMMEDIATE` transaction, which SQLite serialises across processes, so of any
number of claimants exactly one finds the unit free and takes it. A writer that waits
longer than `busy` seconds for another's transaction gives LockTimeout (75), as the
history store's readers do. Every open and every transaction holds an exclusive flock
of `claims.sqlite3.lock` (flock wakes the next writer at once, where SQLite's busy wait
sleeps), so one process makes, checks or moves the file at a time. A file that is not
a database is moved aside as `claims.sqlite3.corrupt-<time>` and a new one started
whose tokens begin above any the old one could have given (the time in milliseconds),
so a token still only grows.

    claims  one row per (workspace, state file, unit, task): owner, token, granted,
            renewed, expires, last (what storyd last saw of the unit, JSON); '' is
            "the whole state file" for unit and "the whole unit" for task
    tokens  per (workspace, state file, unit): the last token given (only grows)
    log     grants, renewals, releases, expiries and forced writes, with their token
    lost    `claim-lost`: a write to a claimed unit's state by an owner without the
            current grant (the writer, its token if any, the holder and its token)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import Iterator

from storyd.core.errors import LockTimeout, SetupError

__all__ = ["COLUMNS", "SCHEMA", "connect", "default_path", "locked", "transaction"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS claims(
    workspace TEXT NOT NULL, state_file TEXT NOT NULL, unit TEXT NOT NULL, task TEXT NOT NULL,
    owner TEXT NOT NULL, token INTEGER NOT NULL, granted REAL NOT NULL, renewed REAL NOT NULL,
    expires REAL NOT NULL, last TEXT,
    PRIMARY KEY(workspace, state_file, unit, task));
CREATE TABLE IF NOT EXISTS tokens(
    workspace TEXT NOT NULL, state_file TEXT NOT NULL, unit TEXT NOT NULL,
    token INTEGER NOT NULL, PRIMARY KEY(workspace, state_file, unit));
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS log(
    id INTEGER PRIMARY KEY, at REAL NOT NULL, workspace TEXT NOT NULL, state_file TEXT NOT NULL,
    unit TEXT NOT NULL, task TEXT NOT NULL, owner TEXT NOT NULL, token INTEGER,
    kind TEXT NOT NULL, detail TEXT);
CREATE TABLE IF NOT EXISTS lost(
    id INTEGER PRIMARY KEY, at REAL NOT NULL, workspace TEXT NOT NULL,
    state_file TEXT NOT NULL, unit TEXT NOT NULL, owner TEXT NOT NULL, token INTEGER,
    holder TEXT NOT NULL, current INTEGER NOT NULL, told INTEGER NOT NULL DEFAULT 0,
    UNIQUE(workspace, state_file, unit, owner, current));
"""

COLUMNS = "workspace, state_file, unit, task, owner, token, granted, renewed, expires, last"


def default_path() -> str:
    """$STORYD_CLAIMS, else $XDG_STATE_HOME/storyd/claims.sqlite3 (~/.local/state)."""
    from storyd.api.claims_path import claims_path

    return claims_path()


class Connection(sqlite3.Connection):
    """A connection to the claims database, with the lock file that orders its writers
    (flock(2) wakes the next waiter at once; SQLite's own busy wait sleeps up to 100 ms
    at a time, and 16 racing writers then spend seconds asleep)."""

    lock_path = ""
    busy = 5.0


def _open(path: str, busy: float) -> sqlite3.Connection:
    old = os.umask(0o077)
    try:
        conn = sqlite3.connect(path, timeout=busy, check_same_thread=False,
                               isolation_level=None, factory=Connection)  # fmt: skip
    finally:
        os.umask(old)
    conn.lock_path = path + ".lock"
    conn.busy = busy
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        if conn.execute("SELECT count(*) FROM sqlite_master WHERE name='lost'").fetchone()[0]:
            return conn
        conn.executescript(SCHEMA)
    except BaseException:
        conn.close()
        raise
    return conn


def _move_aside(path: str, busy: float) -> sqlite3.Connection:
    """A database that fails to open is moved aside, a new one made with its token floor
    (the time in ms: above any token the old one gave). Called under the lock file."""
    moved = f"{path}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}"
    os.replace(path, moved)
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.replace(path + suffix, moved + suffix)
    import sys

    sys.stderr.write(f"storyd: claims database {path} was corrupt: moved to {moved}\n")
    conn = _open(path, busy)
    conn.execute("INSERT OR REPLACE INTO meta VALUES('floor', ?)", (int(time.time() * 1000),))
    return conn


def _locked(exc: sqlite3.Error) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


def connect(path: str | None = None, busy: float = 5.0) -> sqlite3.Connection:
    """The claims database for reading and writing (made on first use). LockTimeout (75)
    when another process holds it past `busy` seconds; SetupError (78) when its folder
    cannot be made or the file cannot be opened."""
    path = path or default_path()
    try:
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    except OSError as exc:
        raise SetupError(f"cannot create {os.path.dirname(path)}: {exc.strerror}") from None
    try:
        # opened (made, checked, moved aside) under the writers' lock file: a process
        # that meets a database another is still making never takes it for corrupt
        with locked(path + ".lock", busy):
            try:
                conn = _open(path, busy)
            except sqlite3.DatabaseError as exc:
                if _locked(exc):
                    raise
                conn = _move_aside(path, busy)
        with contextlib.suppress(OSError):
            os.chmod(path, 0o600)
        return conn
    except sqlite3.OperationalError as exc:
        if _locked(exc):
            raise LockTimeout(f"claims database {path} is locked: waited {busy:g} s") from None
        raise SetupError(f"cannot open claims database {path}: {exc}") from None
    except (OSError, sqlite3.Error) as exc:
        raise SetupError(f"cannot open claims database {path}: {exc}") from None


def _lock(fd: int, path: str, busy: float) -> bool:
    """flock(2) LOCK_EX on `fd` within `busy` seconds. The wait is the kernel's (a
    releasing writer wakes the waiters at once; polling with sleeps lets a busy writer
    take the lock again and again, starving the others past 5 s with 4 of them), on a
    helper thread so that it is bounded: True when held; False when the wait ended, the
    helper then owning `fd` (it closes it, freeing the lock, when it gets it)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        pass
    got = threading.Event()
    guard = threading.Lock()
    left: list[bool] = []

    def wait() -> None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with guard:
            if left:
                os.close(fd)
            else:
                got.set()

    threading.Thread(target=wait, name="claims-lock", daemon=True).start()
    if got.wait(busy):
        return True
    with guard:
        if got.is_set():
            return True
        left.append(True)
    return False


@contextlib.contextmanager
def locked(path: str, busy: float) -> Iterator[None]:
    """The lock file `path` held exclusively; LockTimeout (75) after `busy` seconds."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    if not _lock(fd, path, busy):
        msg = f"{path}: another process has held the claims lock for more than {busy:g} s"
        raise LockTimeout(msg)
    try:
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection, path: str = "claims database") -> Iterator[None]:
    """BEGIN IMMEDIATE … COMMIT (ROLLBACK on any error) under the lock file: the write
    lock is taken at the start, so what the transaction reads no other process changes
    before it commits."""
    lock_path = getattr(conn, "lock_path", "")
    with locked(lock_path, float(getattr(conn, "busy", 5.0))) if lock_path else \
            contextlib.nullcontext():
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if _locked(exc):
                raise LockTimeout(f"{path} is locked: another process holds it") from None
            raise SetupError(f"cannot write {path}: {exc}") from None
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise SetupError(f"cannot write {path}: {exc}") from None
