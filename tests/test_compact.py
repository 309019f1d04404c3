"""A big read's units keep fresh copies of their strings, made while its tree lived, so
that the freed tree's arenas go back whole (daemon/server/compact.py)."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
from epic_state_harness import EPIC, STATE, story_id, task_id, write_epic

from storyd.api import answers
from storyd.core import switches
from storyd.core.formats import epic
from storyd.core.model import Task, Unit
from storyd.server import fastjson
from storyd.server.compact import compact
from storyd.server.engine import Engine
from storyd.server.reads import Reuser

WHOLE = "storyStatuses"  # parsed whole, as compact.py expects; `stories` is streamed
STORIES = 60


def _stories(changed: int | None = None) -> dict[str, object]:
    """Sixty stories of two tasks, the first done with a sha and a time; `changed`: that
    story's second task done too."""
    stories: dict[str, object] = {}
    for n in range(1, STORIES + 1):
        sid = story_id(n)
        second = ({"status": "DONE", "commitSha": "f" * 40} if n == changed
                  else {"status": "PENDING"})
        stories[sid] = {"status": "IN_PROGRESS", "tasks": {
            task_id(sid, 1): {"status": "DONE", "commitSha": f"{n:040x}",
                              "completedAt": f"2026-01-01T00:{n % 60:02d}:00Z"},
            task_id(sid, 2): second}}
    return stories


def _strings(units: list[Unit]) -> list[object]:
    return [(u.key, dict(u.labels), [(t.id, t.commit_sha, t.completed_at, dict(t.extra))
                                     for t in u.tasks]) for u in units]


def _tree_strings(node: object, found: set[int]) -> set[int]:
    """The ids of every string of a parsed tree, keys included."""
    if isinstance(node, dict):
        for key, value in node.items():
            found.add(id(key))
            _tree_strings(value, found)
    elif isinstance(node, list):
        for value in node:
            _tree_strings(value, found)
    elif isinstance(node, str):
        found.add(id(node))
    return found


def _kept(units: list[Unit]) -> list[str]:
    kept: list[str] = []
    for unit in units:
        kept.append(unit.key)
        kept.extend(v for v in unit.labels.values() if isinstance(v, str))
        for task in unit.tasks:
            kept.extend(s for s in (task.id, task.commit_sha, task.completed_at)
                        if isinstance(s, str))
            kept.extend(v for v in task.extra.values() if isinstance(v, str))
    return kept


def test_compact_copies_every_string_a_parse_made_and_changes_no_value() -> None:
    top = orjson.loads(orjson.dumps({"stories": _stories()}))
    stories = top["stories"]
    units = [epic._unit(STATE, f"plans/epic-{EPIC}", sid, node) for sid, node in stories.items()]
    units[0].tasks[0].extra = {"subject": stories[units[0].key]["status"], "n": 3}
    before = _strings(units)
    tree = _tree_strings(top, set())
    assert any(id(s) in tree for s in _kept(units))  # as built: the tree's own strings

    copied = compact(units)

    assert copied == STORIES * (1 + 2 + 2) + 1  # keys, task ids, a sha and a time, extra
    assert _strings(units) == before
    assert not [s for s in _kept(units) if id(s) in tree]
    assert all(u.labels["story"] is u.key for u in units)  # the label shares the key's copy


def test_a_string_holding_a_nul_leaves_the_units_as_they_are() -> None:
    units = [Unit("epic", STATE, "a\0b", (Task("t1", "DONE", "done"),)),
             Unit("epic", STATE, "c", (Task("t2", "DONE", "done"),))]
    keys = [u.key for u in units]
    assert compact(units) == 0
    assert [u.key for u in units] == keys and units[0].key is keys[0]
    assert compact([]) == 0


def test_the_reuser_names_the_units_it_built_and_rekeys_their_digests() -> None:
    reuser = Reuser(None, {}, reuse=True)
    node: dict[str, object] = {"status": "DONE"}
    assert reuser("s-1", node) is None  # nothing before it: built
    built = Unit("epic", STATE, "".join(["s-", "1"]), ())  # an equal key, another object
    assert built.key is not next(iter(reuser.prints))
    assert reuser.built([built]) == [built]
    reuser.rekey([built])
    assert next(iter(reuser.prints)) is built.key


def test_a_big_background_read_compacts_the_units_it_built_not_those_it_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_epic(tmp_path, EPIC, _stories(), member=WHOLE)
    engine = Engine(answers.Options(staleness="mtime"))
    quiet = engine.reads.quiet
    quiet.big_bytes = 4096  # this file is "big": its parse is offered, then compacted
    assert os.path.getsize(tmp_path / STATE) > quiet.big_bytes
    trees: list[object] = []
    parse = quiet.parsing(fastjson.loads)  # the daemon's parser, as `storyd serve` sets it

    def parsing(data: bytes) -> object:
        trees.append(parse(data))
        return trees[-1]

    monkeypatch.setattr(switches.CONFIG, "fast_parse", parsing)
    ws = engine.add_workspace(str(tmp_path))
    engine.scan(ws)
    first = ws.files[STATE]
    units = [first.entries[k].unit for k in first.keys]
    assert len(units) == STORIES
    assert not [s for s in _kept(units) if id(s) in _tree_strings(trees[-1], set())]

    write_epic(tmp_path, EPIC, _stories(changed=7), member=WHOLE)
    engine.touch(ws, STATE)
    second = ws.files[STATE]
    changed = second.entries[story_id(7)].unit
    assert changed is not first.entries[story_id(7)].unit
    assert not [s for s in _kept([changed]) if id(s) in _tree_strings(trees[-1], set())]
    for key in second.keys:  # the others handed back as they were, strings and all
        if key != story_id(7):
            assert second.entries[key].unit is first.entries[key].unit
    assert next(k for k in second.prints if k == changed.key) is changed.key
    assert list(second.prints) == list(first.prints)  # in the file's order still


def test_a_value_that_is_not_a_plain_string_is_left_as_it_is() -> None:
    class Name(str):
        pass

    odd = Name("s-1")
    units = [Unit("epic", STATE, odd, (Task(7, "DONE", "done"),)),  # type: ignore[arg-type]
             Unit("epic", STATE, "s-2", (Task("t2", "DONE", "done", commit_sha="a" * 40),))]
    assert compact(units) == 3  # s-2, t2 and its sha
    assert units[0].key is odd and units[0].tasks[0].id == 7
    assert (units[1].key, units[1].tasks[0].id) == ("s-2", "t2")
