"""Write a plan, or undo the last one, under the writers' locks.

The protocol (docs/reconcile.md): take `flock -x` on every file of the plan (bounded
wait, exit 75), re-read each under the lock; when any differs from what the plan was made
from, let go and make the plan again from the new bytes (at most a few times). Then write
the undo record, keep the previous bytes as `<file>.bak` where the format's writer keeps
one, and write each file's new bytes into the locked file itself (atomic.overwrite), so
that neither a writer queued on the lock with its own descriptor nor one that renames
without the lock loses its update; a file a writer renamed over meanwhile is planned
again.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable

from storyd.api.reconcile import undo
from storyd.api.reconcile.atomic import (
    clean_temps,
    locked,
    overwrite,
    recover,
    replace,
    unlink,
    wait_hook,
)
from storyd.api.reconcile.failures import Progress, failure
from storyd.api.reconcile.plan import FilePlan, Plan
from storyd.api.reconcile.targets import dialect_of
from storyd.core.containment import Refused, resolve
from storyd.core.durable import read_fd
from storyd.core.errors import LockTimeout
from storyd.core.gitstate import operation_under_way
from storyd.core.regular import read_regular
from storyd.core.switches import CONFIG

__all__ = ["REPLANS", "GitOperationUnderWay", "apply", "undo_last", "writable"]

REPLANS = 3


def _parses(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def writable(workspace: str, relpath: str) -> str:
    """The absolute path of a file reconcile may write: inside the workspace and out of
    git's folders, links resolved (core/containment.py), and not itself a link (a
    write never goes through one). Refused (exit 64) otherwise; nothing is written."""
    resolve(workspace, relpath)
    path = os.path.join(workspace, relpath)
    if os.path.islink(path):
        msg = (f"{relpath}: a link (to {os.readlink(path)}); reconcile writes no file "
               "through a link; nothing was written")
        raise Refused(msg)
    return path


def _bak(workspace: str, plan: FilePlan) -> tuple[str, bytes | None] | None:
    """The `.bak` to write (its path and current bytes), when the format keeps one.

    A torn file is never made the backup: a restore keeps the good `.bak` as it is.
    """
    dialect = dialect_of(plan.format)
    if dialect is None or not dialect.keeps_bak or not _parses(plan.before):
        return None
    path = writable(workspace, plan.relpath + ".bak")
    try:
        return path, read_regular(path, CONFIG.max_state_bytes)
    except FileNotFoundError:
        return path, None


class GitOperationUnderWay(LockTimeout):
    """A rebase, merge, ... stopped mid-way: HEAD is transient, nothing is written (75)."""


def _refuse_mid_operation(workspace: str) -> None:
    under_way = operation_under_way(workspace)
    if under_way is not None:
        name, marker = under_way
        ends = "git bisect reset" if name == "bisect" else f"git {name} --continue or --abort"
        msg = (f"a git {name} is in progress ({marker}): reconcile --apply waits until it "
               f"ends ({ends}), so that no commit sha is taken from a transient HEAD; "
               "nothing was written")
        raise GitOperationUnderWay(msg)


class _Overtaken(Exception):
    """A writer renamed its own file over a state file while reconcile wrote it."""


def _write(workspace: str, plan: Plan, fds: dict[str, int]) -> None:
    records: list[undo.FileRecord] = []
    baks: list[tuple[str, bytes]] = []
    for file in plan.files:
        records.append(undo.FileRecord(file.relpath, file.before, file.after))
        bak = _bak(workspace, file)
        if bak is not None:
            relbak = os.path.relpath(bak[0], workspace)
            records.append(undo.FileRecord(relbak, bak[1], file.before))
            baks.append((bak[0], file.before))
    progress = Progress([os.path.relpath(p, workspace) for p, _ in baks])
    progress.todo += [file.relpath for file in plan.files]
    try:
        undo.save(workspace, records, plan.summary())
    except OSError as exc:
        raise failure(exc, "writing the undo record", progress, "nothing was changed") from None
    try:
        for path, data in baks:
            clean_temps(path)
            replace(path, data)
            progress.wrote(os.path.relpath(path, workspace))
        for file in plan.files:
            path = os.path.join(workspace, file.relpath)
            if not overwrite(fds[file.relpath], path, file.after):
                if progress.done:
                    raise _Overtaken(file.relpath, progress)
                raise _Overtaken(file.relpath, None)
            progress.wrote(file.relpath)
    except OSError as exc:
        undo_hint = "reconcile --undo puts back what was written"
        hint = undo_hint if progress.done else "nothing was changed"
        raise failure(exc, "reconcile --apply", progress, hint) from None


def apply(workspace: str, make_plan: Callable[[], Plan], lock_timeout: float) -> Plan:
    """Make the plan and write it; returns the plan that was written.

    Refused (exit 75, naming it) while a git operation is stopped mid-way."""
    _refuse_mid_operation(workspace)
    plan = make_plan()
    for _ in range(REPLANS):
        if not plan.changed:
            return plan
        with contextlib.ExitStack() as stack:
            current: dict[str, bytes | None] = {}
            fds: dict[str, int] = {}
            for file in sorted(plan.files, key=lambda f: f.relpath):
                path = writable(workspace, file.relpath)
                try:
                    fd = stack.enter_context(locked(path, lock_timeout))
                except FileNotFoundError:  # removed since the plan was made
                    current[file.relpath] = None
                    break
                recover(fd, path)
                fds[file.relpath] = fd
                current[file.relpath] = read_fd(fd)
            if all(current.get(f.relpath) == f.before for f in plan.files):
                wait_hook()
                _refuse_mid_operation(workspace)  # one may have begun while we planned
                try:
                    _write(workspace, plan, fds)
                    return plan
                except _Overtaken as exc:
                    relpath, progress = exc.args
                    if progress is not None:  # some files landed: say so, never replan over them
                        msg = (f"{relpath} was replaced by a writer that does not take the lock "
                               f"while reconcile wrote it; its version is kept; written: "
                               f"{', '.join(progress.done)}; reconcile --undo puts those back")
                        raise LockTimeout(msg) from None
        plan = make_plan()  # a writer got there first: plan again from its bytes
    msg = (
        f"the state files kept changing while reconcile tried {REPLANS} times; nothing was written"
    )
    raise LockTimeout(msg)


def _current(path: str) -> bytes | None:
    try:
        return read_regular(path, CONFIG.max_state_bytes)
    except FileNotFoundError:
        return None


def undo_last(workspace: str, lock_timeout: float) -> list[str]:
    """Restore the last apply's files byte for byte; the paths restored.

    Refuses (UndoRefused, exit 65), naming them, when any file changed since the apply.
    """
    record, entries = undo.load(workspace)
    with contextlib.ExitStack() as stack:
        changed, lost = [], []
        fds: dict[str, int] = {}
        for item, entry in zip(record.files, entries, strict=True):
            path = writable(workspace, item.path)
            if os.path.exists(path):
                fds[item.path] = stack.enter_context(locked(path, lock_timeout))
                recover(fds[item.path], path)
            now = undo.digest(_current(path))
            if now != entry["after"] and now != entry["beforeSha256"]:
                changed.append(item.path)
            elif item.lost and now != entry["beforeSha256"]:
                lost.append(item.path)
        if changed:
            msg = (
                f"refused: changed since the apply of {record.applied_at}: {', '.join(changed)}; "
                "nothing was restored"
            )
            raise undo.UndoRefused(msg)
        if lost:
            msg = (
                f"refused: the undo record of {record.applied_at} lost the old bytes of "
                f"{', '.join(lost)} (in {undo.record_dir(workspace)}); nothing was restored"
            )
            raise undo.UndoRefused(msg)
        todo = [
            item.path
            for item, entry in zip(record.files, entries, strict=True)
            if undo.digest(_current(os.path.join(workspace, item.path))) != entry["beforeSha256"]
        ]
        progress = Progress(todo)
        try:
            for item in record.files:
                if item.path not in todo:
                    continue  # never replaced (an apply cut short), or already restored
                path = os.path.join(workspace, item.path)
                if item.before is None:
                    unlink(path)
                elif item.path in fds and not item.path.endswith(".bak"):
                    if not overwrite(fds[item.path], path, item.before):
                        msg = f"{item.path}: replaced by a writer while reconcile restored it"
                        raise undo.UndoRefused(msg)
                else:
                    clean_temps(path)
                    replace(path, item.before)
                progress.wrote(item.path)
        except OSError as exc:
            hint = "the record is kept: reconcile --undo again once the cause is fixed"
            raise failure(exc, "reconcile --undo", progress, hint) from None
    try:
        undo.forget(workspace)
    except OSError as exc:
        hint = "every file is restored; the record could not be removed"
        raise failure(exc, "reconcile --undo", progress, hint) from None
    return progress.done
