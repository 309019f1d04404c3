"""An epic's `stories` read a story at a time (storyd.core.jsonstream, issue 43).

`members` gives what `jsonio.loads` gives, entry by entry, for the plain shape, and None
for anything else, whose whole parse then gives the same value or the same error. The
epic adapter answers the same through either path; a daemon's reread hands back every
story whose text did not change and builds the one that did.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from epic_state_harness import EPIC, STATE, story_id, task_id, write_epic
from hypothesis import given, settings
from hypothesis import strategies as st

from storyd.api import answers
from storyd.core.errors import DataError
from storyd.core.formats import epic
from storyd.core.formats.base import Source
from storyd.core.jsonio import loads
from storyd.core.jsonstream import members, value_at
from storyd.server.engine import Engine

_scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
            | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=12)
_documents = st.fixed_dictionaries(
    {"stories": st.dictionaries(st.text(max_size=6), _values, max_size=6)},
    optional={"epic": _scalars, "updatedAt": _values})


def _encodings(document: dict[str, object]) -> list[bytes]:
    """The document as a writer might put it: compact, spaced, indented, escaped, and
    padded with runs of whitespace that end inside jsonstream._skip's first slices (16
    characters, then 64, 256) and past its largest (65,536)."""
    padded = (" " * 16 + "," + "\n" * 17, "\t" * 81 + ":" + " \r" * 100)
    return [json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode(),
            json.dumps(document, indent=2).encode() + b"\n",
            b" \r\n\t" + json.dumps(document, separators=(" , ", " : ")).encode() + b"\n ",
            b" " * 70_000 + json.dumps(document, separators=padded).encode() + b"\n" * 66_000]


@settings(max_examples=150, deadline=None)
@given(_documents)
def test_every_entry_is_what_the_whole_parse_gives(document: dict[str, object]) -> None:
    for data in _encodings(document):
        whole = loads(data)
        assert isinstance(whole, dict)
        seen: list[tuple[str, object, str]] = []
        visited = members(data, "stories", lambda k, t, s, e, v, seen=seen: seen.append(
            (k, v, t[s:e])))
        got = members(data, "stories")
        assert got is not None and visited is not None, data[:200]
        stories = whole["stories"]
        assert isinstance(stories, dict)
        assert [k for k, _s, _e in got.entries] == list(stories)  # file order
        assert [(k, v) for k, v, _t in seen] == list(stories.items())
        assert [t for _k, _v, t in seen] == [got.text[s:e] for _k, s, e in got.entries]
        assert visited.entries == [] and visited.top == got.top
        for key, start, end in got.entries:
            assert value_at(got.text, start) == stories[key]
            assert loads(got.text[start:end].encode()) == stories[key]
        assert got.top == {k: (None if k == "stories" else v) for k, v in whole.items()}


@pytest.mark.parametrize("data", [
    b'\xef\xbb\xbf{"stories":{}}',  # a byte-order mark
    '{"stories":{}}'.encode("utf-16"),
    b'{"stories":{"a":{},"a":{"x":1}}}',  # a duplicate story: the whole parse's last wins
    b'{"stories":{},"stories":{"a":{}}}',
    b'{"epic":1,"epic":2,"stories":{}}',
    b'{"epic":"0049"}',  # no `stories`
    b'{"stories":[{"id":"a"}]}',  # the list shape
    b'{"stories":null}',
    b'[{"stories":{}}]',
    b'{"stories":{"a":{}},}',  # a trailing comma
    b'{"stories":{"a":{"tasks":{"T1":{"status":"DONE"}}}',  # torn
    b'{"stories":{"a":NaN}}',
    b'{"stories":{"a":"\x01"}}',  # a control character in a string
    b'{"stories":{}} {}',  # data after the document
    b'{"stories":{}} // done',
    b"",
    b'{"stories":{"a":{}} \n<<<<<<< HEAD\n',
    b"\xff\xfe\x00",
    # whitespace JSON does not know, after a run long enough to be stripped in C
    b'{"stories":{"a":{}' + b" " * 64 + b'\x0b}}',
    b'{"stories":' + b" " * 70 + '\u00a0{}}'.encode(),
    b'{"stories":{"a":{}' + b"\n" * 70_000 + '\u2028}}'.encode(),
])
def test_anything_but_the_plain_shape_is_left_to_the_whole_parse(data: bytes) -> None:
    assert members(data, "stories") is None


def _epic(ws: Path, data: bytes) -> None:
    path = ws / STATE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _answers(ws: Path, key: str) -> object:
    """What the epic adapter reads for `key` (one unit), or the error's words."""
    try:
        units = epic.ADAPTER.load_one(Source(str(ws)), STATE, key)
    except DataError as exc:
        return exc.message
    return [(u.key, u.error, [(t.id, t.status, t.commit_sha) for t in u.tasks]) for u in units]


