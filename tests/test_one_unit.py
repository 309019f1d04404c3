"""A direct read builds the unit asked and nothing else (issue 43).

`storyd resume --direct` parses the state file, finds the asked story and builds that
one unit: the count of units built and of story files probed proves it, not a timing.
Every answer stays the one the whole file's read gives (Adapter.load_one against
`load` + `Target.pick`), for the seed's shape, the other shapes and a format that
keeps the hook's default.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
from epic_state_harness import EPIC, STATE, story_id, task_id, write_epic

from storyd.api import answers
from storyd.core import target
from storyd.core.errors import StorydError
from storyd.core.formats import epic
from storyd.core.formats.base import Adapter, Source
from storyd.core.model import Unit
from storyd.core.pipeline import Options, read_one, read_units
from storyd.core.query import Query

STORIES = 60
DONE_AT = "2025-03-04T09:00:00Z"


def _tasks(n: int) -> dict[str, object]:
    story = story_id(n)
    done = {"status": "DONE", "commitSha": f"{n:040x}", "completedAt": DONE_AT}
    return {task_id(story, t): done if t <= n % 4 else {"status": "PENDING"} for t in (1, 2, 3)}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An epic of 60 stories, each with its story file."""
    stories = {story_id(n): {"status": "IN_PROGRESS", "tasks": _tasks(n)}
               for n in range(1, STORIES + 1)}
    write_epic(tmp_path, EPIC, stories)
    for sid in stories:
        (tmp_path / STATE).with_name(f"{sid}.md").write_text(f"# {sid}\n")
    return tmp_path


class _Counts:
    """Units the epic adapter built and story files stat'ed, while installed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.units: list[str] = []
        self.stats: list[str] = []
        build, stat = epic._unit, os.stat

        def counted_unit(relpath: str, epic_dir: str, sid: str, node: dict[str, object]):  # type: ignore[no-untyped-def]
            self.units.append(sid)
            return build(relpath, epic_dir, sid, node)

        def counted_stat(path, *args, **kwargs):  # type: ignore[no-untyped-def]
            if str(path).endswith(".md"):
                self.stats.append(str(path))
            return stat(path, *args, **kwargs)

        monkeypatch.setattr(epic, "_unit", counted_unit)
        monkeypatch.setattr(os, "stat", counted_stat)


class TestDirectBuildsOne:
    """`storyd resume --direct` builds one unit and probes one story file."""

    @pytest.mark.parametrize("staleness", ["mtime", "git"])
    def test_one_unit_built(self, workspace: Path, monkeypatch: pytest.MonkeyPatch,
                            staleness: str) -> None:
        counts = _Counts(monkeypatch)
        asked = story_id(37)
        query = Query(str(workspace), epic=EPIC, story=asked, staleness=staleness, direct=True)
        out = answers.run(query, staleness)
        assert out.code == 0, out.stderr
        assert counts.units == [asked]
        assert {Path(p).name for p in counts.stats} == {f"{asked}.md"}
        assert len(counts.stats) <= 2  # found by the adapter; dated by the answer

    def test_missing_story_builds_none(self, workspace: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
        counts = _Counts(monkeypatch)
        out = answers.run(Query(str(workspace), epic=EPIC, story="story-0049-9999"), "mtime")
        assert (out.code, out.stderr) == (2, (target.STORY_MISSING,))
        assert counts.units == []
        assert counts.stats == []


def _both(workspace: Path, where: target.Target) -> tuple[object, object]:
    """The whole file's read's answer (or error) for `where`, and read_one's: the caller
    asserts they are the same."""
    options = Options(staleness="mtime")

    def whole() -> object:
        units = read_units(str(workspace), where.adapter, where.relpath, options)
        return answers.answer(str(workspace), where.pick(units), options)

    def one() -> object:
        return answers.resume(str(workspace), where, options)

    results = []
    for run in (whole, one):
        try:
            got = run()
        except StorydError as exc:
            results.append((type(exc).__name__, exc.code, exc.message))
        else:
            assert isinstance(got, answers.Answer)
            results.append((got.line, got.unit.story_file, tuple(got.warnings),
                            tuple(f.as_dict().items() for f in got.findings)))
    return results[0], results[1]


class TestSameAnswers:
    """The one-unit read answers as the whole file's read does, for every shape."""

    SHAPES = {  # noqa: RUF012
        "seed": {"stories": {
            "s-1": {"tasks": {"T-1": {"status": "DONE", "commitSha": "a" * 40}}},
            "s-null": None,
            "s-bad": [1],
            "s-badtasks": {"tasks": 3},
            "s-finished": {"status": "DONE", "tasks": {"T-1": {"status": "PENDING"}}},
            "s-unknown": {"tasks": {"T-1": {"status": "weird", "commitSha": 5}}},
        }},
        "list": {"stories": [
            {"id": "s-1", "tasks": {"T-1": {"status": "DONE"}}},
            {"id": "s-1", "tasks": {"T-2": {"status": "DONE"}}},  # the first one counts
            {"nope": 1},
            {"id": "s-2", "tasks": {}},
        ], "storyEntries": {"s-2": {"status": "DONE"}}},
        "flow2": {"storyStatuses": {"s-1": {"status": "IN_PROGRESS", "tasks": {}}}},
        "single": {"storyId": "s-1", "storyStatus": "DONE", "tasks": {"T-1": {}}},
        "not-object": {"stories": 7},
    }
    KEYS = ("s-1", "s-2", "s-null", "s-bad", "s-badtasks", "s-finished", "s-unknown",
            "stories[2]", "absent")

    @pytest.mark.parametrize("shape", sorted(SHAPES))
    def test_every_key(self, tmp_path: Path, shape: str) -> None:
        path = tmp_path / STATE
        path.parent.mkdir(parents=True)
        path.write_bytes(orjson.dumps(self.SHAPES[shape]))
        (tmp_path / "plans/epic-0049/stories").mkdir()
        (tmp_path / "plans/epic-0049/stories/s-1.md").write_text("# s-1\n")
        for key in self.KEYS:
            whole, one = _both(tmp_path, target.for_epic(str(tmp_path), EPIC, key))
            assert whole == one, key

    def test_twin_copy(self, workspace: Path) -> None:
        old = workspace / "docs/stories/epic-0049/execution-state.json"
        old.parent.mkdir(parents=True)
        old.write_bytes((workspace / STATE).read_bytes())
        for relpath in (STATE, "docs/stories/epic-0049/execution-state.json"):
            whole, one = _both(workspace, target.Target(relpath, story_id(5), "missing",
                                                        "epic", epic.ADAPTER))
            assert whole == one, relpath


