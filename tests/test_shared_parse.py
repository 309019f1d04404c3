"""Issue 43: one parse of the same bytes, shared (daemon/server/quietgc.py).

After a write the refresher reads the file whole while the query that follows misses
and parses it too; during a warm-up every miss parsed the file beside the warm-up's
read. A big document's parse is now shared by its bytes: equal bytes wait for the
parse under way (or take a finished one's tree), other bytes are parsed on their own,
so what a reader gets is always what its own bytes parse to (read your writes).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from epic_state_harness import epic_relpath, write_epic

from storyd.core import switches, target
from storyd.core.model import Unit
from storyd.core.pipeline import Options
from storyd.server import fastjson
from storyd.server.quietgc import QuietGC
from storyd.server.reads import Reads

STORY = "story-0051-0001"
TIMEOUT = 10.0


class Gated:
    """A parser that counts its parses and, while `gate` is closed, holds each one
    until the gate opens (`entered` tells a parse is under way)."""

    def __init__(self) -> None:
        self.calls: list[bytes] = []
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.fail = 0  # parses to fail, from the next

    def __call__(self, data: bytes) -> object:
        self.calls.append(data)
        self.entered.set()
        assert self.gate.wait(TIMEOUT)
        if self.fail:
            self.fail -= 1
            raise RuntimeError("parser failed")
        return fastjson.loads(data)


def _in_thread(func: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    out: list[object] = []

    def run() -> None:
        try:
            out.append(func())
        except Exception as exc:  # handed to the test
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out



def test_equal_bytes_side_by_side_are_parsed_once() -> None:
    quiet, gated = QuietGC(16), Gated()
    parse = quiet.parsing(fastjson.loads, gated)
    data = b'{"stories": {"a": {"tasks": {"T1": {"status": "DONE"}}}}}'
    first, got1 = _in_thread(lambda: parse(data))
    assert gated.entered.wait(TIMEOUT)
    second, got2 = _in_thread(lambda: parse(bytes(bytearray(data))))  # equal, not the same
    gated.gate.set()
    first.join(TIMEOUT)
    second.join(TIMEOUT)
    assert len(gated.calls) == 1
    assert got1 == got2 == [fastjson.loads(data)]
    assert quiet.shared == 1


def test_other_bytes_are_never_answered_by_an_older_parse() -> None:
    """A write between two reads: the second reader's bytes differ, so it parses them
    itself, even while the older parse is under way, and gets the new content."""
    quiet, gated = QuietGC(16), Gated()
    parse = quiet.parsing(fastjson.loads, gated)
    old = b'{"stories": {"a": {"status": "PENDING"}}}'
    new = b'{"stories": {"a": {"status": "DONE"}}}   '
    first, got1 = _in_thread(lambda: parse(old))
    assert gated.entered.wait(TIMEOUT)
    gated.gate.set()
    assert parse(new) == {"stories": {"a": {"status": "DONE"}}}
    first.join(TIMEOUT)
    assert got1 == [{"stories": {"a": {"status": "PENDING"}}}]
    assert len(gated.calls) == 2 and quiet.shared == 0


def test_a_finished_tree_answers_equal_bytes_until_forgotten() -> None:
    quiet, gated = QuietGC(16), Gated()
    gated.gate.set()
    parse = quiet.parsing(fastjson.loads, gated)
    data = b'{"stories": {"a": {"status": "DONE"}}}'
    tree = parse(data)
    assert parse(bytes(bytearray(data))) is tree  # lingering: not parsed again
    assert len(gated.calls) == 1
    quiet.forget_parses()
    assert parse(data) == tree and len(gated.calls) == 2  # forgotten: parsed again


def test_a_failed_parse_is_not_shared() -> None:
    quiet, gated = QuietGC(16), Gated()
    parse = quiet.parsing(fastjson.loads, gated)
    data = b'{"stories": {"a": {}}}'
    gated.fail = 1
    first, got1 = _in_thread(lambda: parse(data))
    assert gated.entered.wait(TIMEOUT)
    second, got2 = _in_thread(lambda: parse(data))
    gated.gate.set()
    first.join(TIMEOUT)
    second.join(TIMEOUT)
    assert isinstance(got1[0], RuntimeError)
    assert got2 == [{"stories": {"a": {}}}]  # parsed on its own (or after: not shared)
    assert quiet.shared == 0


@pytest.fixture
def epic(tmp_path: Path) -> tuple[str, str]:
    tasks = {f"T{n}": {"status": "DONE" if n % 2 else "PENDING"} for n in range(300)}
    write_epic(tmp_path, "0051", tasks={STORY: tasks})
    return str(tmp_path), epic_relpath("0051")


def test_a_miss_shares_the_whole_read_under_way_and_builds_only_its_unit(
    epic: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refresher's whole read and a miss's one-unit read of the same bytes, side by
    side: one parse, and the miss's unit is the file's."""
    ws, relpath = epic
    quiet, gated = QuietGC(1000), Gated()
    monkeypatch.setattr(switches.CONFIG, "fast_parse", quiet.parsing(fastjson.loads, gated))
    adapter = target.for_epic(ws, "0051", STORY).adapter
    reads = Reads(Options(staleness="mtime"), None, lambda _ws: True)
    whole, got_whole = _in_thread(lambda: reads.read(ws, relpath, adapter))
    assert gated.entered.wait(TIMEOUT)
    one, got_one = _in_thread(lambda: reads.read_one(ws, relpath, adapter, STORY))
    gated.gate.set()
    whole.join(TIMEOUT)
    one.join(TIMEOUT)
    assert len(gated.calls) == 1 and quiet.shared == 1
    (w,), (o,) = got_whole, got_one
    assert w.units is not None and o.units is not None  # type: ignore[attr-defined]
    assert [u.key for u in o.units] == [STORY]  # type: ignore[attr-defined]
    def seen(units: list[Unit]) -> list[tuple[str, str]]:
        return [(t.id, t.status) for t in units[0].tasks]

    assert seen(o.units) == seen(w.units)  # type: ignore[attr-defined]


def test_a_miss_after_a_write_reads_the_write_not_the_parse_under_way(
    epic: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole read began before a write; a miss after the write never answers from
    its parse: its bytes are the new ones, parsed on their own."""
    ws, relpath = epic
    quiet, gated = QuietGC(1000), Gated()
    monkeypatch.setattr(switches.CONFIG, "fast_parse", quiet.parsing(fastjson.loads, gated))
    adapter = target.for_epic(ws, "0051", STORY).adapter
    reads = Reads(Options(staleness="mtime"), None, lambda _ws: True)
    whole, _ = _in_thread(lambda: reads.read(ws, relpath, adapter))
    assert gated.entered.wait(TIMEOUT)
    done = {f"T{n}": {"status": "DONE"} for n in range(300)}
    write_epic(Path(ws), "0051", tasks={STORY: done})  # the write, after the read began
    assert os.path.getsize(os.path.join(ws, relpath)) > 1000
    one, got_one = _in_thread(lambda: reads.read_one(ws, relpath, adapter, STORY))
    gated.gate.set()
    whole.join(TIMEOUT)
    one.join(TIMEOUT)
    (o,) = got_one
    assert o.units is not None  # type: ignore[attr-defined]
    assert {t.status for t in o.units[0].tasks} == {"DONE"}  # type: ignore[attr-defined]
    assert len(gated.calls) == 2 and quiet.shared == 0
