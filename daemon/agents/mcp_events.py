"""`storyd mcp`'s event follower: the daemon's `subscribe` stream, turned into the SDK's
`ResourceUpdated` events for `subscriptions/listen` clients (docs/agents.md)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from storyd.core.errors import StorydError

if TYPE_CHECKING:
    from collections.abc import Callable

    from mcp.server.mcpserver import MCPServer

    from storyd.agents.mcp_server import Setup

__all__ = ["Follower"]


class Follower:
    """Follows the daemon's events and publishes `ResourceUpdated` for the in-flight
    resource, so `subscriptions/listen` clients learn when to read it again, and
    `ResourcesListChanged` when the units in flight (one resource each) changed."""

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self._client: Any = None
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._on_change: Callable[[], bool] | None = None

    def start(self, server: MCPServer[Any], uri: str,
              on_change: Callable[[], bool] | None = None) -> None:  # fmt: skip
        """Follow on a thread; call from the server's event loop (its lifespan).
        `on_change` re-lists the unit resources; True: ResourcesListChanged is sent."""
        self._on_change = on_change
        from anyio.lowlevel import current_token

        self._token = current_token()
        self._server = server
        self._uri = uri
        self._thread = threading.Thread(target=self._run, name="storyd-mcp-events", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import anyio.from_thread
        from mcp.shared.subscriptions import ResourcesListChanged, ResourceUpdated

        from storyd.api.client import Client, DaemonUnavailable

        bus = self._server._subscriptions  # the SDK's bus: MCPServer(subscriptions=...) default
        try:
            workspace = self.setup.workspace(None)
        except StorydError:
            return  # no default workspace to follow (or no configuration to find it)
        try:
            with Client(self.setup.socket, timeout=1.0) as client:
                self._client = client
                for event in client.subscribe(workspace=workspace):
                    if self._stopped.is_set():
                        return
                    if event.get("event") in ("changed", "drift", "resolved", "removed"):
                        anyio.from_thread.run(
                            bus.publish, ResourceUpdated(uri=self._uri), token=self._token
                        )
                        if self._on_change is not None and self._on_change():
                            anyio.from_thread.run(
                                bus.publish, ResourcesListChanged(), token=self._token
                            )
        except (DaemonUnavailable, OSError, RuntimeError, ValueError):
            return  # no daemon: no events; resources are still read fresh on each read

    def stop(self) -> None:
        """Stop following (the thread ends at its next event, or with the process)."""
        self._stopped.set()
        client = self._client
        if client is not None:
            client.close()
