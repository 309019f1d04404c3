"""Issue 29 item 5: a big state file is read with the collector held off, and the heap
a big read freed is given back (daemon/server/quietgc.py).

CPython collects from inside the allocation that crosses a threshold, so a full
collection could run in the middle of a big parse while every other client waited for
the interpreter lock; held off, no collection runs during the read at all. The
collector's state is process-wide: it comes back as it was, after an error too, and
only when the last of overlapping holders is done.
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from epic_state_harness import epic_relpath, write_epic

from storyd.core import pipeline, target
from storyd.core.pipeline import FileRead, Options
from storyd.server.quietgc import QuietGC
from storyd.server.reads import Reads

STORY = "story-0051-0001"


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generation of each collection that starts on this thread."""
    me = threading.get_ident()
    seen: list[int] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and threading.get_ident() == me:
            seen.append(info["generation"])

    gc.callbacks.append(callback)
    yield seen
    gc.callbacks.remove(callback)


@pytest.fixture
def enabled() -> Iterator[None]:
    """The collector on for the test, and as it was afterwards."""
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def _read(
    tmp_path: Path, big_bytes: int, collections: list[int], monkeypatch: pytest.MonkeyPatch
) -> tuple[Reads, list[int]]:
    """A real read of a 3,000-task epic through Reads, its collector's bound `big_bytes`;
    the reads and the collections that started during the parse and build (the real
    pipeline.read_file, watched)."""
    during: list[int] = []
    real = pipeline.read_file

    def read_file(*args: object, **kwargs: object) -> FileRead:
        before = len(collections)
        try:
            return real(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            during.extend(collections[before:])

    monkeypatch.setattr(pipeline, "read_file", read_file)
    tasks = {f"T{n}": {"status": "DONE" if n % 2 else "PENDING"} for n in range(3000)}
    write_epic(tmp_path, "0051", tasks={STORY: tasks})
    ws = str(tmp_path)
    adapter = target.for_epic(ws, "0051", STORY).adapter
    reads = Reads(Options(staleness="mtime"), None, lambda _ws: True)
    reads.quiet.big_bytes = big_bytes
    got = reads.read(ws, epic_relpath("0051"), adapter)
    assert got.error is None and got.units is not None
    assert len(got.units[0].tasks) == 3000
    assert os.path.getsize(tmp_path / epic_relpath("0051")) > 40_000
    return reads, during


def test_a_big_file_is_read_without_a_collection(
    tmp_path: Path, collections: list[int], enabled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads, during = _read(tmp_path, 40_000, collections, monkeypatch)
    assert during == []  # 3,000 tasks' containers, and not one collection
    assert reads.quiet.held == 1
    assert gc.isenabled()


def test_a_small_file_is_read_as_before(
    tmp_path: Path, collections: list[int], enabled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads, during = _read(tmp_path, 1 << 30, collections, monkeypatch)
    assert during  # the same read, collected as it allocates
    assert reads.quiet.held == 0


def test_the_collector_comes_back_after_an_error(enabled: None) -> None:
    quiet = QuietGC()
    with pytest.raises(ZeroDivisionError), quiet.hold():
        assert not gc.isenabled()
        _ = 1 / 0
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off(enabled: None) -> None:
    gc.disable()
    with QuietGC().hold():
        pass
    assert not gc.isenabled()


def test_the_last_of_overlapping_holders_turns_it_back_on(enabled: None) -> None:
    quiet = QuietGC()
    first, second = quiet.hold(), quiet.hold()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert not gc.isenabled()  # the second read is still under way
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_holders_on_threads(enabled: None) -> None:
    quiet = QuietGC()
    inside = threading.Barrier(4)
    off: list[bool] = []

    def read() -> None:
        with quiet.hold():
            inside.wait(10)
            off.append(not gc.isenabled())
            inside.wait(10)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert off == [True] * 4
    assert gc.isenabled() and quiet.held == 4


def test_a_missing_file_is_not_big(tmp_path: Path, enabled: None) -> None:
    quiet = QuietGC(big_bytes=1)
    with quiet.hold(str(tmp_path / "absent.json")) as held:
        assert held is False and gc.isenabled()
    assert quiet.trim() is False  # nothing big was read: no trim due


def test_a_trim_is_due_after_a_big_read_and_spaced(tmp_path: Path, enabled: None) -> None:
    path = tmp_path / "big.json"
    path.write_bytes(b"x" * 64)
    quiet = QuietGC(big_bytes=64)
    assert quiet.trim() is False
    with quiet.hold(str(path)) as held:
        assert held is True
    assert quiet.trim() is True and quiet.trims == 1
    with quiet.hold(str(path)):
        pass
    assert quiet.trim() is False  # within a second of the last one: left due
    assert quiet.trim(force=True) is True  # the verification tick's
    assert quiet.trim(force=True) is False and quiet.trims == 2
