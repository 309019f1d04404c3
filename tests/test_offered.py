"""A background read's big parse is offered to misses reading equal bytes, only while
that read lasts (daemon/server/offered.py)."""

from __future__ import annotations

import threading

import orjson

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
