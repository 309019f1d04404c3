"""Claims: who works on which unit or task, with a lease and a fencing token. The one
layer every door calls (`storyd claim`/`release`/`claims`, the socket's ops, the MCP
tools, the hooks, reconcile's fence); the storage is daemon/api/claims_store.py.

A claim names a workspace, a state file, a unit ('' the whole file) and a task ('' the
whole unit). Two claims overlap when their files are the same, their units are equal or
one is '', and their tasks are equal or one is '': of overlapping claims only one owner
holds a live lease. A grant's token is the unit's counter plus one: it only grows per
(workspace, state file, unit). Claiming again what the owner already holds renews the
lease and keeps the token. A lease not renewed expires: the claim stays listed as
abandoned (with the last state storyd saw) until someone claims it again or releases it.
Every step is written to the log: granted, renewed, released, expired, forced.
"""

from __future__ import annotations

import json
import os
import time

from storyd.api.claims_path import ever_claimed
from storyd.api.claims_store import COLUMNS, connect, transaction
from storyd.core.errors import LockTimeout, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import sqlite3

    from storyd.api.claims_fleet import Backend

__all__ = [
    "DEFAULT_TTL", "Claim", "Held", "Place", "claim", "default_owner", "fence", "held_by",
    "listing", "log", "lost", "place", "record_lost", "release", "release_owner", "renew_owner",
    "ttl_seconds",
]  # fmt: skip

DEFAULT_TTL = 900.0  # seconds; [claims] ttl in config.toml, then $STORYD_CLAIM_TTL, override it
MAX_TTL = 7 * 86400.0


class Held(LockTimeout):
    """Another owner holds the unit (exit 75): the message names it and its lease's end."""

    name = "CLAIM_HELD"

    def __init__(self, message: str, holder: Claim) -> None:
        super().__init__(message)
        self.holder = holder


class Place:
    """What a claim names: the workspace (a real path), the state file (relative to
    it), the unit ('' the whole file) and the task ('' the whole unit)."""

    __slots__ = ("state_file", "task", "unit", "workspace")

    def __init__(self, workspace: str, state_file: str, unit: str = "", task: str = "") -> None:
        self.workspace = workspace
        self.state_file = state_file
        self.unit = unit
        self.task = task

    def key(self) -> tuple[str, str, str, str]:
        """The store's primary key."""
        return (self.workspace, self.state_file, self.unit, self.task)

    def label(self) -> str:
        """`state file unit task` for one line of text."""
        parts = [self.state_file, self.unit, f"task {self.task}" if self.task else ""]
        return " ".join(p for p in parts if p)


class Claim:
    """One row of the store: a place, its owner, token and lease."""

    __slots__ = ("expires", "granted", "last", "owner", "place", "renewed", "token")

    def __init__(self, place: Place, owner: str, token: int, granted: float, renewed: float,
                 expires: float, last: str | None = None) -> None:  # fmt: skip
        self.place = place
        self.owner = owner
        self.token = token
        self.granted = granted
        self.renewed = renewed
        self.expires = expires
        self.last = last

    @classmethod
    def of_row(cls, row: tuple[object, ...]) -> Claim:
        """From a row in COLUMNS' order."""
        ws, sf, unit, task, owner, token, granted, renewed, expires, last = row
        return cls(Place(str(ws), str(sf), str(unit), str(task)), str(owner), int(token),  # type: ignore[call-overload]
                   float(granted), float(renewed), float(expires),  # type: ignore[arg-type]
                   None if last is None else str(last))  # fmt: skip

    def live(self, now: float | None = None) -> bool:
        """Whether the lease has not ended."""
        return self.expires > (time.time() if now is None else now)

    def as_dict(self, now: float | None = None) -> dict[str, object]:
        """The JSON object every door shows."""
        now = time.time() if now is None else now
        last: object = None
        if self.last:
            try:
                last = json.loads(self.last)
            except ValueError:
                last = self.last
        return {
            "workspace": self.place.workspace, "stateFile": self.place.state_file,
            "unit": self.place.unit, "task": self.place.task, "owner": self.owner,
            "token": self.token, "granted": _iso(self.granted), "renewed": _iso(self.renewed),
            "expires": _iso(self.expires), "state": "held" if self.live(now) else "abandoned",
            "last": last,
        }  # fmt: skip