class TestDefaultHook:
    """A format that does not override load_one answers as load + pick did."""

    def test_default_is_load_and_pick(self, tmp_path: Path) -> None:
        relpath = "two.json"
        (tmp_path / relpath).write_text("{}")

        class Two(Adapter):
            name = "two"

            def matches(self, relpath: str) -> bool:
                return True

            def load(self, source: Source, relpath: str) -> list[Unit]:
                source.read(relpath)
                return [Unit("two", relpath, k, (), labels={"n": str(n)})
                        for n, k in enumerate(("a", "b", "a"))]

        two = Two()
        source = Source(str(tmp_path))
        assert [u.key for u in two.load_one(source, relpath, "b")] == ["b"]
        assert [u.labels["n"] for u in two.load_one(source, relpath, "a")] == ["0"]
        assert two.load_one(source, relpath, "zz") == []
        assert [u.key for u in two.load_one(source, relpath, None)] == ["a", "b", "a"]
        read = read_one(str(tmp_path), two, relpath, "b", Options())
        assert read.error is None and [u.key for u in read.units or ()] == ["b"]

    def test_task_master_tags(self, tmp_path: Path) -> None:
        """A real many-unit format on the default: every tag, none, and a missing one."""
        tm = ".taskmaster/tasks/tasks.json"
        (tmp_path / tm).parent.mkdir(parents=True)
        task = {"id": 1, "title": "t", "status": "done", "dependencies": [], "subtasks": []}
        (tmp_path / tm).write_bytes(orjson.dumps({"master": {"tasks": [task]},
                                                  "loop": {"tasks": []}}))
        (tmp_path / ".taskmaster/state.json").write_bytes(b'{"currentTag": "loop"}')
        assert type(target.for_state_file(str(tmp_path), tm, None).adapter).load_one \
            is Adapter.load_one
        for key in ("master", "loop", None, "absent"):
            whole, one = _both(tmp_path, target.for_state_file(str(tmp_path), tm, key))
            assert whole == one, key
