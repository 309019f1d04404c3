"""Issue 29 item 5: at most one read of a file in flight; queries wait for the newest.

Queries that miss the cache while a read of the same file is under way (here: held up
by a real writer's `flock -x`) wait for that read instead of starting their own. They
are answered from it when the change queue proves nothing it read changed since it
began; otherwise (a write landed, or a file it probed is in a folder that cannot be
watched) by one more read, begun after all of them arrived and shared by all of them:
never one read each.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_harness import wait_for
from epic_state_harness import epic_relpath, write_epic

from storyd.core import pipeline, target
from storyd.core.pipeline import FileRead, Options
from storyd.server.changes import Changes
from storyd.server.reads import Reads

WAITERS = 6


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """When each real read of a state file began (pipeline.read_file, still called)."""
    began: list[float] = []
    real = pipeline.read_file

    def read_file(*args: object, **kwargs: object) -> FileRead:
        began.append(time.monotonic())
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pipeline, "read_file", read_file)
    return began


@pytest.fixture
def changes() -> Iterator[Changes]:
    queue = Changes()
    yield queue
    queue.close()


def _held(path: Path, flags: int) -> int:
    """A writer's `flock -x` on the file (its own open file description; read-only when
    it will not write: closing a descriptor open for writing is a change to inotify)."""
    fd = os.open(path, flags)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


@pytest.mark.slow
@pytest.mark.parametrize("written", [False, True])
def test_queries_wait_for_the_read_in_flight(
    tmp_path: Path, counted: list[float], changes: Changes, written: bool
) -> None:
    ws = str(tmp_path)
    write_epic(tmp_path, "0049", tasks={"story-0049-0001": {"T1": {"status": "PENDING"}}})
    relpath = epic_relpath("0049")
    adapter = target.for_epic(ws, "0049", "story-0049-0001").adapter
    reads = Reads(Options(lock_timeout=10.0, staleness="mtime"), changes, lambda _ws: True)
    results: list[FileRead] = []
    lock = threading.Lock()

    def query() -> None:
        got = reads.read(ws, relpath, adapter, since=time.monotonic_ns())
        with lock:
            results.append(got)

    reads.read(ws, relpath, adapter)  # an earlier read: the folders it reads are watched
    # and a change since (its time): the first query cannot share that read, it reads
    os.utime(tmp_path / relpath, ns=(1_000_000_000, 1_000_000_000))
    counted.clear()
    writer = _held(tmp_path / relpath, os.O_RDWR if written else os.O_RDONLY)
    try:
        first = threading.Thread(target=query)
        first.start()
        wait_for(lambda: len(counted) == 1, 5.0, "the first read to start (and block)")
        waiters = [threading.Thread(target=query) for _ in range(WAITERS)]
        for thread in waiters:
            thread.start()
        time.sleep(0.05)  # the waiters are queued behind the read in flight
        assert len(counted) == 1, "a second read started while one was in flight"
        if written:  # the writer's update, in place under its lock, before it lets go
            data = (tmp_path / relpath).read_bytes().replace(b"PENDING", b"DONE\x20\x20\x20")
            os.pwrite(writer, data, 0)
    finally:
        os.close(writer)
    first.join(10)
    for thread in waiters:
        thread.join(10)
    assert len(results) == 1 + WAITERS
    # the read in flight, and at most one more, begun after every waiter arrived (the
    # read in flight may predate a write a waiter made before asking): never one each
    assert len(counted) <= 2, counted
    newest = results[-1]
    assert all(r is newest for r in results[1:]), "the waiters got different reads"
    assert newest.units is not None
    status = newest.units[0].tasks[0].status
    assert status == "DONE" if written else status == "PENDING"
