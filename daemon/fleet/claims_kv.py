"""Claims across machines: a JetStream key-value bucket, compare-and-swap on the revision.

Imports `nats` (the `fleet` extra): daemon/api/claims_fleet.py loads this module only
for a fleet unit, never on `storyd resume` or a hook's start-up path.

One key per state file of a repository, `c.<digest>` with digest = BLAKE2b(the
repository's remote, the state file): the same story in two clones on two machines
is one key. Its value holds every claim on that file (units and tasks), because two
places overlap only within one file, and one key is what one compare-and-swap covers:

    {"remote": R, "stateFile": S, "claims": [{"unit", "task", "owner", "machine",
     "workspace", "token", "granted", "renewed", "ttl", "last"}, ...]}

Every write names the revision it read (`Nats-Expected-Last-Subject-Sequence`): of
racing writers the server stores exactly one, the others read again and decide again.
Times are the server's: `granted`/`renewed` null means "the time the server stamped on
this very entry", filled in by the next writer from the entry it read. A lease is live
while the server time is below renewed + ttl. A grant over an old lease is decided
against a server timestamp (the entry's, or a fresh one), never this machine's clock.
A token is the revision the grant read plus one (revisions are the bucket's stream
sequence: they only grow, across deletes, purges and restarts), so each grant's token
is above every earlier one of the key and at most its own revision.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from hashlib import blake2b
from typing import Any

import orjson

from storyd.api.claims import Claim, Held, Place
from storyd.core.errors import LockTimeout, SetupError
from storyd.fleet.claims_repo import Repositories
from storyd.fleet.config import Fleet

__all__ = ["BUCKET", "FleetOffline", "KvClaims", "key_of"]

BUCKET = "storyd-claims"
STREAM = f"KV_{BUCKET}"
_TIMEOUT = 2.0  # seconds for one request to the server
# after a failed connect, the seconds it is not tried again: a server that does not
# answer (a dropped route) costs one connect timeout per interval, not per hook
RETRY_AFTER = 5.0
_LAST = "Nats-Expected-Last-Subject-Sequence"
_WRONG_LAST = (10071, 10164)
_FIELDS = frozenset(("unit", "task", "owner", "machine", "workspace", "token", "ttl"))


class FleetOffline(LockTimeout):
    """The server cannot be reached: a fleet unit cannot be claimed here now (75)."""

    name = "FLEET_OFFLINE"


def key_of(remote: str, state_file: str) -> str:
    """The bucket key of a state file of a repository (paths hold any character)."""
    digest = blake2b(f"{remote}\0{state_file}".encode(), digest_size=12).hexdigest()
    return f"c.{digest}"


_Rows = list[tuple[float, Place, str, int, str, "str | None"]]  # the claims log's rows


def _record(rows: _Rows) -> None:
    """Rows of this machine's claims log, written as the local store writes its own
    (storyd.api.claims._log), so `storyd history` shows a fleet unit's grants, renewals,
    releases and ended leases; a log that cannot be written now loses them, never the
    grant (which the bucket holds)."""
    from storyd.api.claims import _log
    from storyd.api.claims_store import connect, transaction
    from storyd.core.errors import StorydError

    try:
        db = connect()
    except StorydError:
        return
    try:
        with transaction(db):
            for row in rows:
                _log(db, *row)
    except StorydError:
        pass
    finally:
        db.close()


class _Entry:
    """The key's newest message: revision (0: none), server time, claims."""

    def __init__(self, revision: int, at: float, claims: list[dict[str, Any]]) -> None:
        self.revision = revision
        self.at = at
        self.claims = claims


def _overlaps(c: dict[str, Any], place: Place) -> bool:
    unit_ok = c["unit"] == place.unit or "" in (c["unit"], place.unit)
    return unit_ok and (c["task"] == place.task or "" in (c["task"], place.task))


def _expires(c: dict[str, Any]) -> float:
    return float(c["renewed"]) + float(c["ttl"])


def _mine(c: dict[str, Any], owner: str, machine: str) -> bool:
    """Same holder: the owner's name on the same machine (`user:ci` on two runners are
    two holders)."""
    return bool(c["owner"] == owner and c["machine"] == machine)


