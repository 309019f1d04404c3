"""What `storyd fleet status|events` read from the server (no daemon needed).

Imports `nats` (the optional extra); the commands import this module only when run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from daemon.errors import StorydError
from daemon.fleet import names
from daemon.fleet.config import Fleet

__all__ = ["FleetUnavailable", "Snapshot", "follow_events", "read_snapshot"]


class FleetUnavailable(StorydError):
    """The server cannot be reached or read (exit 69, EX_UNAVAILABLE)."""

    code = 69


class Snapshot:
    """The bucket's content: heartbeats by machine, and every unit summary."""

    def __init__(self) -> None:
        self.machines: dict[str, dict[str, Any]] = {}
        self.units: list[dict[str, Any]] = []


async def _connect(fleet: Fleet) -> Any:
    import nats

    from daemon.fleet.connect import describe, options

    errors: list[Exception] = []

    async def error(exc: Exception) -> None:  # instead of nats-py's traceback on stderr
        errors.append(exc)

    try:
        return await nats.connect(**options(fleet, reconnect=False), error_cb=error)
    except Exception as exc:
        raise FleetUnavailable(describe(errors[-1] if errors else exc, fleet)) from None


async def _snapshot(fleet: Fleet, machine: str | None) -> Snapshot:
    import nats.js.errors

    from daemon.fleet.connect import describe

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
        for pattern in ("m.>", f"u.{machine}.>") if machine else (">",):
            watcher = await kv.watch(pattern, ignore_deletes=True)
            try:
                async for entry in watcher:
                    if entry is None:
                        break
                    try:
                        value = orjson.loads(entry.value)
                    except orjson.JSONDecodeError:
                        continue  # not ours: ignore what another writer put there
                    if not isinstance(value, dict):
                        continue
                    if entry.key.startswith("m."):
                        snap.machines[str(value.get("machine"))] = value
                    elif entry.key.startswith("u."):
                        snap.units.append(value)
            finally:
                await watcher.stop()
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
        from daemon.errors import UsageError

        raise UsageError(
            f"--since {since!r}: expected all, a duration (30s, 10m, 2h, 7d) or an ISO time"
        ) from None
    return moment.timestamp()


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
    out: list[dict[str, Any]] = []

    async def run(emit: Callable[[dict[str, Any]], None]) -> None:
        from datetime import datetime, timezone

        import nats.errors
        from nats.js.api import ConsumerConfig, DeliverPolicy

        from daemon.fleet.connect import describe

        nc = await _connect(fleet)
        try:
            js = nc.jetstream(timeout=5.0)
            subject = names.event_subject(machine, ">") if machine else names.SUBJECTS
            if start is None:
                config = ConsumerConfig(deliver_policy=DeliverPolicy.NEW)
            elif start == 0.0:
                config = ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
            else:
                config = ConsumerConfig(
                    deliver_policy=DeliverPolicy.BY_START_TIME,
                    opt_start_time=datetime.fromtimestamp(start, tz=timezone.utc),
                )
            try:
                sub = await js.subscribe(subject, ordered_consumer=True, config=config)
            except Exception as exc:
                raise FleetUnavailable(describe(exc, fleet)) from None
            seen: set[str] = set()
            while True:
                try:
                    msg = await sub.next_msg(timeout=None if follow else idle)
                except nats.errors.TimeoutError:
                    return
                msg_id = (msg.headers or {}).get(names.MSG_ID, "")
                if msg_id and msg_id in seen:
                    continue
                if msg_id:
                    seen.add(msg_id)
                    if len(seen) > 1_000_000:
                        seen.clear()
                try:
                    value = orjson.loads(msg.data)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(value, dict):
                    value["id"] = msg_id
                    emit(value)
        finally:
            await nc.close()

    if not follow:
        asyncio.run(run(out.append))
        yield from out
        return
    # following: print as they come (a queue between the loop's thread and the caller)
    import queue
    import threading

    q: queue.SimpleQueue[dict[str, Any] | BaseException | None] = queue.SimpleQueue()

    def thread() -> None:
        try:
            asyncio.run(run(q.put))
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
