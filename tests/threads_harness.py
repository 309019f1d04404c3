"""Threads a test leaves behind: found, and failed on.

    leaked_threads()   threads started since a snapshot that are still alive after a grace
    no_leaked_threads  autouse pytest fixture: fail a test that leaves a thread running

Registered as a plugin by tests/conftest.py, so the guard wraps every test.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

__all__ = ["leaked_threads"]


def leaked_threads(before: set[threading.Thread], grace: float = 2.0) -> list[str]:
    """Threads started since `before` that are still alive after `grace` seconds.

    Daemon threads count too: storyd's refresher, detector worker and watchdog's observer
    and emitters are daemon threads (only the read pool's, from concurrent.futures, are
    not), so skipping them would check almost nothing.
    """
    deadline = time.monotonic() + grace
    leaked = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    for thread in leaked:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    return [t.name for t in leaked if t.is_alive()]


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    """Fail a test that leaves a thread of its own running (watchdog's style)."""
    before = set(threading.enumerate())
    yield
    still = leaked_threads(before)
    assert not still, f"test leaked threads: {still}"
