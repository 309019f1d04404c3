"""Claims as requests: the socket's `claim`, `release`, `claims` and `claim-next` ops and
the MCP tools of the same names answer through `answer`, one function over
daemon/api/claims.py, so every door gives the same JSON and the same errors.

A request names the workspace, the unit (`epicId` and `storyId`, or `stateFile` and
optionally `unit`), optionally a `task`, the `owner` (default: the user the answering
process runs as) and for a claim its `ttl` in seconds. `claim-next` takes the task the
producer's own rule picks next (storyd.core.nextstep) among those nobody holds: the
rule's pick first, then the unit's other tasks not done, in the file's order; each try
is one atomic grant, so two racing callers never get the same task.

A daemon answers with its own configuration (`use_config`, the file of `--config`): its
`[claims] ttl` and its `[fleet]`, not the usual path's.
"""

from __future__ import annotations

import os
import time

from storyd.core.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import sqlite3

    from storyd.api import claims  # imported at first use: a daemon's start-up skips it

__all__ = ["ACTIONS", "answer", "use_config"]

ACTIONS = ("claim", "release", "claims", "claim-next")
_TEXT = ("workspace", "epicId", "storyId", "stateFile", "unit", "task", "owner")


def _connection() -> sqlite3.Connection | None:
    """This thread's connection to the claims database, kept between requests (opening
    it is 2.5 ms of a daemon's 2.6 ms claim) while the path names the same file (a
    corrupt one moved aside: a new connection); None when there is no database yet."""
    from storyd.api.claims_store import connect, default_path

    path = default_path()
    try:
        inode = os.stat(path).st_ino
    except OSError:
        return None
    from storyd.core.switches import CONFIG

    kept = getattr(CONFIG.claims_conns, "conn", None)
    if kept is not None and kept[:2] == (path, inode):
        return kept[2]  # type: ignore[no-any-return]
    if kept is not None:
        kept[2].close()
    conn = connect(path)
    CONFIG.claims_conns.conn = (path, os.stat(path).st_ino, conn)
    return conn


def use_config(path: str | None) -> None:
    """Answer (and claim, list, fence in this process) with the configuration file
    `path` (a daemon's `--config`); None: the usual path."""
    from storyd.api.claims_fleet import pin

    pin(path)


def _configured_ttl() -> float | None:
    """The pinned configuration's `[claims] ttl` (the default lease when it has none);
    None when nothing is pinned (storyd.api.claims reads the usual path)."""
    from storyd.api.claims_fleet import pinned

    path = pinned()
    if path is None:
        return None
    from storyd import config
    from storyd.api import claims

    table = config.load_claims(path)
    return claims.DEFAULT_TTL if table is None else table.ttl


def _fields(request: dict[str, object]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in _TEXT:
        value = request.get(name)
        if value is not None and not isinstance(value, str):
            raise UsageError(f"field {name!r} must be a string")
        out[name] = value
    return out


def _place(given: dict[str, str | None]) -> claims.Place:
    from storyd.api import claims

    if given["workspace"] is None:
        raise UsageError("field 'workspace' is required")
    return claims.place(given["workspace"], epic_id=given["epicId"],
                        story_id=given["storyId"], state_file=given["stateFile"],
                        unit=given["unit"], task=given["task"])  # fmt: skip


def _next(place: claims.Place, owner: str, ttl: float,
          conn: sqlite3.Connection | None) -> dict[str, object]:  # fmt: skip
    """Claim the first free task of the producer's order; `claim` null when none is."""
    from storyd.api import claims
    from storyd.core import target
    from storyd.core.model import DONE
    from storyd.core.nextstep import next_of
    from storyd.core.pipeline import Options, read_units

    where = target.for_state_file(place.workspace, place.state_file, place.unit or None)
    unit = where.pick(read_units(place.workspace, where.adapter, where.relpath, Options()))
    picked = next_of(unit)
    order = [str(picked["task"])] if picked else []
    order += [t.id for t in unit.tasks if t.bucket != DONE and t.id not in order]
    for task in order:
        try:
            granted = claims.claim(claims.Place(place.workspace, where.relpath, unit.key, task),
                                   owner, ttl, conn=conn)  # fmt: skip
        except claims.Held:
            continue
        why = picked["why"] if picked and picked["task"] == task else (
            "the rule's pick is claimed: the next task not done, in the state file's order")
        return {"ok": True, "claim": granted.as_dict(), "task": task, "why": why}
    return {"ok": True, "claim": None, "task": None,
            "why": "every task not done is claimed" if order else "nothing is left to do"}


def answer(action: str, request: dict[str, object]) -> dict[str, object]:
    """The answer object for one request (StorydError for a refusal: Held is 75)."""
    from storyd.api import claims

    given = _fields(request)
    owner = given["owner"] or claims.default_owner()
    conn = _connection()
    if action == "claims":
        ws = given["workspace"]
        found = claims.listing(os.path.realpath(ws) if ws else None,
                               owner=given["owner"], conn=conn)  # fmt: skip
        now = time.time()
        return {"ok": True, "claims": [c.as_dict(now) for c in found]}
    place = _place(given)
    if action == "release":
        gone = claims.release(place, owner, conn=conn)
        return {"ok": True, "released": gone is not None,
                "token": gone.token if gone else None}  # fmt: skip
    ttl = claims.ttl_seconds(request.get("ttl"), _configured_ttl())
    if action == "claim":
        return {"ok": True, "claim": claims.claim(place, owner, ttl, conn=conn).as_dict()}
    if action == "claim-next":
        return _next(place, owner, ttl, conn)
    msg = f"unknown claims action {action!r}; known: {', '.join(ACTIONS)}"
    raise UsageError(msg)
