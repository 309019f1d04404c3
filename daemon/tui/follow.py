"""The live view's ear: subscribe to the daemon's events on a thread, call back on each,
and reconnect when the daemon goes away (no polling: one blocking read)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from storyd.api.client import Client, DaemonUnavailable

__all__ = ["Follower"]

_RETRY = (0.1, 0.2, 0.5, 1.0, 2.0)  # seconds between reconnection attempts, then 2 s


class Follower:
    """Calls `on_event(event)` for each event and `on_state(text)` when the link
    changes (`live`, `daemon gone: reconnecting`, `no daemon: …`). `stop()` ends it."""

    def __init__(
        self,
        socket: str | None,
        workspace: str | None,
        on_event: Callable[[dict[str, object]], None],
        on_state: Callable[[str], None],
    ) -> None:
        self.socket = socket
        self.fields: dict[str, object] = {"workspace": workspace} if workspace else {}
        self.on_event = on_event
        self.on_state = on_state
        self._stop = threading.Event()
        self._client: Client | None = None
        self._thread = threading.Thread(target=self._run, name="storyd-top-follow", daemon=True)

    def start(self) -> None:
        """Start following."""
        self._thread.start()

    def stop(self) -> None:
        """Stop following: close the connection, which ends the blocking read."""
        self._stop.set()
        client = self._client
        if client is not None:
            client.close()

    def _once(self) -> bool:
        """Follow one connection to its end; False when none could be made."""
        try:
            client = Client(self.socket, timeout=2.0)
            self._client = client
            stream = client.subscribe(**self.fields)
            first = next(stream)
        except (DaemonUnavailable, OSError, StopIteration):
            return False
        if not first.get("ok"):
            self.on_state(f"the daemon refused: {first.get('message') or first.get('error')}")
            return False
        if first.get("clock"):
            self.fields["since"] = first["clock"]
        self.on_state("live")
        self.on_event(first)  # a (re)subscription: the units may have moved meanwhile
        try:
            for event in stream:
                if self._stop.is_set():
                    break
                if event.get("clock"):
                    self.fields["since"] = event["clock"]
                self.on_event(event)
        except (OSError, ValueError):
            pass  # a daemon that went away, or a line cut short: as a closed stream
        finally:
            client.close()
        return True

    def _run(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            if self._once():
                attempt = 0
                if not self._stop.is_set():
                    self.on_state("daemon gone: reconnecting")
            else:
                if attempt == 0:
                    self.on_state("no daemon: not live (storyd serve); retrying")
                attempt += 1
            self._stop.wait(_RETRY[min(attempt, len(_RETRY) - 1)])
