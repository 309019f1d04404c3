"""What `storyd fleet status|events` read from the server (no daemon needed).

Imports `nats` (the optional extra); the commands import this module only when run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from datetime import UTC
from typing import Any

import orjson

from storyd.core.errors import StorydError
from storyd.fleet import names
from storyd.fleet.config import Fleet

__all__ = ["FleetUnavailable", "Snapshot", "follow_events", "kv_entries", "read_snapshot"]

_QUIET = 0.1  # seconds without a late update that end a bucket snapshot


class FleetUnavailable(StorydError):
    """The server cannot be reached or read (exit 69, EX_UNAVAILABLE)."""

    code = 69
    name = "FLEET_UNAVAILABLE"


class Snapshot:
    """The bucket's content: heartbeats by machine, and every unit summary."""

    def __init__(self) -> None:
        self.machines: dict[str, dict[str, Any]] = {}
        self.units: list[dict[str, Any]] = []


async def _connect(fleet: Fleet) -> Any:
    import nats

    from storyd.fleet.connect import describe, options

    errors: list[Exception] = []

    async def error(exc: Exception) -> None:  # instead of nats-py's traceback on stderr
        errors.append(exc)

    try:
        return await nats.connect(**options(fleet, reconnect=False), error_cb=error)
    except Exception as exc:
        raise FleetUnavailable(describe(errors[-1] if errors else exc, fleet)) from None


async def kv_entries(kv: Any, pattern: str, *, meta_only: bool = False) -> dict[str, Any]:
    """The newest entry of every key matching `pattern`.

    A watcher's snapshot ends with a None marker counted when it started; a key written
    meanwhile (its old value gone, history 1) arrives after the marker, so the watcher
    is read on until it has been quiet for 0.1 s.
    """
    import nats.errors

    found: dict[str, Any] = {}
    watcher = await kv.watch(pattern, ignore_deletes=True, meta_only=meta_only)
    try:
        async for entry in watcher:
            if entry is None:
                break
            found[entry.key] = entry
        while True:
            try:
                entry = await watcher.updates(timeout=_QUIET)
            except nats.errors.TimeoutError:
                break
            if entry is not None:
                found[entry.key] = entry
    finally:
        await watcher.stop()
    return found


async def _snapshot(fleet: Fleet, machine: str | None) -> Snapshot:
    import nats.js.errors

    from storyd.fleet.connect import describe

    nc = await _connect(fleet)
    try:
        js = nc.jetstream(timeout=5.0)
        try:
            kv = await js.key_value(names.BUCKET)
        except nats.js.errors.BucketNotFoundError:
            raise FleetUnavailable(
                f"{fleet.url} has no bucket {names.BUCKET}: no storyd has published there yet"
            ) from None
        snap = Snapshot()
        found: dict[str, Any] = {}
        for pattern in ("m.>", f"u.{machine}.>") if machine else (">",):
            found.update(await kv_entries(kv, pattern))
        for key, entry in found.items():
            try:
                value = orjson.loads(entry.value)
            except orjson.JSONDecodeError:
                continue  # not ours: ignore what another writer put there
            if not isinstance(value, dict):
                continue
            if key.startswith("m."):
                snap.machines[str(value.get("machine"))] = value
            elif key.startswith("u."):
                snap.units.append(value)
        return snap
    except StorydError:
        raise
    except Exception as exc:
        raise FleetUnavailable(describe(exc, fleet)) from None
    finally:
        await nc.close()


def read_snapshot(fleet: Fleet, machine: str | None = None) -> Snapshot:
    """Every machine's heartbeat and every unit's summary (of one machine), as stored now."""
    return asyncio.run(_snapshot(fleet, machine))


def _since_time(since: str | None) -> float | None:
    """`--since`: `all`, a duration (`30s`, `10m`, `2h`, `7d`) or an ISO time; None: new only."""
    if since is None:
        return None
    if since == "all":
        return 0.0
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if since[-1:] in units and since[:-1].replace(".", "", 1).isdigit():
        return time.time() - float(since[:-1]) * units[since[-1]]
    from datetime import datetime

    try:
        moment = datetime.fromisoformat(since.replace("Z", "+00:00"))
    except ValueError:
        from storyd.core.errors import UsageError

        raise UsageError(
            f"--since {since!r}: expected all, a duration (30s, 10m, 2h, 7d) or an ISO time"
        ) from None
    return moment.timestamp()


def _consumer_config(start: float | None) -> Any:
    from datetime import datetime

    from nats.js.api import ConsumerConfig, DeliverPolicy

    if start is None:
        return ConsumerConfig(deliver_policy=DeliverPolicy.NEW)
    if start == 0.0:
        return ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
    return ConsumerConfig(
        deliver_policy=DeliverPolicy.BY_START_TIME,
        opt_start_time=datetime.fromtimestamp(start, tz=UTC),
    )


async def _read_events(
    fleet: Fleet,
    subject: str,
    start: float | None,
    idle: float | None,
    emit: Callable[[dict[str, Any]], None],
) -> None:
    """Emit each stored (then each new) event once; return after `idle` s without one."""
    import nats.errors

    from storyd.fleet.connect import describe

    nc = await _connect(fleet)
    try:
        js = nc.jetstream(timeout=5.0)
        try:
            sub = await js.subscribe(subject, ordered_consumer=True, config=_consumer_config(start))
        except Exception as exc:
            raise FleetUnavailable(describe(exc, fleet)) from None
        seen: set[str] = set()
        while True:
            try:
                msg = await sub.next_msg(timeout=idle)
            except nats.errors.TimeoutError:
                return
            msg_id = (msg.headers or {}).get(names.MSG_ID, "")
            if msg_id in seen:
                continue
            if msg_id:
                if len(seen) > 1_000_000:
                    seen.clear()
                seen.add(msg_id)
            try:
                value = orjson.loads(msg.data)
            except orjson.JSONDecodeError:
                continue
            if isinstance(value, dict):
                value["id"] = msg_id
                emit(value)
    finally:
        await nc.close()


def follow_events(
    fleet: Fleet,
    since: str | None,
    *,
    machine: str | None = None,
    follow: bool = True,
    idle: float = 1.0,
) -> Iterator[dict[str, Any]]:
    """The stream's events (each once, by message id), oldest first; `follow`: forever."""
    start = _since_time(since)
    subject = names.event_subject(machine, ">") if machine else names.SUBJECTS
    if not follow:
        out: list[dict[str, Any]] = []
        asyncio.run(_read_events(fleet, subject, start, idle, out.append))
        yield from out
        return
    # following: print as they come (a queue between the loop's thread and the caller)
    import queue
    import threading

    q: queue.SimpleQueue[dict[str, Any] | BaseException | None] = queue.SimpleQueue()

    def thread() -> None:
        try:
            asyncio.run(_read_events(fleet, subject, start, None, q.put))
        except BaseException as exc:  # handed to the caller
            q.put(exc)
        q.put(None)

    threading.Thread(target=thread, name="storyd-fleet-events", daemon=True).start()
    while True:
        item = q.get()
        if item is None:
            return
        if isinstance(item, BaseException):
            raise item
        yield item
