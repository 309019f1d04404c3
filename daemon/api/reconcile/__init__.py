"""Reconcile: write back what git proves, safely, with a preview and an undo.

    plan.py      findings + evidence → planned field changes per file, with the diff
    repairs.py   the repair classes: one function per finding code, each an entry point
                 of `storyd.repairs`; registered(), repair_codes(), sources()
    pieces.py    Change, Repair, LeftAlone and the Ask a repair function is given
    evidence.py  commits (sha, subject, time, patch id), journal lines, output files
    targets.py   a unit's dialect (its format's capability: storyd.core.formats.dialect)
    jsonedit.py  minimal in-place edits of a JSON text, verified by re-parsing
    gather.py    the units and findings, read now (direct reads + the detector runner)
    atomic.py    flock -x with a bounded wait; temp file, fsync, rename, fsync the folder
    apply.py     write a plan (re-read under the lock, replan if changed), undo the last
    undo.py      undo records in storyd's state directory
    auto.py      the daemon's auto-apply of configured classes and its `reconciled` event

See docs/reconcile.md.
"""

from __future__ import annotations

from storyd.core.errors import LockTimeout

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.api.reconcile.gather import Selection
    from storyd.api.reconcile.plan import Plan
    from storyd.config import Config

__all__ = ["PLAN_TRIES", "make_plan"]

PLAN_TRIES = 4


def make_plan(
    workspace: str,
    selection: Selection,
    cfg: Config,
    only: frozenset[str] | None,
    lock_timeout: float,
) -> Plan:
    """The plan for a workspace's selected units (nothing is written).

    The findings and the plan must come from one version of each file: when a writer
    changed one between the two reads (plan.Moved), the plan is made again, a few times,
    then LockTimeout (exit 75)."""
    import time

    from storyd.api.reconcile.gather import Seen, gather
    from storyd.api.reconcile.plan import Moved, build

    for attempt in range(PLAN_TRIES):
        seen: Seen = {}
        found = gather(workspace, selection, cfg, lock_timeout, seen)
        try:
            return build(workspace, found, only, seen=seen, lock_timeout=lock_timeout)
        except Moved as exc:
            if attempt == PLAN_TRIES - 1:
                msg = (f"{exc.message.split(';')[0]} {PLAN_TRIES} times in a row (a writer "
                       "kept rewriting it); nothing was written: try again")
                raise LockTimeout(msg) from None
            time.sleep(0.02 * 2**attempt)
    raise AssertionError("unreachable")
