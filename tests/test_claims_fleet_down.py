"""A fleet server that does not answer costs one connect timeout per retry interval,
not one per claim (the daemon's hook answer renews fleet leases on every tool call)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("nats", reason="the fleet extra is not installed: pip install '.[fleet]'")

from storyd.api.claims import Place
from storyd.config.fleet import Fleet
from storyd.fleet import claims_kv
from storyd.fleet.claims_kv import FleetOffline, KvClaims


@pytest.fixture
def silent() -> Iterator[str]:
    """A TCP port that accepts and never says a word (a server behind a dropped route)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield f"nats://127.0.0.1:{listener.getsockname()[1]}"


@pytest.mark.slow
def test_a_silent_server_is_not_asked_again_within_the_interval(silent: str) -> None:
    kv = KvClaims(Fleet(url=silent, machine="alpha"))
    place = Place("/w", "state.json", "u")
    try:
        began = time.monotonic()
        with pytest.raises(FleetOffline):
            kv.claim(place, "example.com/r", "alice", 60.0, last="")
        first = time.monotonic() - began
        began = time.monotonic()
        with pytest.raises(FleetOffline, match=f"tried again after {claims_kv.RETRY_AFTER:g} s"):
            kv.claim(place, "example.com/r", "alice", 60.0, last="")
        again = time.monotonic() - began
    finally:
        kv.close()
    assert first >= 0.9, first  # the connect timeout was paid once
    assert again < 0.5, again  # and not again within RETRY_AFTER
