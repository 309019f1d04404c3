"""The publishing thread: its own asyncio loop, the NATS connection, KV and stream.

The daemon's threads only `offer` (append to a deque and wake the loop); everything
that touches the network happens here, so a slow or absent server never slows a query.

Summaries: the newest per unit goes to the KV bucket (puts in flight together). While
the server is away nothing is kept per unit: on every (re)connect the current
summaries are re-published from the engine and keys of units gone meanwhile deleted.
Claims: each summary carries its unit's claim (storyd.api.claimview, read once per batch
of puts); every second the claims are read again and a unit whose claim changed (a
grant, a renewal, a release, a lease that ended) is put again. Nothing is read while
nothing was ever claimed on this machine (claimview.seen is a stat then).
Events: every one gets a message id `<machine>.<instance>.<seq>` and waits in the
bounded backlog until the stream acknowledged it; re-sent after an outage, JetStream
drops the copies it already stored (same id, within the stream's duplicate window).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from storyd.core.worker import Worker
from storyd.fleet import names
from storyd.fleet.backlog import Backlog, Message
from storyd.fleet.config import Fleet
from storyd.fleet.summary import Repos, event_payload, now_iso, unit_summary

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.api.claimview import Seen

__all__ = ["Publisher"]

_BATCH = 256  # publishes in flight at once
_RETRY = (1.0, 2.0, 5.0, 10.0, 30.0)  # seconds between attempts after a failure
_CLAIMS_EVERY = 1.0  # seconds between two reads of the claims (a claim seen within ~1 s)
_LISTS_EVERY = 5.0  # seconds between two reads of the Claude Code task lists (not watched)
Current = Callable[[], Sequence[Mapping[str, object]]]


class Publisher:
    """Publishes what it is offered; `state()` says how it goes."""

    def __init__(
        self,
        fleet: Fleet,
        *,
        instance: str,
        current: Current,
        log: Any,
        version: str,
        spaces: Callable[[], Sequence[str]] | None = None,
    ) -> None:
        self.fleet = fleet
        self.machine = fleet.machine
        self.instance = instance
        self.current = current
        self.spaces = spaces  # the watched workspaces (those without a unit too)
        self.log = log
        self.version = version
        self.backlog = Backlog(fleet.backlog)
        self.counters = {"summaries": 0, "events": 0, "duplicates": 0, "deleted": 0, "resyncs": 0}
        self.connected = False
        self.last_error: str | None = None
        self.last_error_at: str | None = None
        self._symptom = False  # last_error is a transport error, not a reason
        self._inbox: deque[tuple[Mapping[str, object], bool]] = deque()
        self._latest: dict[str, Mapping[str, object]] = {}  # KV key -> summary or event
        self._pending: dict[str, bytes | None] = {}  # KV key -> value (None: delete)
        self._codes: dict[str, dict[str, int]] = {}  # KV key -> finding codes
        self._claims: dict[str, object] = {}  # KV key -> the `claim` field put (None: none)
        self._lists: set[str] = set()  # KV keys of the tied task lists put
        self._seq = 0
        self._repos = Repos()
        self._resync = True
        self._stopping = False
        self._scheduled = False
        self._hold = False
        self._up = False  # connected and set up: pending writes are kept
        self._from_snapshot: set[str] = set()
        self._connecting: asyncio.Future[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = Worker("fleet", body=self._run, waker=self._wake_loop)

    # -- the daemon's side (any thread) ----------------------------------------------------

    def start(self) -> None:
        """Start the thread (returns at once; connecting happens there)."""
        self._thread.start()
        self._ready.wait(5)

    def offer(self, event: Mapping[str, object], *, stream: bool = True) -> None:
        """An engine event (`stream`: also to the stream): cheap, never blocks."""
        self._inbox.append((event, stream))
        loop = self._loop
        if loop is not None and not self._scheduled:
            self._scheduled = True
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._on_offer)

    def _on_offer(self) -> None:
        """On the loop: drain the inbox now (even while a connect is under way) and wake."""
        self._scheduled = False
        self._drain_inbox()
        if self._wake is not None:
            self._wake.set()

    def state(self) -> dict[str, object]:
        """For `stats` and `doctor`."""
        return {
            "url": self.fleet.url,
            "machine": self.machine,
            "connected": self.connected,
            "backlog": len(self.backlog),
            "backlogSize": self.backlog.size,
            "dropped": self.backlog.dropped,
            "lastError": self.last_error,
            "lastErrorAt": self.last_error_at,
            **self.counters,
        }

    def close(self, timeout: float = 3.0) -> None:
        """Publish what is queued (briefly, when connected), then stop the thread."""
        self._stopping = True
        self._thread.close(timeout)

    def _wake_loop(self) -> None:
        """From the closing thread: the loop's stop, on the loop."""
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._stop_soon)

    def _stop_soon(self) -> None:
        """On the loop: wake it, and give up a connect that is still retrying."""
        if self._wake is not None:
            self._wake.set()
        if self._connecting is not None and not self._connecting.done():
            self._connecting.cancel()

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._ready.set()
        attempt = 0
        while not self._stopping:
            self._drain_inbox()
            try:
                await self._session()
                attempt = 0
            except asyncio.CancelledError:  # close() while a connect was retrying
                break
            except Exception as exc:  # every failure is one line; the loop goes on
                self._failed(exc)
                attempt += 1
            if self._stopping:
                break
            await self._sleep(_RETRY[min(attempt, len(_RETRY)) - 1] if attempt else 0.2)

    async def _sleep(self, seconds: float) -> None:
        """Wait, draining the inbox meanwhile (the backlog bound applies offline too)."""
        deadline = time.monotonic() + seconds
        assert self._wake is not None
        while not self._stopping and (left := deadline - time.monotonic()) > 0:
            await self._idle(left)
            self._drain_inbox()

    async def _session(self) -> None:
        """One connection: set up, re-publish, then publish as events come, until it ends."""
        self._connecting = asyncio.ensure_future(self._connect())
        try:
            nc = await self._connecting
        finally:
            self._connecting = None
        try:
            js = nc.jetstream(timeout=5.0)
            kv = await self._setup(js)
            self._resync = True
            await self._serve(nc, js, kv)
        finally:
            self.connected = self._up = False
            with contextlib.suppress(Exception):  # closing a broken connection
                await asyncio.wait_for(nc.close(), 2)

    async def _connect(self) -> Any:
        import nats

        from storyd.fleet.connect import options

        async def disconnected() -> None:
            self._disconnected()

        async def reconnected() -> None:
            self._resync = True
            self._wake_soon()

        async def error(exc: Exception) -> None:
            self._note(exc)

        return await nats.connect(
            **options(self.fleet, reconnect=True),
            disconnected_cb=disconnected,
            reconnected_cb=reconnected,
            error_cb=error,
        )

    def _disconnected(self) -> None:
        self._up = False
        self._resync = True  # whatever the order of the callbacks and the loop
        if self.connected:
            self.connected = False
            self.log.warning("fleet_disconnected", url=self.fleet.url)

    async def _serve(self, nc: Any, js: Any, kv: Any) -> None:
        next_beat = next_claims = next_lists = 0.0
        while not self._stopping or self._inbox:
            self._drain_inbox()
            if nc.is_closed:
                raise ConnectionError("the connection closed")
            if not nc.is_connected:
                self._disconnected()
                await self._sleep(0.5)
                continue
            self._up = True  # from here pending writes are kept until they go out
            if self._resync:
                await self._republish(kv)
                self._resync = False
            if not self.connected:
                self.connected = True
                self.last_error = None
                self.log.info("fleet_connected", url=self.fleet.url, machine=self.machine)
            if time.monotonic() >= next_claims:
                await self._claims_changed()
                next_claims = time.monotonic() + _CLAIMS_EVERY
            if time.monotonic() >= next_lists:
                await self._lists_changed()
                next_lists = time.monotonic() + _LISTS_EVERY
            await self._put_pending(kv)
            await self._publish_backlog(js)
            if time.monotonic() >= next_beat:
                await self._heartbeat(kv)
                next_beat = time.monotonic() + self.fleet.heartbeat
            if self._stopping:
                break
            if not self._pending and not len(self.backlog) and not self._inbox:
                wake = min(next_beat, next_claims, next_lists)
                await self._idle(max(0.05, wake - time.monotonic()))

    async def _idle(self, seconds: float) -> None:
        assert self._wake is not None
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    def _wake_soon(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # -- server objects --------------------------------------------------------------------

    async def _setup(self, js: Any) -> Any:
        """Bind or create the bucket and the stream; refuse ones made with other settings."""
        import nats.js.errors
        from nats.js.api import KeyValueConfig, StreamConfig

        try:
            info = await js.stream_info(names.STREAM)
        except nats.js.errors.NotFoundError:
            await js.add_stream(
                StreamConfig(
                    name=names.STREAM,
                    subjects=[names.SUBJECTS],
                    duplicate_window=names.DUPLICATE_WINDOW,
                    max_age=names.EVENTS_MAX_AGE,
                )
            )
        else:
            config = info.config
            if names.SUBJECTS not in (config.subjects or []):
                raise SetupMismatch(
                    f"stream {names.STREAM} exists with subjects {config.subjects}, "
                    f"not {names.SUBJECTS}: delete it or let storyd create it"
                )
        try:
            kv = await js.key_value(names.BUCKET)
        except nats.js.errors.BucketNotFoundError:
            return await js.create_key_value(
                KeyValueConfig(bucket=names.BUCKET, history=names.HISTORY)
            )
        status = await kv.status()
        if status.history != names.HISTORY:
            raise SetupMismatch(
                f"bucket {names.BUCKET} exists with history {status.history}, storyd "
                f"needs {names.HISTORY} (the newest summary only): delete it "
                f"(nats kv del {names.BUCKET}) or let storyd create it"
            )
        return kv

    # -- publishing ------------------------------------------------------------------------

    def _older(self, key: str, event: Mapping[str, object], *, same: bool = False) -> bool:
        """Whether an event predates what `_latest` holds for its unit (a re-publish's
        snapshot may be newer than events still in the inbox); `same`: or is as old as
        a snapshot entry (whose findings already count it)."""
        current = self._latest.get(key)
        gen, have = event.get("generation"), current and current.get("generation")
        if not isinstance(gen, int) or not isinstance(have, int):
            return False
        return gen < have or (same and gen == have and key in self._from_snapshot)

    def _drain_inbox(self) -> None:
        """Engine events -> pending KV writes and backlog messages (no network)."""
        if self._hold:
            return  # a re-publish is reading the engine: its snapshot goes first
        inbox = self._inbox
        while inbox:
            event, stream = inbox.popleft()
            kind = str(event.get("event"))
            workspace = str(event.get("workspace"))
            key = names.unit_key(
                self.machine, workspace, str(event.get("stateFile")), str(event.get("unit"))
            )
            when = now_iso()
            if kind == "changed" and not self._older(key, event):
                self._pending[key] = b""  # rendered at publish time, with the newest codes
                self._latest[key] = event
                self._from_snapshot.discard(key)
            elif kind == "removed" and not self._older(key, event):
                self._pending[key] = None
                self._latest.pop(key, None)
                self._codes.pop(key, None)
            elif kind in ("drift", "resolved") and not self._older(key, event, same=True):
                self._count_code(key, kind, event.get("finding"))
            if stream:
                self._seq += 1
                message_id = f"{self.machine}.{self.instance}.{self._seq}"
                payload = orjson.dumps(event_payload(self.machine, self._seq, event, when))
                self.backlog.put((message_id, names.event_subject(self.machine, kind), payload))
        if not self._up:
            self._pending.clear()  # re-published from the engine on (re)connect

    def _count_code(self, key: str, kind: str, finding: object) -> None:
        code = (
            f"{finding.get('detector')}/{finding.get('code')}"
            if isinstance(finding, Mapping)
            else "?"
        )
        codes = self._codes.setdefault(key, {})
        if kind == "drift":
            codes[code] = codes.get(code, 0) + 1
        elif codes.get(code, 0) > 1:
            codes[code] -= 1
        else:
            codes.pop(code, None)
        if key in self._latest:
            self._pending[key] = b""

    async def _republish(self, kv: Any) -> None:
        """After a (re)connect: every current summary, and deletes for units gone since."""
        started = time.perf_counter()
        self._hold = True  # events wait in the inbox; applied after, newer ones only
        try:
            current = await asyncio.to_thread(self.current)
        finally:
            self._hold = False
        self._latest = {}
        self._codes = {}
        for summary in current:
            key = names.unit_key(
                self.machine,
                str(summary.get("workspace")),
                str(summary.get("stateFile")),
                str(summary.get("unit")),
            )
            self._latest[key] = summary
            self._codes[key] = _codes_of(summary)
        self._from_snapshot = set(self._latest)
        self._pending = {key: b"" for key in self._latest}
        self._drain_inbox()
        self._lists = set()
        await self._lists_changed()  # before the deletes: a tied list's key is current
        stored = await self._stored_keys(kv)
        for key in stored - set(self._latest):
            self._pending[key] = None
        await self._put_pending(kv)
        self.counters["resyncs"] += 1
        self.log.info(
            "fleet_resync",
            units=len(self._latest),
            deleted=len(stored - set(self._latest)),
            backlog=len(self.backlog),
            duration_ms=round((time.perf_counter() - started) * 1000, 1),
        )

    async def _lists_changed(self) -> None:
        """Read the task lists tied to the published workspaces again (nothing watches
        them: storyd.api.claude_ties) and mark for a put each changed one, for a delete
        each gone."""
        found = await asyncio.to_thread(self._tied)
        now: set[str] = set()
        for summary in found:
            key = names.unit_key(self.machine, str(summary.get("workspace")),
                                 str(summary.get("stateFile")), str(summary.get("unit")))
            now.add(key)
            if self._latest.get(key) != summary:
                self._latest[key] = summary
                self._codes[key] = _codes_of(summary)
                self._pending[key] = b""
        for key in self._lists - now:
            self._latest.pop(key, None)
            self._codes.pop(key, None)
            self._pending[key] = None
        self._lists = now

    def _tied(self) -> list[dict[str, object]]:
        """The summaries of the task lists tied to the watched workspaces and to those of
        the published units (storyd.api.claude_ties)."""
        from storyd.api.claude_ties import with_lists

        spaces = {str(s.get("workspace")) for s in list(self._latest.values())}
        spaces.update(self.spaces() if self.spaces is not None else ())
        found: list[dict[str, object]] = with_lists([], sorted(spaces))
        return found

    async def _stored_keys(self, kv: Any) -> set[str]:
        """This machine's unit keys in the bucket."""
        from storyd.fleet.reader import kv_entries

        return set(await kv_entries(kv, f"u.{self.machine}.>", meta_only=True))

    async def _claims_changed(self) -> None:
        """Mark for a put every unit whose claim is not the one last put."""
        found = await asyncio.to_thread(_seen)
        if found is None and not any(self._claims.values()):
            return  # nothing claimed here, nothing put with a claim
        for key, source in self._latest.items():
            if key not in self._pending and _claim(found, source) != self._claims.get(key):
                self._pending[key] = b""

    def _render(self, key: str, found: Seen | None) -> bytes | None:
        source = self._latest.get(key)
        if source is None:
            return None
        codes = sorted(self._codes.get(key, {}))
        repo = self._repos(str(source.get("workspace")))
        claim = _claim(found, source)
        self._claims[key] = claim
        if claim is not None or "claim" in source:
            source = {**source, "claim": claim}
        return orjson.dumps(unit_summary(self.machine, source, codes, repo, now_iso()))

    async def _put_pending(self, kv: Any) -> None:
        found = await asyncio.to_thread(_seen) if self._pending else None
        while self._pending:
            batch = []
            for _ in range(min(_BATCH, len(self._pending))):
                key, value = self._pending.popitem()
                batch.append((key, value))
            results = await asyncio.gather(
                *(self._put_one(kv, key, value, found) for key, value in batch),
                return_exceptions=True,
            )
            failed = [
                (b, r) for b, r in zip(batch, results, strict=True) if isinstance(r, BaseException)
            ]
            for (key, value), _ in failed:
                self._pending.setdefault(key, value)
            if failed:
                raise failed[0][1]

    async def _put_one(self, kv: Any, key: str, value: bytes | None,
                       found: Seen | None) -> None:  # fmt: skip
        if value is None:
            await kv.delete(key)
            self._claims.pop(key, None)
            self.counters["deleted"] += 1
            return
        rendered = self._render(key, found)
        if rendered is None:
            return
        await kv.put(key, rendered)
        self.counters["summaries"] += 1

    async def _publish_backlog(self, js: Any) -> None:
        while len(self.backlog):
            batch = self.backlog.peek(_BATCH)
            results = await asyncio.gather(
                *(self._publish_one(js, message) for message in batch), return_exceptions=True
            )
            for result in results:
                if isinstance(result, BaseException):
                    raise result

    async def _publish_one(self, js: Any, message: Message) -> None:
        message_id, subject, payload = message
        ack = await js.publish(subject, payload, headers={names.MSG_ID: message_id})
        self.backlog.done(message_id)
        if ack.duplicate:
            self.counters["duplicates"] += 1
        else:
            self.counters["events"] += 1

    async def _heartbeat(self, kv: Any) -> None:
        beat = {
            "machine": self.machine,
            "instance": self.instance,
            "version": self.version,
            "when": now_iso(),
            "heartbeat": self.fleet.heartbeat,
            "units": len(self._latest),
            "backlog": len(self.backlog),
            "dropped": self.backlog.dropped,
        }
        await kv.put(names.machine_key(self.machine), orjson.dumps(beat))

    # -- failures --------------------------------------------------------------------------

    def _failed(self, exc: BaseException) -> None:
        self.connected = False
        self._note(exc)

    def _note(self, exc: BaseException) -> None:
        """Record a failure; log it when it says something new (not every retry)."""
        from storyd.fleet.connect import describe

        line = str(exc) if isinstance(exc, SetupMismatch) else describe(exc, self.fleet)
        self.last_error_at = now_iso()
        symptom = _transport(exc)
        if self.last_error and not self.connected and symptom and not self._symptom:
            return  # a refused connect also ends in EOF or a reset: keep the reason
        self._symptom = symptom
        if line != self.last_error:
            self.last_error = line
            self.log.error("fleet_unavailable", error=line, backlog=len(self.backlog))


def _codes_of(summary: Mapping[str, object]) -> dict[str, int]:
    """A summary's finding codes (`detector/code`) with their counts."""
    codes: dict[str, int] = {}
    found = summary.get("findingList")
    for f in found if isinstance(found, list) else ():
        code = f"{f.get('detector')}/{f.get('code')}"
        codes[code] = codes.get(code, 0) + 1
    return codes


def _seen() -> Seen | None:
    """The claims now (storyd.api.claimview.seen: None when nothing was ever claimed)."""
    from storyd.api.claimview import seen

    return seen()


def _claim(found: Seen | None, source: Mapping[str, object]) -> dict[str, object] | None:
    """The unit's `claim` field (storyd.api.claimview's), None when it has none."""
    if found is None:
        return None
    from storyd.api.claimview import claim_field

    held = found.claim_of(str(source.get("workspace")), str(source.get("stateFile")),
                          str(source.get("unit")))  # fmt: skip
    return None if held is None else claim_field(held, found.now)


def _transport(exc: BaseException) -> bool:
    """Whether an error is the connection's end rather than its reason."""
    import nats.errors

    return isinstance(
        exc,
        (OSError, nats.errors.StaleConnectionError, nats.errors.ConnectionClosedError,
         nats.errors.NoServersError),
    )


class SetupMismatch(Exception):
    """The bucket or stream exists with settings storyd cannot use."""
