"""Claims as the unit views show them: the `claim` field of a unit (its holder, token,
grant, lease end and `live` or `abandoned`), the `claim-lost` findings of a unit, and
the one line of text every door prints for a claim.

`storyd status` (text and --json), `storyd check` (and the MCP `check` tool),
`storyd top` and its live view, the fleet view and `resume --detail` all go through
here, so every door shows the same thing. Nothing is read, and sqlite3 is not imported,
when nothing was ever claimed on this machine (storyd.api.claims_path).

A unit's claim is the one on the unit itself, else the one on its whole state file,
else one on a task of it (`task` then says which); a live one before an abandoned one.
A `claim-lost` record is shown while the grant it was written under is still the
unit's claim (a release or a new grant ends it): a warning, one line per writer and
holder (storyd.core.causes), evidence `writer`, `writerToken`, `holder`, `holderToken`.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import sqlite3

    from storyd.api.claims import Claim
    from storyd.core.model import Finding

__all__ = [
    "Seen", "attach", "claim_field", "claim_text", "last_text", "lease_end", "log_line", "seen",
    "unit_log",
]


class Seen:
    """What the claims database holds for some workspaces at one moment: the claims and
    the `claim-lost` records, looked up by (workspace, state file)."""

    __slots__ = ("claims", "lost", "now")

    def __init__(self, found: list[Claim], lost: list[dict[str, object]],
                 now: float) -> None:  # fmt: skip
        self.now = now
        self.claims: dict[tuple[str, str], list[Claim]] = {}
        for held in found:
            self.claims.setdefault((held.place.workspace, held.place.state_file), []).append(held)
        self.lost: dict[tuple[str, str], list[dict[str, object]]] = {}
        for record in lost:
            key = (str(record["workspace"]), str(record["stateFile"]))
            self.lost.setdefault(key, []).append(record)

    def claim_of(self, workspace: str, state_file: str, unit: str) -> Claim | None:
        """The unit's claim: its own, else its file's, else one of its tasks'; live first."""
        mine = [c for c in self.claims.get((workspace, state_file), ())
                if c.place.unit in (unit, "")]  # fmt: skip
        mine.sort(key=lambda c: (not c.live(self.now), c.place.task != "", c.place.unit == ""))
        return mine[0] if mine else None

    def lost_of(self, workspace: str, state_file: str, unit: str) -> list[dict[str, object]]:
        """The `claim-lost` records of the unit whose grant is still its holder's."""
        current = {(c.owner, c.token) for c in self.claims.get((workspace, state_file), ())
                   if c.place.unit in (unit, "")}  # fmt: skip
        found = self.lost.get((workspace, state_file), ())
        return [r for r in found
                if r["unit"] in (unit, "") and (r["holder"], r["holderToken"]) in current]


def seen(workspace: str | None = None, *, conn: sqlite3.Connection | None = None) -> Seen | None:
    """The claims and `claim-lost` records (of one workspace), None when nothing was ever
    claimed here or the database cannot be read now (a view never fails on it)."""
    from storyd.api.claims_path import ever_claimed

    if conn is None and not ever_claimed():
        return None
    from storyd.api import claims
    from storyd.core.errors import StorydError

    try:
        found = claims.listing(workspace, conn=conn)
        lost = claims.lost(workspace=workspace, conn=conn)
    except StorydError:
        return None
    return Seen(found, lost, time.time())


def claim_field(held: Claim, now: float | None = None) -> dict[str, object]:
    """`{owner, token, granted, expires, state: live|abandoned}` (times in UTC), with
    `task` for a task's claim and `last` (what storyd last saw) for an abandoned one."""
    shown = held.as_dict(now)
    field: dict[str, object] = {
        "owner": held.owner, "token": held.token, "granted": shown["granted"],
        "expires": shown["expires"], "state": "live" if held.live(now) else "abandoned",
    }  # fmt: skip
    if held.place.task:
        field["task"] = held.place.task
    if field["state"] == "abandoned" and shown["last"] is not None:
        field["last"] = shown["last"]
    return field


def lease_end(field: object) -> float | None:
    """When a live `claim` field's lease ends (epoch seconds), else None."""
    if not isinstance(field, dict) or field.get("state") != "live":
        return None
    from storyd.core.isotime import parse_epoch

    ends = parse_epoch(str(field.get("expires")))
    return None if ends is None else float(ends)


def _lost_finding(record: dict[str, object]) -> Finding:
    from storyd.core.model import Finding

    evidence = {key: str(record[key]) for key in ("writer", "holder", "holderToken")}
    token = record["writerToken"]
    evidence["writerToken"] = "none" if token is None else str(token)
    evidence["at"] = str(record["at"])
    message = (f"written by {record['writer']} (token {evidence['writerToken']}) while "
               f"{record['holder']} holds the current grant (token {record['holderToken']})")
    return Finding("claims", "claim-lost", "warning", message, None, evidence)


def attach(units: list[dict[str, object]], found: Seen | None = None) -> list[dict[str, object]]:
    """`units` (unit summaries, changed in place) each with its `claim` field when it has
    one, and its `claim-lost` findings added (their count and worst severity too)."""
    if not units:
        return units
    if found is None:
        spaces = {str(u.get("workspace")) for u in units}
        found = seen(spaces.pop() if len(spaces) == 1 else None)
    if found is None:
        return units
    from storyd.core.causes import one_line_each

    for unit in units:
        where = (str(unit.get("workspace")), str(unit.get("stateFile")), str(unit.get("unit")))
        held = found.claim_of(*where)
        if held is not None:
            unit["claim"] = claim_field(held, found.now)
        lost = found.lost_of(*where)
        if not lost:
            continue
        said = one_line_each(tuple(_lost_finding(r) for r in lost))
        listed = unit.get("findingList")
        listed = list(listed) if isinstance(listed, list) else []
        listed += [f.as_dict() for f in said]
        unit["findingList"] = listed
        unit["findings"] = len(listed)
        if unit.get("worst") != "error":
            unit["worst"] = "warning"
    return units


