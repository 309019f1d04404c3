"""Events from the refresher reach subscribers without waking the event loop per event.

A warm-up publishes one event per unit (10,000 at 10,000 stories) from the refresher's
thread. Each used to wake the loop (`call_soon_threadsafe`), and each wake-up took the
interpreter lock from the warm-up's build and gave it back: answers on the loop waited
behind them. Now the loop is woken once for every event that arrives before it runs, and
not at all while nobody subscribes (daemon/server/transport.py, `Transport.sink`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from daemon_harness import wait_for

from storyd.server.service import Settings
from storyd.server.transport import Transport


class _Written:
    """What a subscriber's connection was sent (the asyncio.Transport calls it gets)."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.lines.append(data)

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0


@pytest.fixture
def running() -> Iterator[tuple[Transport, list[int]]]:
    """A Transport on a real event loop running in a thread; the wake-ups counted."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="test-loop")
    thread.start()
    woken = [0]
    wake = loop.call_soon_threadsafe

    def counted(callback, *args):  # type: ignore[no-untyped-def]
        woken[0] += 1
        return wake(callback, *args)

    loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
    transport = Transport(Settings(staleness="mtime"), {}, lambda: b"0:0")
    transport.loop = loop
    try:
        yield transport, woken
    finally:
        wake(loop.stop)
        thread.join(5)
        loop.close()


def _event(n: int) -> tuple[dict[str, object], bytes]:
    return {"workspace": "/w", "generation": n}, b'{"generation":%d}\n' % n


def test_no_subscriber_no_wake_up(running: tuple[Transport, list[int]]) -> None:
    transport, woken = running
    for n in range(1, 101):
        transport.sink(*_event(n))
    assert woken[0] == 0


def test_events_waiting_share_one_wake_up_in_order(running: tuple[Transport,
                                                                  list[int]]) -> None:
    transport, woken = running
    written = _Written()
    transport.subscribers.subscribe("client", written, None)  # type: ignore[arg-type]
    loop = transport.loop
    assert loop is not None
    held, release = threading.Event(), threading.Event()

    def hold() -> None:  # the loop busy elsewhere while the events arrive
        held.set()
        release.wait(5)

    loop.call_soon_threadsafe(hold)
    held.wait(5)
    before = woken[0]
    for n in range(1, 101):
        transport.sink(*_event(n))
    release.set()
    wait_for(lambda: len(written.lines) == 100, 5.0, "the 100 events sent")
    assert woken[0] - before == 1
    assert written.lines == [_event(n)[1] for n in range(1, 101)]
    transport.sink(*_event(101))  # the loop ran: the next event wakes it again
    wait_for(lambda: len(written.lines) == 101, 5.0, "the next event sent")
    assert woken[0] - before == 2
