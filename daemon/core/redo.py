"""The redo record of an in-place write, and finishing a killed one, exactly once.

reconcile writes a state file's new bytes INTO the locked file (api/reconcile/atomic.py
`overwrite`), so that no writer holding its own descriptor loses an update. A kill in
the middle of that write leaves the file torn: the new bytes up to some offset, the old
bytes after it. So before it writes, under the writers' `flock -x`, it saves a redo
record: a header line, the old bytes and the new ones, fsynced. The record is removed,
under the same lock, once the file holds the new bytes.

Where records live, and why (issue 39). A record is obeyed only when storyd itself wrote
it for that very file, because obeying one writes into a file. So records are kept in
storyd's private state folder, `$XDG_STATE_HOME/storyd/redo/` (0700), never beside the
state file where a repository could ship one; each is named after the file's device
and inode and bound to them, to the file's real path, to this user's uid (the record's
owner, mode 0600), to the sha256 of the old and new bytes, and to the time it was
written (at most `MAX_AGE` old). A record that fails any of these is ignored and
reported (`check`), never obeyed; so is a record beside a state file
(`.<name>.storyd-redo`, where storyd before issue 39 kept them, or a repository's).

Readers never recover (readers do not write): a read that finds a pending record says
so (`pending`), and the answer carries the finding. `storyd reconcile --recover`,
`--apply` and `--undo` finish it (`recover`), under the lock, by what the file holds (B
the old bytes, A the new ones, P: A padded with blanks to B's length, what the write
wrote):

    B                      the write never began: the old file stands; record dropped
    A, or P                the write finished (P: not yet truncated): truncated to A
    P[:k] + B[k:]          torn mid-write: A written whole, then truncated
    anything else          a newer writer's update (it took the lock after the kill):
                           left as it is; record dropped

Each step is under the lock, and the record goes only after the file is fsynced, so a
kill during recovery leaves a file of the same forms and the record: it is finished
once, and never over a newer writer's bytes.
"""

from __future__ import annotations

import os

from storyd.core.durable import fsync, fsync_dir, read_fd

__all__ = [
    "FOREIGN_MARK",
    "MAX_AGE",
    "Record",
    "decode",
    "encode",
    "finish",
    "foreign_path",
    "header_path",
    "pending",
    "prepare_dir",
    "record_dir",
    "record_path",
    "recover",
]

FOREIGN_MARK = ".storyd-redo"  # beside a state file: never storyd's since issue 39
MAX_AGE = 7 * 24 * 3600  # seconds: an older record is reported, not obeyed
_MAGIC = b"storyd-redo 2 "
_HEADER_MAX = 8192


def record_dir() -> str:
    """$XDG_STATE_HOME/storyd/redo: the only folder storyd takes redo records from."""
    from storyd.core.paths import state_dir

    return os.path.join(state_dir(), "redo")


def record_path(st: os.stat_result) -> str:
    """The record of the file with this stat (its device and inode)."""
    return os.path.join(record_dir(), f"{st.st_dev:x}-{st.st_ino:x}.redo")


def foreign_path(path: str) -> str:
    """Where a record beside `path` would lie (never obeyed: reported)."""
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f".{name}{FOREIGN_MARK}")


class Record:
    """A decoded record: what it is bound to, and the old and new bytes."""

    __slots__ = ("after", "before", "created", "dev", "ino", "path", "uid")

    def __init__(self, *, path: str, dev: int, ino: int, uid: int, created: int,
                 before: bytes, after: bytes) -> None:
        self.path = path
        self.dev = dev
        self.ino = ino
        self.uid = uid
        self.created = created
        self.before = before
        self.after = after


