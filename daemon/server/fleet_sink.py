"""The daemon's side of the fleet (daemon/fleet): a sink on the engine's events feeding
the publisher, and its section of `stats`.

`start(engine, cfg)` is the one call assembly.assemble makes (nothing when [fleet] is
not configured, so `nats` is never imported then). The sink runs on the engine's threads
and only appends to the publisher's inbox. A workspace's first look goes to the KV
bucket (its summaries) but not to the stream: what a start finds already there is
state, not news (as daemon/server/notify.py treats it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from storyd.core import log

if TYPE_CHECKING:
    from storyd.config import Config
    from storyd.fleet.publisher import Publisher
    from storyd.server.engine import Engine

__all__ = ["FleetSink", "start"]


class FleetSink:
    """Called with every engine event (and reconcile's)."""

    def __init__(self, publisher: Publisher, in_first_look: Callable[[str], bool]) -> None:
        self.publisher = publisher
        self.in_first_look = in_first_look

    def __call__(self, event: Mapping[str, object], line: bytes) -> None:
        workspace = str(event.get("workspace"))
        self.publisher.offer(event, stream=not self.in_first_look(workspace))

    def state(self) -> dict[str, object]:
        """The publisher's state, for `stats` and `doctor`."""
        return self.publisher.state()

    def close(self) -> None:
        """Stop publishing (what is queued gets a short chance to go out)."""
        self.publisher.close()


def start(engine: Engine, cfg: Config) -> FleetSink | None:
    """Start publishing when [fleet] is configured; None when it is not (or cannot be).
    The caller attaches the sink to the engine's events."""
    fleet = cfg.fleet
    if fleet is None:
        return None
    logger = log.get("fleet")
    try:
        import nats  # noqa: F401  (the optional extra)
    except ImportError:
        logger.error(
            "fleet_unavailable",
            error="nats-py is not installed: pip install 'storyd[fleet]'; not publishing",
        )
        return None
    from storyd import __version__
    from storyd.fleet.publisher import Publisher

    publisher = Publisher(
        fleet,
        instance=engine.log.instance,
        current=lambda: engine.summaries(detail=True),
        spaces=lambda: list(engine.workspaces),  # their Claude Code task lists (issue 44)
        log=logger,
        version=__version__,
    )
    sink = FleetSink(publisher, engine.in_first_look)
    publisher.start()
    return sink
