"""Issue 29 item 5: a big state file is parsed with the collector held off, and the
heap a big parse freed is given back (daemon/server/quietgc.py).

CPython 3.11 collects from inside the allocation that crosses a threshold, so a full
collection could run in the middle of orjson's parse of a big file while every other
client waited for the interpreter lock; held off, no collection runs during the parse.
The collector's state is process-wide: it comes back as it was, after an error too,
and only when the last of overlapping holders is done.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_harness import wait_for
from epic_state_harness import epic_relpath, write_epic

from storyd.core import switches, target
from storyd.core.pipeline import Options
from storyd.server import fastjson
from storyd.server.assembly import build_daemon
from storyd.server.quietgc import QuietGC
from storyd.server.reads import Reads
from storyd.server.service import Settings

STORY = "story-0051-0001"
WHOLE = "storyStatuses"  # an epic parsed whole: the seed's `stories` is streamed (jsonstream)


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


def _parse(
    tmp_path: Path, big_bytes: int, collections: list[int], monkeypatch: pytest.MonkeyPatch
) -> tuple[QuietGC, list[int]]:
    """A real read of a 3,000-task epic through Reads, with the daemon's parser
    (orjson) behind a QuietGC of bound `big_bytes`: the QuietGC, and the collections
    that started during the parse itself."""
    tasks = {f"T{n}": {"status": "DONE" if n % 2 else "PENDING"} for n in range(3000)}
    write_epic(tmp_path, "0051", tasks={STORY: tasks}, member=WHOLE)
    assert os.path.getsize(tmp_path / epic_relpath("0051")) > 40_000
    during: list[int] = []

    def loads(data: bytes) -> object:
        before = len(collections)
        try:
            return fastjson.loads(data)
        finally:
            during.extend(collections[before:])

    quiet = QuietGC(big_bytes)
    monkeypatch.setattr(switches.CONFIG, "fast_parse", quiet.parsing(loads))
    ws = str(tmp_path)
    adapter = target.for_epic(ws, "0051", STORY).adapter
    reads = Reads(Options(staleness="mtime"), None, lambda _ws: True)
    got = reads.read(ws, epic_relpath("0051"), adapter)
    assert got.error is None and got.units is not None
    assert len(got.units[0].tasks) == 3000
    return quiet, during


def test_a_big_file_is_parsed_without_a_collection(
    tmp_path: Path, collections: list[int], enabled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    quiet, during = _parse(tmp_path, 40_000, collections, monkeypatch)
    assert during == []  # 3,000 tasks' containers, and not one collection
    assert quiet.held == 1
    assert gc.isenabled()


def test_the_parsed_tree_is_left_out_of_the_next_collection(enabled: None) -> None:
    """After a big parse no generation-0 pass walks the tree (9-12 ms at 10,000
    stories, inside a miss's answer): the last holder out freezes what is alive."""
    document = {f"s{n}": {"tasks": {f"T{t}": {"status": "DONE"} for t in range(5)}}
                for n in range(2000)}
    data = fastjson.orjson.dumps(document)
    quiet = QuietGC(big_bytes=1024)
    try:
        gc.collect()
        tree = quiet.parsing(fastjson.loads)(data)
        young = gc.get_count()[0]
        assert tree == document and quiet.freezes == 1 and gc.isenabled()
        assert young < 100  # 14,001 containers made, none of them young
        assert gc.get_freeze_count() >= 14_001
    finally:
        gc.unfreeze()


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12 collects in the eval loop")
def test_a_small_file_is_parsed_as_before(
    tmp_path: Path, collections: list[int], enabled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    quiet, during = _parse(tmp_path, 1 << 30, collections, monkeypatch)
    assert during  # the same parse, collected from inside as it allocates
    assert quiet.held == 0


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


def test_a_small_document_makes_no_trim_due(enabled: None) -> None:
    quiet = QuietGC(big_bytes=64)
    assert quiet.parsing(fastjson.loads)(b'{"a": 1}') == {"a": 1}
    assert quiet.held == 0 and quiet.trim() is False


def test_a_trim_is_due_after_a_big_parse_and_spaced(enabled: None) -> None:
    quiet = QuietGC(big_bytes=64)
    parse = quiet.parsing(fastjson.loads)
    big = b'{"x": "' + b"x" * 64 + b'"}'
    assert quiet.trim() is False
    assert parse(big) == {"x": "x" * 64} and quiet.held == 1
    assert quiet.trim() is True and quiet.trims == 1
    parse(big.replace(b"x", b"y"))  # other bytes: equal ones share the tree, unparsed
    assert quiet.trim() is False  # within a second of the last one: left due
    assert quiet.trim(force=True) is True  # the verification tick's
    assert quiet.trim(force=True) is False and quiet.trims == 2


def test_the_daemon_parses_a_big_file_held_and_trims_after(
    tmp_path: Path, enabled: None
) -> None:
    """A real daemon: its warm-up and its refresher parse a big state file with the
    collector held off, and the refresher gives the heap back after the rewrite."""
    workspace = tmp_path / "ws"
    tasks = {f"T{n}": {"status": "PENDING"} for n in range(2000)}
    write_epic(workspace, "0051", tasks={STORY: tasks}, member=WHOLE)
    daemon = build_daemon(Settings(staleness="mtime", verify_interval=3600.0))
    quiet = daemon.engine.reads.quiet
    quiet.big_bytes = 20_000  # the 2,000-task file is "big"
    daemon.start([str(workspace)])
    try:
        wait_for(lambda: daemon.warm.done, 10.0, "the warm-up")
        assert quiet.held >= 1 and gc.isenabled()
        held, trims = quiet.held, quiet.trims
        tasks["T0"] = {"status": "DONE"}
        write_epic(workspace, "0051", tasks={STORY: tasks}, member=WHOLE)
        wait_for(lambda: quiet.held > held, 10.0, "the rewrite's parse")
        wait_for(lambda: quiet.trims > trims, 10.0, "a trim after it")
        # a second event of the same rewrite may start another held parse meanwhile:
        # the collector is back once the reads settle, whatever their number
        wait_for(gc.isenabled, 10.0, "the collector enabled again")
    finally:
        daemon.stop()
