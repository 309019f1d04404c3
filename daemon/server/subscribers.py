"""The socket's event subscribers: who hears which events, and who is dropped.

The transport owns them (`Transport.subscribe`, `unsubscribe`): a `subscribe` op asks
for a `Subscription` and tells it which lines its replay already sent; the transport
sends each later event line to every subscription that wants it, on the event loop.
A subscriber that falls more than `limits.subscriber_buffer` bytes behind is dropped
and can resume with `since`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import orjson

from storyd.core.errors import StorydError

if TYPE_CHECKING:
    import asyncio

    from structlog.typing import FilteringBoundLogger

    from storyd.server.service import Settings

__all__ = ["Subscribers", "Subscription", "TooManySubscribers"]


class TooManySubscribers(StorydError):
    """`limits.max_subscribers` connections are subscribed already (try again later)."""

    code = 75
    name = "EX_TEMPFAIL"


class Subscription:
    """One connection's event stream: its workspace filter (None: every workspace) and
    the newest replayed generation, whose lines the replay already sent."""

    __slots__ = ("replayed_gen", "replayed_tail", "transport", "workspace")

    def __init__(self, transport: asyncio.Transport, workspace: str | None) -> None:
        self.transport = transport
        self.workspace = workspace
        self.replayed_gen = -1
        self.replayed_tail: frozenset[bytes] = frozenset()

    def replayed(self, lines: list[bytes]) -> None:
        """The replay sent these event lines: an event among them is not sent again."""
        if not lines:
            return
        last = orjson.loads(lines[-1])["generation"]
        self.replayed_gen = last
        self.replayed_tail = frozenset(
            line for line in lines if orjson.loads(line)["generation"] == last
        )

    def wants(self, event: Mapping[str, object], line: bytes) -> bool:
        """Whether this event goes to this subscriber (its workspace, not replayed)."""
        if self.workspace is not None and self.workspace != event["workspace"]:
            return False
        generation = event["generation"]
        return not (
            generation < self.replayed_gen  # type: ignore[operator]
            or (generation == self.replayed_gen and line in self.replayed_tail)
        )


class Subscribers:
    """The subscriptions of one transport, keyed by connection (any hashable owner)."""

    def __init__(self, settings: Settings, log: FilteringBoundLogger) -> None:
        self.settings = settings
        self.log = log
        self._by_owner: dict[object, Subscription] = {}
        self.dropped = 0  # dropped for not reading

    def __len__(self) -> int:
        return len(self._by_owner)

    def subscribe(
        self, owner: object, transport: asyncio.Transport, workspace: str | None
    ) -> Subscription:
        """A new subscription for `owner`, or TooManySubscribers at the cap."""
        cap = self.settings.limits.max_subscribers
        if len(self._by_owner) >= cap:
            msg = f"too many subscribers ({cap})"
            raise TooManySubscribers(msg)
        found = self._by_owner[owner] = Subscription(transport, workspace)
        return found

    def unsubscribe(self, owner: object) -> None:
        """`owner` hears no more events (its connection closed)."""
        self._by_owner.pop(owner, None)

    def broadcast(self, event: Mapping[str, object], line: bytes) -> None:
        """Send one event line to every subscription that wants it (on the loop thread)."""
        limit = self.settings.limits.subscriber_buffer
        for owner, sub in list(self._by_owner.items()):
            if not sub.wants(event, line):
                continue
            transport = sub.transport
            if transport.is_closing():
                continue
            if transport.get_write_buffer_size() > limit:
                self.dropped += 1
                self._by_owner.pop(owner, None)
                self.log.warning(
                    "subscriber_dropped",
                    reason="not reading",
                    buffered=transport.get_write_buffer_size(),
                )
                transport.abort()
                continue
            transport.write(line)