def _digest(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def encode(path: str, st: os.stat_result, before: bytes, after: bytes,
           now: float | None = None) -> bytes:
    """A record for the file `path` (real path) with stat `st`: a header line binding it,
    then the old bytes and the new."""
    import json
    import time

    header = {
        "path": os.path.realpath(path), "dev": st.st_dev, "ino": st.st_ino,
        "uid": os.getuid(), "created": int(time.time() if now is None else now),
        "before": [len(before), _digest(before)], "after": [len(after), _digest(after)],
    }
    line = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode()
    return _MAGIC + line + b"\n" + before + after


def decode(record: bytes) -> Record | None:
    """The record, or None for a torn or foreign one (a kill while the record itself was
    written: the file was not touched yet; or bytes storyd did not write)."""
    import json

    head, newline, _rest = record[:_HEADER_MAX].partition(b"\n")
    if not newline or not head.startswith(_MAGIC):
        return None
    try:
        fields = json.loads(head[len(_MAGIC):])
        (old, old_sum), (new, new_sum) = fields["before"], fields["after"]
        body = record[len(head) + 1:]
        if not (isinstance(old, int) and isinstance(new, int) and old >= 0
                and new >= 0 and len(body) == old + new):
            return None
        before, after = body[:old], body[old:]
        if _digest(before) != old_sum or _digest(after) != new_sum:
            return None
        return Record(path=str(fields["path"]), dev=int(fields["dev"]),
                      ino=int(fields["ino"]), uid=int(fields["uid"]),
                      created=int(fields["created"]), before=before, after=after)
    except (ValueError, TypeError, KeyError):
        return None


def _refusal(record: Record | None, st: os.stat_result, path: str, owner: int) -> str | None:
    """Why a record may not be obeyed for the file `path` with stat `st`; None if it may."""
    import time

    if record is None or owner == -1:
        return "not a whole redo record storyd wrote (or not a regular 0600 file)"
    if owner != os.getuid() or record.uid != os.getuid():
        return f"written by uid {record.uid}, not this user"
    if (record.dev, record.ino) != (st.st_dev, st.st_ino):
        return "written for another file (device and inode differ)"
    if record.path != os.path.realpath(path):
        return f"written for {record.path}"
    age = time.time() - record.created
    if age > MAX_AGE or age < -60:
        return f"written {int(age // 3600)} h ago, older than the {MAX_AGE // 3600} h limit"
    return None


def _read_record(where: str, limit: int) -> tuple[bytes, int] | None:
    """A record file's bytes and owner: never following a link, never blocking, bounded."""
    import stat

    try:
        fd = os.open(where, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError:  # ELOOP: a link, never followed
        return b"", -1
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit or st.st_mode & 0o022:
            return b"", -1  # not a record storyd wrote: never obeyed
        return os.read(fd, limit + 1)[: limit + 1], st.st_uid
    finally:
        os.close(fd)


def prepare_dir() -> str:
    """The record folder, made 0700 if missing; OSError unless it is this user's own
    folder (not a link, not writable by others)."""
    import errno
    import stat

    where = record_dir()
    os.makedirs(where, mode=0o700, exist_ok=True)
    st = os.lstat(where)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise OSError(errno.EPERM, "not this user's private folder", where)
    return where


def _limit() -> int:
    from storyd.core.switches import CONFIG

    return 2 * CONFIG.max_state_bytes + _HEADER_MAX


def header_path(where: str) -> str | None:
    """The real path a record file names (its header alone; nothing is verified)."""
    import json

    try:
        fd = os.open(where, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        head = os.read(fd, _HEADER_MAX).partition(b"\n")[0]
        if not head.startswith(_MAGIC):
            return None
        path = json.loads(head[len(_MAGIC):]).get("path")
    except (OSError, ValueError, AttributeError):
        return None
    finally:
        os.close(fd)
    return path if isinstance(path, str) else None


def pending(path: str, st: os.stat_result) -> str | None:
    """A reader's look (no write): "pending" when storyd's own record waits for the file
    `path` (stat `st`), "foreign" when only a record storyd may not obey lies there (one
    beside the file, or one failing its bindings), else None. Two stats when none."""
    mine = record_path(st)
    if os.path.lexists(mine):
        try:
            got = _read_record(mine, _limit())
        except OSError:
            return "foreign"
        if got is not None:
            data, owner = got
            record = decode(data)
            if record is None and owner == os.getuid():
                return "pending"  # torn while written: the next recover drops it
            return "pending" if _refusal(record, st, path, owner) is None else "foreign"
    if os.path.lexists(foreign_path(path)):
        return "foreign"
    return None


def finish(current: bytes, before: bytes, after: bytes) -> bool | None:
    """Whether the file holding `current` must be given `after` (True), already holds it
    whole or never got it (False: nothing to write but the truncation, see `recover`),
    or holds a newer writer's bytes (None)."""
    padded = after + b" " * (len(before) - len(after))
    if current in (before, after):
        return False
    if current == padded:
        return True  # written, not yet truncated
    k = _common_prefix(current, padded)
    if current == padded[:k] + before[k:]:
        return True
    return None


def _common_prefix(one: bytes, other: bytes) -> int:
    """How many leading bytes `one` and `other` share (a binary search on slices)."""
    low, high = 0, min(len(one), len(other))
    while low < high:
        middle = (low + high + 1) // 2
        if one[:middle] == other[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def recover(fd: int, path: str) -> str | None:
    """Under `flock -x` on `path` (`fd`, opened for writing): finish a killed in-place
    write from storyd's own record for this file, then remove the record. What was done:
    "finished" (the new bytes written whole), "kept" (the file was whole, old or new,
    or a newer writer's), "ignored: WHY" (a record that may not be obeyed: left where
    it is, untouched), or None (no record)."""
    st = os.fstat(fd)
    where = record_path(st)
    got = _read_record(where, _limit())
    if got is None:
        return None
    data, owner = got
    record = decode(data)
    why = _refusal(record, st, path, owner)
    if record is None and owner == os.getuid():
        why = None  # torn in our own folder: killed while written, the file untouched
    if why is not None:
        return f"ignored: {why}"
    outcome = "kept"
    if record is None:
        os.unlink(where)
        fsync_dir(os.path.dirname(where))
        return outcome
    current = read_fd(fd)
    if finish(current, record.before, record.after):
        padded = record.after + b" " * (len(record.before) - len(record.after))
        view, offset = memoryview(padded), 0
        while offset < len(padded):
            offset += os.pwrite(fd, view[offset:], offset)
        os.ftruncate(fd, len(record.after))
        fsync(fd)
        outcome = "finished"
    os.unlink(where)
    fsync_dir(os.path.dirname(where))
    return outcome
