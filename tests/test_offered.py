"""A background read's big parse is offered to misses reading equal bytes, only while
that read lasts (daemon/server/offered.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import orjson
import pytest

from storyd.server import offered
from storyd.server.offered import Offers

DOC = orjson.dumps({"stories": {f"s-{n}": {"status": "DONE"} for n in range(100)}})


def _counted() -> tuple[list[bytes], object]:
    parsed: list[bytes] = []

    def parse(data: bytes) -> object:
        parsed.append(data)
        return orjson.loads(data)

    return parsed, parse


def test_a_miss_takes_the_tree_of_equal_bytes_while_the_read_lasts() -> None:
    offers = Offers()
    parsed, parse = _counted()
    inside, leave = threading.Event(), threading.Event()
    trees: list[object] = []

    def background() -> None:
        with offers.offering():
            trees.append(offers.parse(DOC, parse))
            inside.set()
            assert leave.wait(5)  # the read builds its units: the offer stands

    thread = threading.Thread(target=background)
    thread.start()
    assert inside.wait(5)
    with offers.taking():
        taken = offers.parse(bytes(DOC), parse)  # equal bytes, another object
        other = offers.parse(DOC.replace(b"DONE", b"TODO"), parse)  # not equal: parsed
    leave.set()
    thread.join(5)
    assert taken is trees[0] and offers.taken == 1
    assert other != taken and len(parsed) == 2
    with offers.taking():  # the read is over: nothing is offered any more
        assert offers.parse(DOC, parse) is not trees[0]
    assert offers.taken == 1 and len(parsed) == 3


def test_a_thread_neither_offering_nor_taking_parses_on_its_own() -> None:
    offers = Offers()
    parsed, parse = _counted()
    with offers.offering():
        first = offers.parse(DOC, parse)
        assert offers.parse(DOC, parse) is not first  # an offering thread never takes
    assert len(parsed) == 2 and offers.taken == 0


def test_no_tree_outlives_the_read_that_offered_it() -> None:
    """The offering thread keeps nothing once its read is over (a tree kept until the
    next read grew a 2.8 MB file's rereads' RSS by 16 MB: test_memory_bigread)."""
    import gc
    import weakref

    class Tree:
        pass

    offers = Offers()
    with offers.offering():
        tree = offers.parse(DOC, lambda _data: Tree())
    gone = weakref.ref(tree)
    del tree
    gc.collect()
    assert gone() is None


def test_a_miss_before_any_whole_read_keeps_its_tree_for_the_misses_and_the_read() -> None:
    """At start-up the warm-up gives way to the first misses, and each parsed the whole
    file again (90-150 ms at 10,000 stories); now the first miss's tree serves the next
    ones, and the background read of equal bytes takes it over in place of a parse."""
    offers = Offers()
    parsed, parse = _counted()
    with offers.taking(keep=True):
        first = offers.parse(DOC, parse)
    with offers.taking(keep=True):
        assert offers.parse(bytes(DOC), parse) is first  # equal bytes: no parse
    with offers.taking():
        assert offers.parse(bytes(DOC), parse) is first
    with offers.offering():
        assert offers.parse(bytes(DOC), parse) is first  # the read takes it over
    assert len(parsed) == 1 and offers.taken == 2
    with offers.taking():  # the read owned it and is over: nothing is kept any more
        assert offers.parse(DOC, parse) is not first
    assert len(parsed) == 2


def test_a_kept_tree_serves_equal_bytes_only_and_goes_when_old(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    offers = Offers()
    parsed, parse = _counted()
    other = DOC.replace(b"DONE", b"TODO")
    with offers.taking(keep=True):
        first = offers.parse(DOC, parse)
        changed = offers.parse(other, parse)  # other bytes: parsed, and kept instead
        assert changed != first
        assert offers.parse(DOC, parse) is not first  # the first is no longer kept
    assert len(parsed) == 3
    with offers.taking():
        kept = offers.parse(DOC, parse)
    assert len(parsed) == 3  # the last one made is kept
    clock = [0.0]
    monkeypatch.setattr(offered.time, "monotonic", lambda: clock[0] + 1e6)
    offers.expire()  # KEEP seconds later: gone, whoever asks next
    with offers.taking():
        assert offers.parse(DOC, parse) is not kept
    assert len(parsed) == 4


def test_a_thread_that_does_not_keep_leaves_nothing_kept() -> None:
    offers = Offers()
    parsed, parse = _counted()
    with offers.taking():
        first = offers.parse(DOC, parse)
    with offers.taking():
        assert offers.parse(DOC, parse) is not first
    assert offers.parse(DOC, parse) is not first  # no role: parses on its own
    assert len(parsed) == 3 and offers.taken == 0


def test_reads_keep_a_misss_tree_only_before_the_files_first_whole_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from epic_state_harness import EPIC, STATE, story_id, task_id, write_epic

    from storyd.core import switches
    from storyd.core.formats import epic
    from storyd.core.pipeline import Options
    from storyd.server import fastjson
    from storyd.server.reads import Reads

    write_epic(tmp_path, EPIC, tasks={story_id(n): {task_id(story_id(n), 1): {
        "status": "PENDING"}} for n in range(1, 61)},
        member="storyStatuses")  # parsed whole: the seed's `stories` is streamed
    reads = Reads(Options(staleness="mtime"), None, lambda _ws: True)
    reads.quiet.big_bytes = 2048  # this file's parse is a big one
    assert (tmp_path / STATE).stat().st_size > reads.quiet.big_bytes
    parsed: list[bytes] = []

    def loads(data: bytes) -> object:
        parsed.append(data)
        return fastjson.loads(data)

    monkeypatch.setattr(switches.CONFIG, "fast_parse", reads.quiet.parsing(loads))
    ws = str(tmp_path)
    for n in (1, 2, 3):  # misses before any whole read: one parse between them
        got = reads.read_one(ws, STATE, epic.ADAPTER, story_id(n))
        assert got.units is not None and got.units[0].key == story_id(n)
    assert len(parsed) == 1
    whole = reads.read(ws, STATE, epic.ADAPTER)  # takes the kept tree over
    assert whole.units is not None and len(whole.units) == 60 and len(parsed) == 1
    for n in (4, 5):  # after it, a miss keeps nothing (without a change queue each parses)
        reads.read_one(ws, STATE, epic.ADAPTER, story_id(n))
    assert len(parsed) == 3