def _iso(at: float) -> str:
    """UTC with milliseconds: leases are seconds long."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at * 1000) % 1000:03d}Z"


def place(workspace: str, *, epic_id: str | None = None, story_id: str | None = None,
          state_file: str | None = None, unit: str | None = None,
          task: str | None = None) -> Place:  # fmt: skip
    """The place a door names: `--epic-id E --story-id S` (the epic's state file, found
    on disk) or `--state-file PATH [--unit U]`, with an optional task; a UsageError for
    another combination or a path outside the workspace."""
    from storyd.core import target

    ws = os.path.realpath(workspace)
    if not os.path.isdir(ws):
        raise UsageError(f"--workspace {ws}: not a folder")
    if state_file is not None and (epic_id is not None or story_id is not None):
        raise UsageError("--state-file replaces --epic-id and --story-id")
    if state_file is not None:
        found = target.for_state_file(ws, state_file, unit)
    elif epic_id is not None and story_id is not None and unit is None:
        from storyd.core.ids import normalize_epic_id, normalize_story_id

        found = target.for_epic(ws, normalize_epic_id(epic_id), normalize_story_id(story_id))
    else:
        raise UsageError("name the unit: --epic-id E --story-id S, or --state-file PATH "
                         "[--unit U]")  # fmt: skip
    return Place(ws, found.relpath, found.key or "", task or "")


def default_owner(session: str | None = None) -> str:
    """The owner a door names when none is given: the agent session (a hook's payload,
    or $STORYD_OWNER that session-start leaves in the agent's environment), else the user."""
    if session:
        return f"session:{session}"
    given = os.environ.get("STORYD_OWNER")
    if given:
        return given
    import pwd

    try:
        return f"user:{pwd.getpwuid(os.getuid()).pw_name}"
    except KeyError:
        return f"user:{os.getuid()}"


def ttl_seconds(given: object, configured: float | None = None) -> float:
    """A lease in seconds: `given` (--ttl), else $STORYD_CLAIM_TTL, else config.toml's
    `[claims] ttl` (`configured`, else read now), else DEFAULT_TTL; a UsageError for
    anything but a number from 1 to MAX_TTL (a bad config.toml: its ConfigError)."""
    raw = given if given is not None else os.environ.get("STORYD_CLAIM_TTL")
    if raw is None or raw == "":
        return configured if configured is not None else _configured_ttl()
    try:
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        value = -1.0
    if not 0 < value <= MAX_TTL:
        msg = f"--ttl {raw}: a lease is a number of seconds above 0, at most {MAX_TTL:g}"
        raise UsageError(msg)
    return value


def _configured_ttl() -> float:
    """config.toml's `[claims] ttl`, else DEFAULT_TTL."""
    from storyd import config

    table = config.load_claims()  # [claims] alone: 66 us, not the whole file's 101
    return DEFAULT_TTL if table is None else table.ttl


_OVERLAP = (
    "workspace = ? AND state_file = ? AND (unit = ? OR unit = '' OR ? = '') "
    "AND (task = ? OR task = '' OR ? = '')"
)


def _overlapping(conn: sqlite3.Connection, place: Place) -> list[Claim]:
    args = (place.workspace, place.state_file, place.unit, place.unit, place.task, place.task)
    rows = conn.execute(f"SELECT {COLUMNS} FROM claims WHERE {_OVERLAP}", args).fetchall()
    return [Claim.of_row(r) for r in rows]


def _log(conn: sqlite3.Connection, at: float, place: Place, owner: str, token: int | None,
         kind: str, detail: str | None = None) -> None:  # fmt: skip
    conn.execute("INSERT INTO log(at, workspace, state_file, unit, task, owner, token, kind,"
                 " detail) VALUES(?,?,?,?,?,?,?,?,?)",
                 (at, *place.key(), owner, token, kind, detail))  # fmt: skip


def _next_token(conn: sqlite3.Connection, place: Place) -> int:
    row = conn.execute("SELECT token FROM tokens WHERE workspace=? AND state_file=? AND unit=?",
                       place.key()[:3]).fetchone()  # fmt: skip
    floor = conn.execute("SELECT value FROM meta WHERE key='floor'").fetchone()
    token = max(int(row[0]) if row else 0, int(floor[0]) if floor else 0) + 1
    conn.execute("INSERT OR REPLACE INTO tokens VALUES(?,?,?,?)", (*place.key()[:3], token))
    return token


def _held_message(place: Place, holder: Claim) -> str:
    ends = _iso(holder.expires)
    return (f"{place.label()}: held by {holder.owner} (token {holder.token}) until {ends}, "
            f"in {max(0, holder.expires - time.time()):.0f} s")  # fmt: skip


def _fleet(workspace: str) -> tuple[Backend, str] | None:
    """The fleet's bucket when `workspace`'s units are claimed across machines."""
    from storyd.api.claims_fleet import backend

    return backend(workspace)


def held_by(others: list[Claim], owner: str, now: float) -> Claim | None:
    """The first live claim among `others` that another owner holds."""
    return next((c for c in others if c.owner != owner and c.live(now)), None)


def claim(place: Place, owner: str, ttl: float, *, last: str | None = None,
          conn: sqlite3.Connection | None = None) -> Claim:  # fmt: skip
    """Grant `place` to `owner` for `ttl` seconds (or renew the owner's own lease, same
    token); Held (75) when another owner holds an overlapping live claim. `last` (what
    storyd sees of the unit now, storyd.api.claims_last) is read here when not given."""
    if last is None:
        from storyd.api.claims_last import last_state

        last = last_state(place.workspace, place.state_file, place.unit)
    if (kv := _fleet(place.workspace)) is not None:  # a fleet unit: the bucket decides
        return kv[0].claim(place, kv[1], owner, ttl, last)
    db = conn or connect()
    try:
        with transaction(db):
            now = time.time()
            found = _overlapping(db, place)
            holder = held_by(found, owner, now)
            if holder is not None:
                raise Held(_held_message(place, holder), holder)
            mine = next((c for c in found if c.place.key() == place.key()), None)
            if mine is not None and mine.owner == owner and mine.live(now):
                db.execute("UPDATE claims SET renewed=?, expires=?, last=coalesce(?, last) "
                           "WHERE workspace=? AND state_file=? AND unit=? AND task=?",
                           (now, now + ttl, last, *place.key()))  # fmt: skip
                _log(db, now, place, owner, mine.token, "renewed")
                return Claim(place, owner, mine.token, mine.granted, now, now + ttl,
                             last or mine.last)  # fmt: skip
            for old in found:  # leases that ended unreleased: abandoned, now taken over
                if not old.live(now) and old.place.key() == place.key():
                    _log(db, old.expires, place, old.owner, old.token, "expired", old.last)
            token = _next_token(db, place)
            db.execute("INSERT OR REPLACE INTO claims VALUES(?,?,?,?,?,?,?,?,?,?)",
                       (*place.key(), owner, token, now, now, now + ttl, last))  # fmt: skip
            _log(db, now, place, owner, token, "granted")
            return Claim(place, owner, token, now, now, now + ttl, last)
    finally:
        if conn is None:
            db.close()


def release(place: Place, owner: str, *, force: bool = False,
            conn: sqlite3.Connection | None = None) -> Claim | None:  # fmt: skip
    """Give `place` back: the claim released, None when `owner` held nothing there; Held
    (75) when another owner holds it live (`force` releases it anyway, logged so)."""
    if (kv := _fleet(place.workspace)) is not None:
        return kv[0].release(place, kv[1], owner, force)
    if conn is None and not ever_claimed():
        return None
    db = conn or connect()
    try:
        with transaction(db):
            now = time.time()
            row = db.execute(f"SELECT {COLUMNS} FROM claims WHERE workspace=? AND "
                             "state_file=? AND unit=? AND task=?", place.key()).fetchone()
            if row is None:
                return None
            found = Claim.of_row(row)
            if found.owner != owner and found.live(now) and not force:
                raise Held(_held_message(place, found), found)
            db.execute("DELETE FROM claims WHERE workspace=? AND state_file=? AND unit=? AND "
                       "task=?", place.key())  # fmt: skip
            kind = "released" if found.owner == owner else "forced-release"
            _log(db, now, place, owner, found.token, kind, found.owner)
            return found
    finally:
        if conn is None:
            db.close()


def listing(workspace: str | None = None, *, owner: str | None = None, abandoned: bool = True,
            conn: sqlite3.Connection | None = None, fleet: bool = True) -> list[Claim]:  # fmt: skip
    """The claims (of one workspace, of one owner), live first then abandoned, each by
    place; `abandoned=False` leaves out the leases that ended. No database: none (and
    none is made: its existence tells the hooks that something was ever claimed).
    With [fleet], the bucket's too; `fleet=False` (the hooks: no `nats` on their path)
    leaves them out."""
    from storyd.api.claims_fleet import listed

    across = listed(workspace, owner) if fleet else []
    if conn is None and not ever_claimed():
        return across
    db = conn or connect()
    try:
        where, args = [], []
        if workspace is not None:
            where.append("workspace = ?")
            args.append(workspace)
        if owner is not None:
            where.append("owner = ?")
            args.append(owner)
        sql = f"SELECT {COLUMNS} FROM claims" + (" WHERE " + " AND ".join(where) if where else "")
        found = [Claim.of_row(r) for r in db.execute(sql + " ORDER BY 1, 2, 3, 4", args)]
    finally:
        if conn is None:
            db.close()
    now = time.time()
    found = [*found, *across]
    found.sort(key=lambda c: not c.live(now))
    return [c for c in found if abandoned or c.live(now)]


def renew_owner(owner: str, ttl: float | None = None, *, last: dict[str, str] | None = None,
                conn: sqlite3.Connection | None = None,
                fleet: bool = False) -> list[Claim]:  # fmt: skip
    """Renew every live lease `owner` holds (a hook after each tool call): each by its
    own length (`ttl` overrides); `last` maps a state file to what storyd saw of it
    (when not given, each unit is read again if its state file changed: claims_last).
    `fleet` (the daemon answering a hook: a process that may reach the server) renews
    the owner's fleet leases too (after the local ones)."""
    done = _renew_local(owner, ttl, last, conn) if conn is not None or ever_claimed() else []
    if fleet:
        from storyd.api.claims_fleet import owned

        done += owned(owner, ttl)
    return done


def _renew_local(owner: str, ttl: float | None, last: dict[str, str] | None,
                 conn: sqlite3.Connection | None) -> list[Claim]:  # fmt: skip
    db = conn or connect()
    try:
        if last is None:
            last = _seen_now(db, owner)
        with transaction(db):
            now = time.time()
            rows = db.execute(f"SELECT {COLUMNS} FROM claims WHERE owner=? AND expires>?",
                              (owner, now)).fetchall()  # fmt: skip
            renewed = []
            for held in map(Claim.of_row, rows):
                length = ttl if ttl is not None else held.expires - held.renewed
                seen = (last or {}).get(held.place.state_file, held.last)
                seen = (last or {}).get("\0".join(held.place.key()), seen)
                db.execute("UPDATE claims SET renewed=?, expires=?, last=? WHERE workspace=? "
                           "AND state_file=? AND unit=? AND task=?",
                           (now, now + length, seen, *held.place.key()))  # fmt: skip
                _log(db, now, held.place, owner, held.token, "renewed")
                renewed.append(Claim(held.place, owner, held.token, held.granted, now,
                                     now + length, seen))  # fmt: skip
            return renewed
    finally:
        if conn is None:
            db.close()


def _seen_now(db: sqlite3.Connection, owner: str) -> dict[str, str]:
    """What storyd sees now of each unit `owner` holds live, by place key (read outside
    the transaction: a state file's read never holds the claims lock)."""
    from storyd.api.claims_last import last_state

    rows = db.execute(f"SELECT {COLUMNS} FROM claims WHERE owner=? AND expires>?",
                      (owner, time.time())).fetchall()  # fmt: skip
    found = {}
    for held in map(Claim.of_row, rows):
        seen = last_state(held.place.workspace, held.place.state_file, held.place.unit, held.last)
        if seen is not None:
            found["\0".join(held.place.key())] = seen
    return found


def release_owner(owner: str, *, conn: sqlite3.Connection | None = None,
                  fleet: bool = False) -> list[Claim]:  # fmt: skip
    """Release every claim `owner` holds (a session's end); `fleet` (the daemon
    answering a hook) its fleet claims too."""
    done = _release_local(owner, conn) if conn is not None or ever_claimed() else []
    if fleet:
        from storyd.api.claims_fleet import owned

        done += owned(owner, drop=True)
    return done


def _release_local(owner: str, conn: sqlite3.Connection | None) -> list[Claim]:
    db = conn or connect()
    try:
        with transaction(db):
            now = time.time()
            rows = db.execute(f"SELECT {COLUMNS} FROM claims WHERE owner=?", (owner,))
            gone = [Claim.of_row(r) for r in rows.fetchall()]
            db.execute("DELETE FROM claims WHERE owner=?", (owner,))
            for held in gone:
                _log(db, now, held.place, owner, held.token, "released", "session ended")
            return gone
    finally:
        if conn is None:
            db.close()


def fence(place: Place, owner: str, token: int | None = None, *, force: bool = False,
          what: str = "write", conn: sqlite3.Connection | None = None) -> int | None:  # fmt: skip
    """Before storyd writes `place` for `owner`, as late as it can: the owner's current
    token there (None: it holds no claim there). Held (75) when another owner holds an
    overlapping live claim, or when `token` (the grant the owner started with) is no
    longer a live grant of its own; `force` writes anyway, logged as forced."""
    kv = _fleet(place.workspace)
    fleet = None if kv is None else kv[0].fence(place, kv[1], owner, token)
    if fleet is not None and fleet[1] is None and (token is None or token in fleet[0]):
        return max(fleet[0], default=None)  # a fleet unit's own grant: nothing to log
    if fleet is None and conn is None and not ever_claimed():
        return None  # nothing was ever claimed on this machine (reconcile with [fleet])
    db = conn or connect()
    try:
        with transaction(db):
            now = time.time()
            found = _overlapping(db, Place(place.workspace, place.state_file, place.unit))
            mine = [c.token for c in found if c.owner == owner and c.live(now)]
            holder = held_by(found, owner, now)
            if fleet is not None:  # a fleet unit: the bucket's holder, judged at server time
                mine, holder = fleet
            stale = token is not None and token not in mine
            if (holder is not None or stale) and not force:
                why = (_held_message(place, holder) if holder is not None else
                       f"{place.label()}: the grant {owner} started with (token {token}) is "
                       "no longer current")  # fmt: skip
                raise Held(f"{why}; {what} refused", holder or Claim(place, owner, token or 0,
                                                                    now, now, now))  # fmt: skip
            if holder is not None or stale:
                over = f" over {holder.owner} (token {holder.token})" if holder else ""
                _log(db, now, place, owner, token, "forced", f"{what}{over}")
            return max(mine, default=None)
    finally:
        if conn is None:
            db.close()


def record_lost(place: Place, writer: str, *, conn: sqlite3.Connection | None = None,
                fleet: bool = False) -> dict[str, object] | None:  # fmt: skip
    """A write to `place` by `writer`: when another owner holds a live overlapping claim,
    the `claim-lost` record (both owners and tokens), kept once per holder's grant.
    `fleet` (the daemon answering a hook) judges a fleet unit by the bucket's holder at
    the server's time; the record is kept here, where stop and status read it."""
    kv = _fleet(place.workspace) if fleet else None
    if kv is not None:
        mine_there, holder = kv[0].fence(place, kv[1], writer, None)
        if holder is None or mine_there:
            return None  # free, or the writer holds a unit of its own there
        db = conn or connect()
        try:
            with transaction(db):
                return _keep_lost(db, place, writer, holder, time.time())
        finally:
            if conn is None:
                db.close()
    if conn is None and not ever_claimed():
        return None  # nothing was ever claimed here: no database made
    db = conn or connect()
    try:
        with transaction(db):
            now = time.time()
            found = _overlapping(db, Place(place.workspace, place.state_file, place.unit))
            holder_here = held_by(found, writer, now)
            if holder_here is None or any(c.owner == writer and c.live(now) for c in found):
                return None  # free, or the writer holds a unit of its own there
            return _keep_lost(db, place, writer, holder_here, now)
    finally:
        if conn is None:
            db.close()


def _keep_lost(db: sqlite3.Connection, place: Place, writer: str, holder: Claim,
               now: float) -> dict[str, object]:  # fmt: skip
    """Keep a `claim-lost` record (once per holder's grant), with the writer's last
    granted token there (from the log): its dict."""
    mine = db.execute("SELECT max(token) FROM log WHERE workspace=? AND state_file=? "
                      "AND owner=? AND kind='granted' AND (unit=? OR unit='' OR ?='')",
                      (place.workspace, place.state_file, writer, place.unit,
                       place.unit)).fetchone()  # fmt: skip
    token = None if mine is None or mine[0] is None else int(mine[0])
    db.execute("INSERT OR IGNORE INTO lost(at, workspace, state_file, unit, owner, "
               "token, holder, current) VALUES(?,?,?,?,?,?,?,?)",
               (now, place.workspace, place.state_file, holder.place.unit, writer,
                token, holder.owner, holder.token))  # fmt: skip
    return _lost_dict(place.workspace, place.state_file, holder.place.unit, writer,
                      token, holder.owner, holder.token, now)  # fmt: skip


def _lost_dict(workspace: str, state_file: str, unit: str, owner: str, token: int | None,
               holder: str, current: int, at: float) -> dict[str, object]:  # fmt: skip
    return {
        "code": "claim-lost", "workspace": workspace, "stateFile": state_file, "unit": unit,
        "writer": owner, "writerToken": token, "holder": holder, "holderToken": current,
        "at": _iso(at),
        "message": (f"{state_file} {unit}: written by {owner} (token "
                    f"{'none' if token is None else token}) while {holder} holds the "
                    f"current grant (token {current})"),
    }  # fmt: skip


def lost(*, owner: str | None = None, workspace: str | None = None, untold: bool = False,
         conn: sqlite3.Connection | None = None) -> list[dict[str, object]]:  # fmt: skip
    """The `claim-lost` records (of one writer, of one workspace), oldest first; with
    `untold`, only those no stop has blocked on yet, which are then marked told."""
    if conn is None and not ever_claimed():
        return []
    db = conn or connect()
    try:
        where, args = ["told = 0"] if untold else [], []
        for column, value in (("owner", owner), ("workspace", workspace)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        sql = ("SELECT workspace, state_file, unit, owner, token, holder, current, at FROM lost"
               + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id")
        if not untold:  # a read: no writer's lock (status and check read it)
            return [_lost_dict(*row) for row in db.execute(sql, args).fetchall()]
        with transaction(db):
            found = [_lost_dict(*row) for row in db.execute(sql, args).fetchall()]
            if found:
                db.execute("UPDATE lost SET told = 1 WHERE " + " AND ".join(where), args)
        return found
    finally:
        if conn is None:
            db.close()


def log(place: Place | None = None, *, conn: sqlite3.Connection | None = None,
        ) -> list[dict[str, object]]:  # fmt: skip
    """The claims' history (of one place), oldest first."""
    if conn is None and not ever_claimed():
        return []
    db = conn or connect()
    try:
        sql = ("SELECT at, workspace, state_file, unit, task, owner, token, kind, detail "
               "FROM log")
        args: tuple[str, ...] = ()
        if place is not None:
            sql += " WHERE workspace=? AND state_file=? AND unit=? AND task=?"
            args = place.key()
        keys = ("at", "workspace", "stateFile", "unit", "task", "owner", "token", "kind",
                "detail")  # fmt: skip
        return [dict(zip(keys, (_iso(r[0]), *r[1:]), strict=True))
                for r in db.execute(sql + " ORDER BY id", args)]  # fmt: skip
    finally:
        if conn is None:
            db.close()
