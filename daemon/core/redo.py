"""The redo record of an in-place write, and finishing a killed one, exactly once.

reconcile writes a state file's new bytes INTO the locked file (api/reconcile/atomic.py
`overwrite`), so that no writer holding its own descriptor loses an update. A kill in
the middle of that write leaves the file torn: the new bytes up to some offset, the old
bytes after it. So before it writes, under the writers' `flock -x`, it saves a redo
record beside the file, `.<name>.storyd-redo`: a header line, the old bytes and the new
ones, fsynced. The record is removed, under the same lock, once the file holds the new
bytes. A record found under `flock -x` is therefore always a dead writer's.

Whoever next takes `flock -x` on the file (reconcile's apply or undo, or any storyd read
that sees the record: the daemon's, `--direct`'s, a hook's) calls `recover`, which looks
at what the file holds and acts by the record's old bytes B and new bytes A (P: A padded
with blanks to B's length, what the one write wrote):

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

from storyd.core.durable import fsync_dir, read_fd

__all__ = ["REDO_MARK", "decode", "encode", "recover", "redo_path"]

REDO_MARK = ".storyd-redo"
_MAGIC = b"storyd-redo 1 "


def redo_path(path: str) -> str:
    """Where the redo record of `path` lives (beside it, hidden)."""
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f".{name}{REDO_MARK}")


def encode(before: bytes, after: bytes) -> bytes:
    """A redo record: the header line, the old bytes, the new bytes."""
    return _MAGIC + b"%d %d\n" % (len(before), len(after)) + before + after


def decode(record: bytes) -> tuple[bytes, bytes] | None:
    """(old bytes, new bytes) of a whole record; None for a torn or foreign one (a kill
    while the record itself was written: the file was not touched yet)."""
    head, newline, rest = record.partition(b"\n")
    if not newline or not head.startswith(_MAGIC):
        return None
    try:
        old, new = (int(n) for n in head[len(_MAGIC) :].split())
    except ValueError:
        return None
    if old < 0 or new < 0 or len(rest) != old + new:
        return None
    return rest[:old], rest[old:]


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


def recover(fd: int, path: str) -> str | None:
    """Under `flock -x` on `path` (`fd`, opened for writing): finish a killed in-place
    write from its redo record, then remove the record. What was done: "finished" (the
    new bytes written whole), "kept" (the file was whole, old or new, or a newer
    writer's), or None (no record)."""
    record_path = redo_path(path)
    try:
        with open(record_path, "rb") as handle:
            record = handle.read()
    except FileNotFoundError:
        return None
    parts = decode(record)
    outcome = "kept"
    if parts is not None:
        before, after = parts
        current = read_fd(fd)
        if finish(current, before, after):
            padded = after + b" " * (len(before) - len(after))
            view, offset = memoryview(padded), 0
            while offset < len(padded):
                offset += os.pwrite(fd, view[offset:], offset)
            os.ftruncate(fd, len(after))
            os.fsync(fd)
            outcome = "finished"
    os.unlink(record_path)
    fsync_dir(os.path.dirname(record_path))
    return outcome
