"""Undo records: the bytes each apply replaced, kept in storyd's state directory.

    $XDG_STATE_HOME/storyd/reconcile/<workspace hash>/record.json   the last apply
                                                   /<n>.<stamp>.before  its old bytes

The record is written (and fsynced) before the first file is replaced. `--undo` puts the
old bytes back, byte for byte, only when every file still holds what the apply wrote (or
was never replaced, when the apply was cut short); otherwise it refuses and names the
files that changed since. Only the last apply of a workspace can be undone.

Any kill leaves a usable record: `save` writes the copies, then record.json (the
commit point), then deletes the previous record's copies; `forget` deletes record.json
first, then the copies. A copy that is missing anyway matters only for a file that
still needs it (one that holds what the apply wrote): `--undo` refuses, naming it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time

from storyd.api.reconcile.atomic import TEMP_MARK, replace, step, unlink
from storyd.core.durable import fsync_dir
from storyd.core.errors import StorydError
from storyd.core.paths import state_dir  # here too: its older home
from storyd.core.regular import read_regular

__all__ = ["NothingToUndo", "Record", "UndoRefused", "load", "record_dir", "save", "state_dir"]

_RECORD = "record.json"


class NothingToUndo(StorydError):
    """No apply of this workspace is recorded."""

    code = 1
    name = "NOTHING_TO_UNDO"


class UndoRefused(StorydError):
    """A file changed after the apply: undoing would lose that change."""

    code = 65
    name = "UNDO_REFUSED"


def record_dir(workspace: str) -> str:
    """The folder of a workspace's undo record."""
    key = hashlib.sha256(os.path.realpath(workspace).encode()).hexdigest()[:16]
    return os.path.join(state_dir(), "reconcile", key)


def digest(data: bytes | None) -> str | None:
    """sha256 of some bytes (None for an absent file)."""
    return None if data is None else hashlib.sha256(data).hexdigest()


class FileRecord:
    """One replaced file: where, its old bytes (None: it did not exist), what was written."""

    __slots__ = ("after", "before", "lost", "path")

    def __init__(
        self, path: str, before: bytes | None, after: bytes | None, *, lost: bool = False
    ) -> None:
        self.path = path
        self.before = before
        self.after = after
        self.lost = lost  # the record names a copy of the old bytes that is missing


class Record:
    """The last apply of a workspace."""

    def __init__(
        self,
        workspace: str,
        files: list[FileRecord],
        applied_at: str,
        summary: list[dict[str, object]],
    ) -> None:
        self.workspace = workspace
        self.files = files
        self.applied_at = applied_at
        self.summary = summary  # what was written, as the `reconciled` event carries it


def _fsync(folder: str) -> None:
    fsync_dir(folder)
    step()


def _private_dir(path: str) -> None:
    os.makedirs(path, mode=0o700, exist_ok=True)


def save(workspace: str, files: list[FileRecord], summary: list[dict[str, object]]) -> str:
    """Write the record (replacing the previous one) before anything is replaced."""
    folder = record_dir(workspace)
    _private_dir(folder)
    stamp = f"{time.time_ns()}.{os.getpid()}"
    entries = []
    for index, item in enumerate(files):
        blob = None
        if item.before is not None:
            blob = f"{index}.{stamp}.before"
            replace(os.path.join(folder, blob), item.before, hooked=False)
        entries.append(
            {
                "path": item.path,
                "before": blob,
                "after": digest(item.after),
                "beforeSha256": digest(item.before),
            }
        )
    body = {
        "workspace": os.path.realpath(workspace),
        "appliedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "files": entries,
        "summary": summary,
    }
    replace(
        os.path.join(folder, _RECORD), json.dumps(body, indent=2).encode() + b"\n", hooked=False
    )
    for name in os.listdir(folder):  # the previous record's blobs, killed saves' temps
        if (name.endswith(".before") and f".{stamp}." not in name) or TEMP_MARK in name:
            unlink(os.path.join(folder, name))
    return folder


def load(workspace: str) -> tuple[Record, list[dict[str, object]]]:
    """The last record and its raw entries (NothingToUndo when there is none)."""
    folder = record_dir(workspace)
    try:
        body = json.loads(read_regular(os.path.join(folder, _RECORD)))
    except FileNotFoundError:
        msg = f"nothing to undo: no reconcile apply is recorded for {workspace}"
        raise NothingToUndo(msg) from None
    except ValueError as exc:
        msg = f"{folder}/{_RECORD} is unreadable ({exc}); nothing was restored"
        raise UndoRefused(msg) from None
    files = []
    for entry in body["files"]:
        before, lost = None, False
        if entry["before"]:
            try:
                before = read_regular(os.path.join(folder, entry["before"]))
            except FileNotFoundError:
                lost = True
        files.append(FileRecord(entry["path"], before, None, lost=lost))
    record = Record(body["workspace"], files, body["appliedAt"], body.get("summary") or [])
    return record, body["files"]


def forget(workspace: str) -> None:
    """Drop the record after a successful undo (an undo cannot be undone twice)."""
    folder = record_dir(workspace)
    with contextlib.suppress(FileNotFoundError):
        unlink(os.path.join(folder, _RECORD))  # first: no record ever names a missing copy
        _fsync(folder)
    for name in os.listdir(folder):
        unlink(os.path.join(folder, name))
