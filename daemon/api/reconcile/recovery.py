"""`storyd reconcile --recover`: finish the in-place writes a killed reconcile left in a
workspace, from storyd's own redo records, and say which records were not obeyed.

Readers only report a pending record (core/redo.py); this, `--apply` and `--undo` are
the only doors that finish one. A record is storyd's when it lies in storyd's private
folder and names a file of this workspace (its real path); each is obeyed only under
the writers' `flock -x` and only when it is bound to that very file (redo.recover). A
record beside a state file is never storyd's: it is listed, never read.
"""

from __future__ import annotations

import os

from storyd.api.reconcile.apply import writable
from storyd.api.reconcile.atomic import locked, recover
from storyd.core import redo
from storyd.core.containment import Refused

__all__ = ["Recovered", "recover_workspace"]


class Recovered:
    """One record's fate: the state file (workspace-relative) and what was done."""

    __slots__ = ("outcome", "relpath")

    def __init__(self, relpath: str, outcome: str) -> None:
        self.relpath = relpath
        self.outcome = outcome

    def as_dict(self) -> dict[str, str]:
        """`--json`'s item."""
        return {"file": self.relpath, "outcome": self.outcome}


def _own_records(base: str) -> list[str]:
    """The real paths of this workspace's files that storyd's records name."""
    folder = redo.record_dir()
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    found: list[str] = []
    for name in names:
        if not name.endswith(".redo"):
            continue
        head = redo.header_path(os.path.join(folder, name))
        if head is not None and head.startswith(base + os.sep):
            found.append(head)
    return found


def recover_workspace(workspace: str, state_files: list[str],
                      lock_timeout: float) -> list[Recovered]:
    """Finish every killed write storyd's records name in `workspace` (its real path);
    `state_files` (workspace-relative) are also checked for records lying beside them."""
    done: list[Recovered] = []
    for real in _own_records(workspace):
        relpath = os.path.relpath(real, workspace)
        try:
            path = writable(workspace, relpath)
            with locked(path, lock_timeout) as fd:
                outcome = recover(fd, path)
        except Refused as exc:
            outcome = f"ignored: {exc.message}"
        except FileNotFoundError:
            outcome = "ignored: the file is gone; its record is left in " + redo.record_dir()
        done.append(Recovered(relpath, outcome or "ignored: the file was replaced since "
                                                  "(its record names another inode)"))
    for relpath in state_files:
        beside = redo.foreign_path(os.path.join(workspace, relpath))
        if os.path.lexists(beside):
            done.append(Recovered(relpath, (
                f"ignored: {os.path.relpath(beside, workspace)} is not storyd's (storyd keeps "
                f"its records in {redo.record_dir()}); it was not read; delete it if "
                "nobody you trust wrote it")))
    return done