@pytest.mark.parametrize("data", [
    b'{"stories":{"a":{"tasks":{"T1":{"status":"DONE"}}},"a":{"tasks":{"T2":{}}}}}',
    b'{"stories":{"a":{"tasks":{"T1":{"status":"DONE"}}}',
    b'{"stories":{"a":{"tasks":{"T1":{"status":"DONE"}}},}}',
    b'\xef\xbb\xbf{"stories":{"a":{"tasks":{"T1":{"status":"DONE"}}}}}',
    b'{"stories":{"a":7,"b":null}}',
])
def test_the_adapter_answers_as_the_whole_parse_does(tmp_path: Path, data: bytes) -> None:
    """Each of these goes whole (or, the last, streamed); the answer, or the error in its
    words, is the one a whole parse of the file gives for every story asked."""
    _epic(tmp_path, data)
    try:
        top = loads(data)
    except ValueError as exc:
        assert _answers(tmp_path, "a") == f"{STATE}: invalid JSON: {exc}"
        return
    assert isinstance(top, dict)
    for key in ("a", "b"):
        entry = epic.story_node(top, STATE, key)
        want = [] if entry is None else [
            (u.key, u.error, [(t.id, t.status, t.commit_sha) for t in u.tasks])
            for u in [epic._unit_or_error(STATE, *entry)]]
        assert _answers(tmp_path, key) == want


def _stories(changed: int = 0) -> dict[str, object]:
    return {story_id(n): {"tasks": {task_id(story_id(n), t): {
        "status": "DONE" if t <= 1 + (n == changed) else "PENDING"} for t in (1, 2, 3)}}
        for n in range(1, 41)}


def _count_builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The story ids the epic adapter builds from here on."""
    built: list[str] = []
    build = epic._built

    def counted(source: Source, relpath: str, story: str, *rest: object) -> object:
        built.append(story)
        return build(source, relpath, story, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(epic, "_built", counted)
    return built


def _reread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first_member: str,
            changed: int) -> tuple[Any, Any, list[str]]:
    """An engine's snapshot of the epic written with `first_member`, then its snapshot
    after the seed's shape with story `changed` advanced, and the stories built then."""
    write_epic(tmp_path, EPIC, _stories(), member=first_member)
    engine = Engine(answers.Options(staleness="mtime"))
    ws = engine.add_workspace(str(tmp_path))
    engine.scan(ws)
    first = ws.files[STATE]
    write_epic(tmp_path, EPIC, _stories(changed=changed))
    built = _count_builds(monkeypatch)
    engine.touch(ws, STATE)
    return first, ws.files[STATE], built


def test_a_reread_hands_back_every_story_whose_text_did_not_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second, built = _reread(tmp_path, monkeypatch, "stories", 7)
    assert built == [story_id(7)]  # one story scanned again and built, 39 handed back
    assert list(second.keys) == list(first.keys)  # the file's order
    for key in second.keys:
        old, new = first.entries[key].unit, second.entries[key].unit
        if key == story_id(7):
            assert new is not old
            assert [t.status for t in new.tasks] == ["DONE", "DONE", "PENDING"]
        else:
            assert new is old
    assert list(second.prints) == list(first.prints)


