"""A miss answered from the file's latest whole read, when nothing it read changed since
(issue 43: no parse while a warm-up installs its units), and the one look per folder
that proves it (Changes.quiet_since): on real files, the kernel's real change queue."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from epic_state_harness import epic_relpath, write_epic

from storyd.core import pipeline, target
from storyd.core.pipeline import FileRead, Options
from storyd.server import changes as changes_module
from storyd.server.changes import Changes
from storyd.server.reads import Reads

EPIC, STORY = "0049", "story-0049-0001"


@pytest.fixture
def changes() -> Iterator[Changes]:
    queue = Changes()
    if not queue.available:
        pytest.skip("no inotify here")
    yield queue
    queue.close()


def _folders(tmp_path: Path, *names: str) -> list[str]:
    found = []
    for name in names:
        (tmp_path / name).mkdir()
        found.append(str(tmp_path / name))
    return found


class TestQuietSince:
    def test_quiet_folders_an_event_elsewhere_and_one_inside(
        self, tmp_path: Path, changes: Changes
    ) -> None:
        a, b = _folders(tmp_path, "a", "b")
        changes.watch(a)
        changes.watch(b)
        since = changes.drain()
        assert changes.quiet_since([a, b], since) is True
        Path(b, "f").write_text("x")
        changes.drain()
        assert changes.quiet_since([a], since) is True  # an event in another folder
        assert changes.quiet_since([a, b], since) is None  # one in b: ask per file
        assert changes.quiet_since([a, b], changes.drain()) is True  # a later mark

    def test_a_folder_watched_after_the_mark_proves_nothing(
        self, tmp_path: Path, changes: Changes
    ) -> None:
        a, c = _folders(tmp_path, "a", "c")
        changes.watch(a)
        Path(a, "f").write_text("x")  # events move the seq on
        since = changes.drain()
        changes.watch(c)
        Path(a, "f").write_text("y")
        changes.drain()
        assert changes.quiet_since([c], since) is False
        assert changes.quiet_since([str(tmp_path / "never")], since) is False

    def test_a_write_before_a_folders_first_watch_is_not_vouched_for(
        self, tmp_path: Path, changes: Changes
    ) -> None:
        """A read's mark, then a write in a folder nobody watched yet (no event), then
        the folder's first watch (after the read, as Reads.read watches its
        dependencies' folders): no event came in between, yet the write is not one the
        queue can vouch for. Before the watch took a seq of its own, `changed` said
        False here and a stale answer was served until the next event."""
        a, c = _folders(tmp_path, "a", "c")
        changes.watch(a)
        since = changes.drain()  # the read's mark
        Path(c, "x").write_text("written while unwatched")
        changes.watch(c)
        changes.drain()
        assert changes.changed(str(Path(c, "x")), since) is None  # stat it
        assert changes.quiet_since([c], since) is False
        later = changes.drain()  # a read after the watch: covered
        assert changes.changed(str(Path(c, "x")), later) is False

    def test_events_past_the_kept_ones_are_not_assumed_away(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(changes_module, "_RECENT", 4)
        queue = Changes()
        if not queue.available:
            pytest.skip("no inotify here")
        try:
            a, b = _folders(tmp_path, "a", "b")
            queue.watch(a)
            queue.watch(b)
            since = queue.drain()
            Path(a, "f").write_text("x")  # an event in a, then more in b than are kept
            for n in range(8):
                Path(b, f"g{n}").write_text("x")
            queue.drain()
            assert queue.quiet_since([a], since) is None
        finally:
            queue.close()


def _reads(changes: Changes) -> Reads:
    return Reads(Options(lock_timeout=5.0, staleness="mtime"), changes, lambda _ws: True)


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each one-unit read that parsed (pipeline.read_one, still called)."""
    made: list[str] = []
    real = pipeline.read_one

    def read_one(*args: object, **kwargs: object) -> FileRead:
        made.append(str(args[2]))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pipeline, "read_one", read_one)
    return made


class TestMissFromTheLatestRead:
    def _setup(self, tmp_path: Path, changes: Changes) -> tuple[Reads, FileRead, object]:
        write_epic(tmp_path, EPIC, tasks={STORY: {"T1": {"status": "PENDING"}}})
        (tmp_path / "plans" / f"epic-{EPIC}" / f"{STORY}.md").write_text("# story\n")
        adapter = target.for_epic(str(tmp_path), EPIC, STORY).adapter
        reads = _reads(changes)
        whole = reads.read(str(tmp_path), epic_relpath(EPIC), adapter)  # the warm-up's
        assert whole.error is None and whole.folders is not None
        # the older place of the epic is a dependency, in a folder nobody made
        assert str(tmp_path / "docs" / "stories" / f"epic-{EPIC}") in whole.unseen
        return reads, whole, adapter

    def test_unchanged_files_answer_from_it_without_a_parse(
        self, tmp_path: Path, changes: Changes, parses: list[str]
    ) -> None:
        reads, whole, adapter = self._setup(tmp_path, changes)
        got = reads.read_one(str(tmp_path), epic_relpath(EPIC), adapter, STORY)  # type: ignore[arg-type]
        assert got is whole and parses == []

    def test_a_write_to_the_state_file_is_parsed(
        self, tmp_path: Path, changes: Changes, parses: list[str]
    ) -> None:
        reads, whole, adapter = self._setup(tmp_path, changes)
        write_epic(tmp_path, EPIC, tasks={STORY: {"T1": {"status": "DONE"}}})
        got = reads.read_one(str(tmp_path), epic_relpath(EPIC), adapter, STORY)  # type: ignore[arg-type]
        assert got is not whole and parses == [epic_relpath(EPIC)]
        assert got.units is not None
        assert [t.status for t in got.units[0].tasks] == ["DONE"]

    def test_a_dependency_made_where_no_folder_was_is_parsed(
        self, tmp_path: Path, changes: Changes, parses: list[str]
    ) -> None:
        """The older place's folder, absent at the read, made since with the epic's
        file in it: absent then is not absent now, so the miss reads (and says the
        epic is in two places)."""
        reads, whole, adapter = self._setup(tmp_path, changes)
        older = tmp_path / "docs" / "stories" / f"epic-{EPIC}"
        older.mkdir(parents=True)
        os.link(tmp_path / epic_relpath(EPIC), older / "execution-state.json")
        got = reads.read_one(str(tmp_path), epic_relpath(EPIC), adapter, STORY)  # type: ignore[arg-type]
        assert got is not whole and parses == [epic_relpath(EPIC)]
        assert got.units is not None
        assert "epic-in-two-places" in [f.code for f in got.units[0].findings]
        assert "epic-in-two-places" not in [f.code for u in whole.units or () if u.key == STORY
                                            for f in u.findings]
