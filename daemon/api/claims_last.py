"""What storyd saw of a claimed unit at its grant and at each renewal: the `last` column
of the claims database, shown when the lease ends unrenewed (an abandoned claim says
where its owner left the unit).

`last` is JSON: `{at, resumePoint, done, total, task, status, mtime}`: when it was seen
(UTC), the unit's resume point, its tasks done of all, the task the producer takes next
and that task's status, and the state file's mtime then. A renewal reads the file
again only when its mtime moved (a stat otherwise); a grant reads it (0.6 to 1.5 ms for
the demo's epic on 2 busy cores). The read is the direct one (storyd.core.pipeline,
mtime staleness: no git child) with a short bound on the writers' lock; anything that
keeps it from reading (no such file yet, a writer holding the lock, a file that does
not parse) leaves what was seen before: a claim never fails for it.
"""

from __future__ import annotations

import json
import os
import time

__all__ = ["LOCK_BOUND", "last_state"]

LOCK_BOUND = 0.2  # seconds a grant waits for a state file's writer before it says nothing


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except (OSError, ValueError):
        return None


def last_state(workspace: str, state_file: str, unit: str, before: str | None = None) -> str | None:
    """`last` for the unit now (JSON), or `before` when the state file did not change
    since (or cannot be read now)."""
    mtime = _mtime(os.path.join(workspace, state_file))
    if mtime is None:
        return before
    if before:
        try:
            if json.loads(before).get("mtime") == mtime:
                return before
        except (ValueError, AttributeError):
            pass
    try:
        seen = _read(workspace, state_file, unit)
    except Exception:  # a claim never fails for what it could not see
        return before
    if seen is None:
        return before
    seen["mtime"] = mtime
    return json.dumps(seen, separators=(",", ":"))


def _read(workspace: str, state_file: str, unit: str) -> dict[str, object] | None:
    from storyd.core import target
    from storyd.core.envelope import resume_point
    from storyd.core.errors import StorydError
    from storyd.core.model import DONE
    from storyd.core.nextstep import next_of
    from storyd.core.pipeline import Options, read_units

    try:
        where = target.for_state_file(workspace, state_file, unit or None)
        found = read_units(workspace, where.adapter, where.relpath, Options(LOCK_BOUND, "mtime"))
    except StorydError:
        return None
    mine = [u for u in found if u.key == unit] if unit else found
    if not mine:
        return None
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    tasks = [t for u in mine for t in u.tasks]
    seen: dict[str, object] = {"at": at, "done": sum(t.bucket == DONE for t in tasks),
                               "total": len(tasks)}  # fmt: skip
    if len(mine) == 1:
        one = mine[0]
        seen["resumePoint"] = one.resume_point or resume_point(one.tasks)
        picked = next_of(one)
        if picked is not None:
            seen["task"], seen["status"] = picked.get("task"), picked.get("status")
    else:
        seen["units"] = len(mine)
    return seen