class KvClaims:
    """The bucket for one [fleet]: its own thread and asyncio loop, one connection,
    called synchronously by daemon/api/claims.py."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.machine = fleet.machine
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fleet-claims",
                                        daemon=True)  # fmt: skip
        self._thread.start()
        self._nc: Any = None
        self._js: Any = None
        self._offset: float | None = None  # local clock minus server clock, upper bound
        self._down: tuple[float, str] | None = None  # after a failed connect: (retry at, why)
        self._lock = threading.Lock()
        self.remote = Repositories()  # a workspace's repository; None: not a fleet unit

    # -- plumbing ---------------------------------------------------------------------------

    def _run(self, coro: Any, what: str) -> Any:
        with self._lock:  # one request at a time: the connection's state stays simple
            future = asyncio.run_coroutine_threadsafe(self._guard(coro, what), self._loop)
            try:
                return future.result(_TIMEOUT * 4 + 2)
            except TimeoutError:
                future.cancel()
                raise FleetOffline(
                    f"{what}: {self.fleet.url} did not answer in time; a grant "
                    "may have been stored: claim again to learn"
                ) from None

    async def _guard(self, coro: Any, what: str) -> Any:
        import nats.errors
        import nats.js.errors

        try:
            await self._connect()
        except FleetOffline as exc:
            coro.close()
            raise FleetOffline(f"{what}: {exc.message}") from None
        try:
            return await coro
        except (Held, FleetOffline):
            raise
        except (nats.errors.TimeoutError, TimeoutError) as exc:
            raise FleetOffline(f"{what}: {self.fleet.url} did not answer in {_TIMEOUT:g} s; "
                               "a grant may have been stored: claim again to renew it or learn "
                               "the holder") from exc  # fmt: skip
        except (nats.errors.Error, nats.js.errors.Error, OSError) as exc:
            from storyd.fleet.connect import describe

            raise FleetOffline(f"{what}: {describe(exc, self.fleet)}; fleet units are claimed "
                               "only through the server") from exc  # fmt: skip
        finally:
            coro.close()

    async def _connect(self) -> None:
        from nats.aio.client import Client

        from storyd.fleet.connect import options

        if self._nc is not None and not self._nc.is_closed:
            if not self._nc.is_connected:
                raise FleetOffline(f"cannot reach {self.fleet.url}: reconnecting; fleet units "
                                   "are claimed only through the server")  # fmt: skip
            return
        if self._down is not None and time.monotonic() < self._down[0]:
            raise FleetOffline(self._down[1])
        errors: list[Exception] = []

        async def error(exc: Exception) -> None:  # instead of nats-py's traceback
            errors.append(exc)

        nc = Client()
        try:
            await nc.connect(**options(self.fleet, reconnect=False, timeout=1.0),
                             error_cb=error)  # fmt: skip
        except Exception as exc:
            from storyd.fleet.connect import describe

            with contextlib.suppress(Exception):  # a connect that timed out leaves its socket
                await asyncio.wait_for(nc.close(), 1)

            why = (f"{describe(errors[-1] if errors else exc, self.fleet)}; fleet units are "
                   f"claimed only through the server (tried again after {RETRY_AFTER:g} s)")
            self._down = (time.monotonic() + RETRY_AFTER, why)
            raise FleetOffline(why) from None
        self._down = None
        # from here on, ride out a restart (a first connect that retried would never end)
        nc.options.update(allow_reconnect=True, max_reconnect_attempts=-1,
                          reconnect_time_wait=0.25)  # fmt: skip
        js = nc.jetstream(timeout=_TIMEOUT)
        await _bucket(js)
        self._nc, self._js = nc, js

    def close(self) -> None:
        """Close the connection and stop the thread."""

        async def shut() -> None:
            if self._nc is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._nc.close(), 2)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shut(), self._loop).result(3)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(3)
        if not self._thread.is_alive():
            self._loop.close()

    # -- the bucket ---------------------------------------------------------------------------

    async def _read(self, key: str) -> _Entry:
        import nats.js.errors

        try:
            msg = await self._js.get_msg(STREAM, subject=f"$KV.{BUCKET}.{key}")
        except nats.js.errors.NotFoundError:
            return _Entry(0, 0.0, [])
        at = msg.time.timestamp() if msg.time else 0.0
        headers = msg.headers or {}
        if headers.get("KV-Operation") in ("DEL", "PURGE") or not msg.data:
            return _Entry(int(msg.seq or 0), at, [])
        try:
            body = orjson.loads(msg.data)
            claims = list(body["claims"])
            if not all(c.keys() >= _FIELDS and float(c["ttl"]) >= 0 for c in claims):
                raise KeyError("claims")  # a field every decision reads is missing
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            raise SetupError(f"bucket {BUCKET} key {key} does not hold storyd's claims: delete "
                             f"it (nats kv del {BUCKET} {key})") from None  # fmt: skip
        for c in claims:  # null: the time of this entry
            c["stateFile"], c["remote"] = body.get("stateFile", ""), body.get("remote", "")
            c["granted"] = at if c.get("granted") is None else c["granted"]
            c["renewed"] = at if c.get("renewed") is None else c["renewed"]
        return _Entry(int(msg.seq or 0), at, claims)

    async def _write(self, key: str, last: int, place: Place, remote: str,
                     claims: list[dict[str, Any]]) -> int | None:  # fmt: skip
        """The new revision; None when another writer came first (read again)."""
        import nats.js.errors

        kept = [{k: v for k, v in c.items() if k not in ("stateFile", "remote")} for c in claims]
        body = {"remote": remote, "stateFile": place.state_file, "claims": kept}
        try:
            ack = await self._js.publish(f"$KV.{BUCKET}.{key}", orjson.dumps(body),
                                         headers={_LAST: str(last)})  # fmt: skip
        except nats.js.errors.APIError as exc:
            if exc.err_code in _WRONG_LAST:
                return None
            raise
        return int(ack.seq)

    async def _stamp(self, revision: int) -> float:
        """The server's time of a revision this process just wrote (a fresh reading of
        the server's clock: the only kind the offset learns from; an entry read may be
        old, and would make the estimate late by its age)."""
        msg = await self._js.get_msg(STREAM, seq=revision)
        at = msg.time.timestamp() if msg.time else time.time()
        self._observe(at)
        return float(at)

    async def _server_now(self) -> float:
        """A fresh server time: a write to this machine's clock key, then its stamp."""
        ack = await self._js.publish(f"$KV.{BUCKET}.t.{self.machine}", b"")
        return await self._stamp(int(ack.seq))

    def _observe(self, server_at: float) -> None:
        """Learn (an upper bound of) how far this clock is ahead of the server's, from a
        stamp of this process's own write just made."""
        if server_at:
            ahead = time.time() - server_at
            self._offset = ahead if self._offset is None else min(self._offset, ahead)

    async def _now_at_least(self, entry: _Entry, until: float) -> float:
        """A server time to judge a lease ending at `until` by: the entry's own when
        that already ended it, else a fresh one when this clock (corrected by the
        offset, which can only make it late) says it may have ended."""
        if until <= entry.at:
            return entry.at
        if self._offset is not None and time.time() - self._offset < until:
            return entry.at  # still live by an estimate that is never early: refuse
        return await self._server_now()

    async def _floor(self, entry: _Entry) -> int:
        """The revision a new token must be above: the key's last (markers included),
        else, for a key with no message at all, the stream's last sequence."""
        if entry.revision:
            return entry.revision
        info = await self._js.stream_info(STREAM)
        return int(info.state.last_seq)

    # -- operations (on the loop) ------------------------------------------------------------

    async def _claim(self, place: Place, remote: str, owner: str, ttl: float,
                     last: str | None) -> tuple[Claim, _Rows]:  # fmt: skip
        key = key_of(remote, place.state_file)
        while True:
            entry = await self._read(key)
            live = [
                c for c in entry.claims if _overlaps(c, place) and not _mine(c, owner, self.machine)
            ]
            if live:
                now = await self._now_at_least(entry, min(_expires(c) for c in live))
                live = [c for c in live if _expires(c) > now]
                if live:
                    holder = max(live, key=_expires)
                    raise Held(_held(place, holder, now), _claim_of(holder))
            same = [c for c in entry.claims if (c["unit"], c["task"]) == (place.unit, place.task)]
            own = next((c for c in same if _mine(c, owner, self.machine)), None)
            keep = [c for c in entry.claims if c not in same and not (
                _overlaps(c, place) and not _mine(c, owner, self.machine))]  # fmt: skip
            if own is not None and _expires(own) > entry.at:
                new = {**own, "renewed": None, "ttl": ttl, "last": last or own.get("last")}
            else:
                token = await self._floor(entry) + 1
                new = {"unit": place.unit, "task": place.task, "owner": owner,
                       "machine": self.machine, "workspace": place.workspace,
                       "stateFile": place.state_file, "token": token,
                       "granted": None, "renewed": None, "ttl": ttl, "last": last}  # fmt: skip
            revision = await self._write(key, entry.revision, place, remote, [*keep, new])
            if revision is None:
                continue
            at = await self._stamp(revision)
            granted = at if new["granted"] is None else float(new["granted"])
            held = Claim(place, owner, int(new["token"]), granted, at, at + ttl, new["last"])
            ended = [c for c in entry.claims if c not in keep and c is not own]
            if own is not None and new["granted"] is None:
                ended.append(own)  # the owner's own lease ended: a new grant
            rows: _Rows = [(_expires(c), Place(place.workspace, place.state_file, c["unit"],
                            c["task"]), c["owner"], int(c["token"]), "expired", c.get("last"))
                           for c in ended]  # fmt: skip
            kind = "granted" if new["granted"] is None else "renewed"
            rows.append((at, place, owner, held.token, kind, None))
            return held, rows

    async def _release(self, place: Place, remote: str, owner: str, force: bool,
                       ) -> Claim | None:  # fmt: skip
        key = key_of(remote, place.state_file)
        while True:
            entry = await self._read(key)
            found = next((c for c in entry.claims
                          if (c["unit"], c["task"]) == (place.unit, place.task)), None)  # fmt: skip
            if found is None:
                return None
            if not _mine(found, owner, self.machine) and not force:
                now = await self._now_at_least(entry, _expires(found))
                if _expires(found) > now:
                    raise Held(_held(place, found, now), _claim_of(found))
            rest = [c for c in entry.claims if c is not found]
            if await self._write(key, entry.revision, place, remote, rest) is not None:
                return _claim_of(found)

    async def _fence(self, place: Place, remote: str, owner: str, token: int | None,
                     ) -> tuple[list[int], dict[str, Any] | None, float]:  # fmt: skip
        entry = await self._read(key_of(remote, place.state_file))
        if not entry.claims:
            return [], None, entry.at  # nobody holds anything there: no clock to read
        now = await self._server_now()  # a write is about to happen: judge it now
        whole = Place(place.workspace, place.state_file, place.unit)
        found = [c for c in entry.claims if _overlaps(c, whole) and _expires(c) > now]
        mine = [int(c["token"]) for c in found if _mine(c, owner, self.machine)]
        holder = next((c for c in found if not _mine(c, owner, self.machine)), None)
        return mine, holder, now

    async def _owned(self, owner: str, ttl: float | None, drop: bool,
                     ) -> tuple[list[Claim], _Rows]:  # fmt: skip
        """Renew (`drop`: release) every claim `owner` holds from this machine, key by
        key, each a compare-and-swap (read again when another writer came first). A
        renewal keeps the token and stamps the server's time (`renewed` null); it renews
        only a lease this machine's clock, corrected by the offset (which can only make
        it late), does not see ended: an abandoned lease stays abandoned."""
        rows: _Rows = []
        done: list[Claim] = []
        for key in await self._keys():
            while True:
                entry = await self._read(key)
                ours = [c for c in entry.claims if _mine(c, owner, self.machine)]
                if not drop:
                    ahead = 0.0 if self._offset is None else self._offset
                    ours = [c for c in ours if _expires(c) > max(entry.at, time.time() - ahead)]
                if not ours:
                    break
                rest = [c for c in entry.claims if c not in ours]
                new = [] if drop else [{**c, "renewed": None, "ttl": c["ttl"] if ttl is None
                                        else ttl} for c in ours]  # fmt: skip
                place = Place(str(ours[0]["workspace"]), str(ours[0]["stateFile"]))
                revision = await self._write(key, entry.revision, place, str(ours[0]["remote"]),
                                             [*rest, *new])  # fmt: skip
                if revision is None:
                    continue
                at = time.time() if drop else await self._stamp(revision)
                kind, why = ("released", "session ended") if drop else ("renewed", None)
                for c in ours:
                    held = _claim_of({**c, "renewed": at, "ttl": c["ttl"] if ttl is None else ttl})
                    rows.append((at, held.place, owner, held.token, kind, why))
                    done.append(held)
                break
        return done, rows

    async def _keys(self) -> list[str]:
        import nats.js.errors

        kv = await self._js.key_value(BUCKET)
        try:
            return [k for k in await kv.keys() if k.startswith("c.")]
        except nats.js.errors.NoKeysError:
            return []

    async def _listing(self) -> list[dict[str, Any]]:
        entries = await asyncio.gather(*(self._read(k) for k in await self._keys()))
        return [c for e in entries for c in e.claims]

    # -- what daemon/api/claims.py calls -------------------------------------------------------

    def claim(self, place: Place, remote: str, owner: str, ttl: float,
              last: str | None = None) -> Claim:  # fmt: skip
        """Grant or renew (Held: 75 naming the holder; FleetOffline: 75 saying why);
        the grant, renewal and leases it ended go to this machine's claims log."""
        held, rows = self._run(self._claim(place, remote, owner, ttl, last),
                               f"cannot claim {place.label()}")  # fmt: skip
        _record(rows)
        return held  # type: ignore[no-any-return]

    def release(self, place: Place, remote: str, owner: str, force: bool = False,
                ) -> Claim | None:  # fmt: skip
        """Give back (None: nothing held there); logged here as a local release is."""
        gone = self._run(self._release(place, remote, owner, force),
                         f"cannot release {place.label()}")  # fmt: skip
        if gone is not None:
            kind = "released" if gone.owner == owner else "forced-release"
            _record([(time.time(), place, owner, gone.token, kind, gone.owner)])
        return gone  # type: ignore[no-any-return]

    def fence(self, place: Place, remote: str, owner: str, token: int | None,
              ) -> tuple[list[int], Claim | None]:  # fmt: skip
        """The owner's live tokens over the unit, and another live holder (or None)."""
        mine, holder, _ = self._run(self._fence(place, remote, owner, token),
                                    f"cannot check the claim on {place.label()}")  # fmt: skip
        return mine, None if holder is None else _claim_of(holder)

    def owned(self, owner: str, ttl: float | None = None, *,
              drop: bool = False) -> list[Claim]:  # fmt: skip
        """Renew every lease `owner` holds from this machine (each by its own length, or
        `ttl`), or with `drop` release them (a session's end): those claims; logged here."""
        what = f"cannot {'release' if drop else 'renew'} the fleet claims of {owner}"
        done, rows = self._run(self._owned(owner, ttl, drop), what)
        _record(rows)
        return done  # type: ignore[no-any-return]

    def listing(self) -> list[tuple[Claim, str]]:
        """Every fleet claim, with the repository it is in."""
        found = self._run(self._listing(), "cannot list the fleet's claims")
        return [(_claim_of(c), str(c["remote"])) for c in found]


async def _bucket(js: Any) -> None:
    """Bind the bucket, or create it (file storage, history 1)."""
    import nats.js.errors
    from nats.js.api import KeyValueConfig, StorageType

    try:
        await js.key_value(BUCKET)
    except nats.js.errors.BucketNotFoundError:
        with contextlib.suppress(nats.js.errors.BadRequestError):  # another made it first
            await js.create_key_value(KeyValueConfig(bucket=BUCKET, history=1,
                                                     storage=StorageType.FILE))  # fmt: skip


def _claim_of(c: dict[str, Any]) -> Claim:
    place = Place(str(c["workspace"]), str(c.get("stateFile", "")), str(c["unit"]), str(c["task"]))
    return Claim(place, str(c["owner"]), int(c["token"]), float(c["granted"]),
                 float(c["renewed"]), _expires(c), c.get("last"))  # fmt: skip


def _held(place: Place, c: dict[str, Any], now: float) -> str:
    ends = _claim_of(c).as_dict(now)["expires"]
    return (
        f"{place.label()}: held by {c['owner']} on {c['machine']} (token {c['token']}) "
        f"until {ends} (server time), in {max(0.0, _expires(c) - now):.0f} s"
    )
