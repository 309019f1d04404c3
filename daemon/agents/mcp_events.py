"""`storyd mcp`'s events: what changed, told to every client whatever protocol it speaks.

    Announcer  sends `notifications/resources/list_changed` (and ResourceUpdated) on the
               SDK's subscription bus, which feeds 2026-07-28 `subscriptions/listen`
               streams, and to the handshake-era session (2024-11-05 to 2025-11-25:
               the MCP Inspector, the TypeScript SDK), which has no listen stream and
               hears it as a plain notification
    Follower   the daemon's `subscribe` stream on a thread, turned into announcements
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
from mcp.shared.subscriptions import ResourcesListChanged, ResourceUpdated
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from storyd.core.errors import StorydError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine

    from anyio.lowlevel import EventLoopToken
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
    from mcp.server.session import ServerSession
    from mcp.server.subscriptions import SubscriptionBus

    from storyd.agents.mcp_server import Setup

__all__ = ["Announcer", "Follower"]


class Announcer:
    """Tells the clients that the resource list changed, or a resource did.

    stdio serves one client, so one handshake-era session is kept: the last that sent
    a request or `notifications/initialized` (its connection's standalone channel). A
    2026-07-28 client is told only on the bus: the protocol forbids the same
    notification outside a listen stream.
    """

    def __init__(self, bus: SubscriptionBus) -> None:
        self.bus = bus
        self._session: ServerSession | None = None
        self._token: EventLoopToken | None = None

    def start(self) -> None:
        """Bind to the running event loop; call from it (the server's lifespan)."""
        from anyio.lowlevel import current_token

        self._token = current_token()

    async def remember(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
                       ) -> HandlerResult:  # fmt: skip
        """The server's middleware: note a handshake-era session once it is initialized."""
        legacy = ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS
        if legacy and ctx.method != "initialize":
            self._session = ctx.session
        return await call_next(ctx)

    async def list_changed(self) -> None:
        """`notifications/resources/list_changed` to every client."""
        await self.bus.publish(ResourcesListChanged())
        await self._tell(lambda session: session.send_resource_list_changed())

    async def updated(self, uri: str) -> None:
        """ResourceUpdated for `uri` to the listen streams that asked for it (a
        handshake-era client would have to subscribe, which this server does not offer)."""
        await self.bus.publish(ResourceUpdated(uri=uri))

    async def _tell(self, send: Callable[[ServerSession], Awaitable[None]]) -> None:
        session = self._session
        if session is None:
            return
        try:
            await send(session)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            self._session = None  # the client has gone

    def from_thread(self, announce: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run `announce` on the server's event loop, from another thread (a tool's
        worker thread, the follower's); nothing before `start` or after the loop ends."""
        if self._token is None:
            return
        try:
            anyio.from_thread.run(announce, token=self._token)
        except RuntimeError:
            return  # the event loop has ended


class Follower:
    """Follows the daemon's events: ResourceUpdated for the in-flight resource on each
    one, and a list change when the units in flight (one resource each) changed."""

    def __init__(self, setup: Setup, announcer: Announcer) -> None:
        self.setup = setup
        self.announcer = announcer
        self._client: Any = None
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._on_change: Callable[[], bool] | None = None
        self._uri = ""

    def start(self, uri: str, on_change: Callable[[], bool] | None = None) -> None:
        """Follow on a thread; call after the announcer's `start`. `on_change` re-lists
        the unit resources; True: the list changed and is announced."""
        self._on_change = on_change
        self._uri = uri
        self._thread = threading.Thread(target=self._run, name="storyd-mcp-events", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from storyd.api.client import Client, DaemonUnavailable

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
                        self.announcer.from_thread(lambda: self.announcer.updated(self._uri))
                        if self._on_change is not None and self._on_change():
                            self.announcer.from_thread(self.announcer.list_changed)
        except (DaemonUnavailable, OSError, RuntimeError, ValueError):
            return  # no daemon: no events; resources are still read fresh on each read
        except Exception:  # a follower never prints a traceback into the agent's MCP log;
            return  # resources are still read fresh on each read

    def stop(self) -> None:
        """Stop following (the thread ends at its next event, or with the process)."""
        self._stopped.set()
        client = self._client
        if client is not None:
            client.close()