def last_text(last: object) -> str:
    """What storyd last saw of a unit, in words: `story-3 at task-2 (in_progress), 2/5
    done, seen 2026-11-28T00:12:03Z`."""
    if not isinstance(last, dict):
        return "" if last is None else str(last)
    parts = []
    if last.get("resumePoint"):
        parts.append(f"at {last['resumePoint']}")
    if last.get("task"):
        status = f" ({last['status']})" if last.get("status") else ""
        parts.append(f"task {last['task']}{status}")
    if isinstance(last.get("done"), int) and isinstance(last.get("total"), int):
        parts.append(f"{last['done']}/{last['total']} done")
    if last.get("at"):
        parts.append(f"seen {last['at']}")
    return ", ".join(parts)


def claim_text(field: dict[str, object], now: float | None = None) -> str:
    """One line: `claimed by alice (token 3) 60 s ago, lease ends 2026-…Z (in 840 s)`, or
    `ABANDONED by alice (token 3): lease ended …Z; last seen: at task-2, 2/5 done`."""
    from storyd.core.isotime import parse_epoch

    now = time.time() if now is None else now
    task = f" task {field['task']}" if field.get("task") else ""
    granted = parse_epoch(str(field.get("granted")))
    ago = f" {max(0.0, now - granted):.0f} s ago" if granted is not None else ""
    who = f"{field.get('owner')} (token {field.get('token')})"
    if field.get("state") == "abandoned":
        last = last_text(field.get("last"))
        tail = f"; last seen: {last}" if last else ""
        return f"ABANDONED{task} by {who}: lease ended {field.get('expires')}{tail}"
    ends = parse_epoch(str(field.get("expires")))
    left = f" (in {max(0.0, ends - now):.0f} s)" if ends is not None else ""
    return f"claimed{task} by {who}{ago}, lease ends {field.get('expires')}{left}"



def unit_log(workspace: str, state_file: str, unit: str | None,
             since: float = 0.0) -> list[dict[str, object]]:  # fmt: skip
    """The claims' log of a unit (its tasks' and its whole file's too; `unit` None: the
    whole file's), oldest first, each `{claim: kind, at (epoch), time, owner, token,
    unit, task, detail}`, `last` for an expiry; a lease that ended and nobody took over
    is an `expired` entry at its end. None read when nothing was ever claimed here."""
    from storyd.api.claims_path import ever_claimed

    if not ever_claimed():
        return []
    from storyd.api import claims
    from storyd.api.claims_store import connect
    from storyd.core.errors import StorydError

    sql = ("SELECT at, unit, task, owner, token, kind, detail FROM log WHERE workspace=? "
           "AND state_file=? AND at>=?")  # fmt: skip
    args: tuple[object, ...] = (workspace, state_file, since)
    if unit is not None:
        sql, args = sql + " AND (unit=? OR unit='')", (*args, unit)
    try:
        conn = connect()
    except StorydError:
        return []
    try:
        rows = conn.execute(sql + " ORDER BY id", args).fetchall()
        ended = [c for c in claims.listing(workspace, conn=conn)
                 if c.place.state_file == state_file and not c.live()
                 and (unit is None or c.place.unit in (unit, ""))]  # fmt: skip
    finally:
        conn.close()
    found = [_entry(at, u, t, o, tok, kind, detail) for at, u, t, o, tok, kind, detail in rows]
    found += [_entry(c.expires, c.place.unit, c.place.task, c.owner, c.token, "expired", c.last)
              for c in ended if c.expires >= since]  # fmt: skip
    found.sort(key=lambda e: float(e["at"]))  # type: ignore[arg-type]
    return found


def _entry(at: float, unit: str, task: str, owner: str, token: int | None, kind: str,
           detail: str | None) -> dict[str, object]:  # fmt: skip
    entry: dict[str, object] = {
        "claim": kind, "at": at, "time": _iso(at), "owner": owner, "token": token,
        "unit": unit, "task": task, "detail": detail,
    }  # fmt: skip
    if kind == "expired" and detail:
        import contextlib
        import json

        with contextlib.suppress(ValueError):
            entry["last"], entry["detail"] = json.loads(detail), None
    return entry


def _iso(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at * 1000) % 1000:03d}Z"


def log_line(entry: dict[str, object]) -> str:
    """One claims' log entry in words: `granted to alice (token 3) task T-1`,
    `expired: alice (token 3), last seen at task-2, 2/5 done`."""
    task = f" task {entry['task']}" if entry.get("task") else ""
    who = f"{entry.get('owner')} (token {entry.get('token')})"
    kind = str(entry.get("claim"))
    text = {"granted": f"granted to {who}", "renewed": f"renewed by {who}",
            "released": f"released by {who}", "expired": f"lease of {who} ended",
            }.get(kind, f"{kind} by {who}")  # fmt: skip
    if entry.get("detail") and entry["detail"] != entry.get("owner"):
        text += f" ({entry['detail']})"
    last = last_text(entry.get("last"))
    return f"claim {text}{task}" + (f"; last seen: {last}" if last else "")