def test_a_file_read_whole_then_streamed_is_built_again_not_taken_for_another(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """node_digest's and the text's digests are tagged apart: the flowVersion 2 file read
    whole, then the seed's shape, builds every story afresh (the installer then keeps
    the entries whose units are equal: install.py's same_data)."""
    first, second, built = _reread(tmp_path, monkeypatch, "storyStatuses", 3)
    assert sorted(built) == sorted(first.keys)
    got = second.entries[story_id(3)].unit
    assert [t.status for t in got.tasks] == ["DONE", "DONE", "PENDING"]
    assert orjson.loads((tmp_path / STATE).read_bytes())["stories"]  # the seed's shape


class _Reuse:
    """A `reuse` that knows no text (every story built) and hands back `old[key]` for a
    unit built with the same data, as Reads' Reuser does."""

    def __init__(self, old: dict[str, object]) -> None:
        self.old, self.asked = old, []

    def __call__(self, key: str, node: dict[str, object]) -> None:
        raise AssertionError("a streamed read asks by text")

    def text(self, key: str, text: str) -> None:
        self.asked.append(key)

    def made(self, key: str, unit: object) -> object:
        return self.old.get(key, unit)

    def restart(self) -> None:
        raise AssertionError("the file is the plain shape")


def test_a_reformatted_file_keeps_the_old_units_of_unchanged_stories(tmp_path: Path) -> None:
    """Every story's text changed (indented now), its data did not: each is built and
    checked at once, and the old unit kept, the new one freed (Reuser.same)."""
    stories = _stories()
    path = tmp_path / STATE
    path.parent.mkdir(parents=True)
    path.write_bytes(json.dumps({"epic": EPIC, "stories": stories}, indent=2).encode())
    old = {key: object() for key in stories}
    reuse = _Reuse(old)
    units = epic.ADAPTER.load_reusing(Source(str(tmp_path)), STATE, reuse)  # type: ignore[arg-type]
    assert reuse.asked == list(stories)
    assert units == [old[key] for key in stories]


def test_the_reuser_keeps_the_old_unit_only_for_the_same_data(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from storyd.core.model import Task, Unit
    from storyd.server.reads import Reuser

    def unit(status: str) -> Unit:
        return Unit("epic", STATE, "s-1", (Task("t1", status, "pending"),))

    cached = unit("PENDING")
    old = SimpleNamespace(prints={}, entries={"s-1": SimpleNamespace(unit=cached, key="s-1")})
    reuser = Reuser(old, {}, reuse=True)  # type: ignore[arg-type]
    assert reuser.made("s-1", unit("PENDING")) is cached
    assert reuser.handed == {id(cached)}
    changed = unit("IN_PROGRESS")
    assert reuser.made("s-1", changed) is changed
    assert Reuser(old, {}, reuse=False).made("s-1", unit("PENDING")) is not cached  # type: ignore[arg-type]


def test_an_entry_longer_than_longest_sends_the_file_whole_unvisited() -> None:
    data = b'{"stories":{"a":{"t":1},"b":{"tasks":{"T1":{"status":"DONE"}}}}}'
    seen: list[str] = []
    assert members(data, "stories", lambda k, *_: seen.append(k), longest=10) is None
    assert seen == ["a"]  # "b" (33 characters) is not visited
    assert members(data, "stories", longest=40) is not None


def test_a_story_past_story_whole_is_read_whole(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """One story of tens of thousands of tasks is a tree by itself: load_reusing parses
    its file whole (the daemon's big-parse machinery keeps such a tree from pinning
    heap); the answer is the same."""
    monkeypatch.setattr(epic, "STORY_WHOLE", 100)  # each story here: ~150
    write_epic(tmp_path, EPIC, _stories(changed=2))
    parsed: list[bytes] = []
    whole = epic.load_json_object
    monkeypatch.setattr(epic, "load_json_object",
                        lambda data, relpath: parsed.append(data) or whole(data, relpath))
    units = epic.ADAPTER.load_reusing(Source(str(tmp_path)), STATE, None)
    assert len(parsed) == 1 and len(units) == 40
    assert [t.status for t in units[1].tasks] == ["DONE", "DONE", "PENDING"]


@pytest.mark.parametrize("shape", [
    b'{"stories":{"story-0049-0001":%s,"story-0049-0001":7}}',  # a duplicate story
    b'{"stories":{"story-0049-0001":%s},"stories":{"story-0049-0001":7}}',  # and member
])
def test_a_stream_given_up_leaves_no_digest_behind(tmp_path: Path, shape: bytes) -> None:
    """The stream saw the story as an object and recorded its text's digest; the whole
    parse keeps the last value, a number: an error unit. The next file holding that
    object must build it, not hand the error unit back (Reuser.restart)."""
    node = b'{"tasks":{"T1":{"status":"DONE"},"T2":{"status":"PENDING"}}}'
    _epic(tmp_path, shape % node)
    engine = Engine(answers.Options(staleness="mtime"))
    ws = engine.add_workspace(str(tmp_path))
    engine.scan(ws)
    assert ws.files[STATE].entries["story-0049-0001"].unit.error
    _epic(tmp_path, b'{"stories":{"story-0049-0001":%s}}' % node)
    engine.touch(ws, STATE)
    unit = ws.files[STATE].entries["story-0049-0001"].unit
    assert unit.error is None
    assert [(t.id, t.status) for t in unit.tasks] == [("T1", "DONE"), ("T2", "PENDING")]


def _nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


@pytest.mark.parametrize("where", ["story", "member"])
def test_nesting_too_deep_for_the_whole_parse_is_never_read_by_the_stream(
        where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A story (or another member) is scanned as deep below the caller as the whole
    parse scans it: what load_json_object refuses, `members` refuses too. (The lean
    parser's limit: a daemon's orjson, in front of it, has its own, and the stream's
    refusal then falls back to it, as before.)"""
    import sys

    from storyd.core import switches

    monkeypatch.setattr(switches.CONFIG, "fast_parse", None)

    limit = sys.getrecursionlimit()
    outcomes = set()
    for depth in range(limit - 200, limit + 5):  # this test runs some frames down itself
        inner = _nested(depth)
        data = (b'{"stories":{"s":%s}}' % inner if where == "story"
                else b'{"x":%s,"stories":{}}' % inner)
        streamed = members(data, "stories") is not None
        try:
            epic.load_json_object(data, STATE)
        except DataError as exc:
            assert "nesting too deep" in exc.message
            whole = False
        else:
            whole = True
        assert not streamed or whole, depth
        outcomes.add((streamed, whole))
    assert (True, True) in outcomes and (False, False) in outcomes  # both sides of it


def test_what_visit_raises_is_not_taken_for_a_shape_it_does_not_read() -> None:
    def visit(*_: object) -> None:
        raise ValueError("a bug of the caller's")

    with pytest.raises(ValueError, match="a bug of the caller's"):
        members(b'{"stories":{"a":{}}}', "stories", visit)


def _every_unit(ws: Path, data: bytes) -> object:
    """Every unit the adapter reads from `data` (all they carry), or the error's words."""
    _epic(ws, data)
    try:
        units = epic.ADAPTER.load(Source(str(ws)), STATE)
    except DataError as exc:
        return exc.message
    return [(u.key, u.error, u.story_file, u.findings, sorted(u.labels.items()), repr(u.next),
             [(t.id, t.status, t.bucket, t.commit_sha, t.completed_at, repr(t.extra))
              for t in u.tasks]) for u in units]


def test_every_real_epic_file_reads_as_its_whole_parse(tmp_path: Path) -> None:
    """The producer's real state files (tests/fixtures/epic-real): those in the plain
    shape are read a story at a time, and give what the whole parse gives (forced by a
    byte-order mark, which the stream refuses)."""
    import epic_corpus

    streamed = 0
    for n, row in enumerate(epic_corpus.manifest()):
        data = (epic_corpus.CORPUS / row["file"]).read_bytes()
        streamed += members(data, "stories") is not None
        assert _every_unit(tmp_path / f"s{n}", data) == _every_unit(
            tmp_path / f"w{n}", b"\xef\xbb\xbf" + data), row["file"]
    assert streamed >= 80  # 86 of the 131 versions are in the plain shape
