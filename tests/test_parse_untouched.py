"""No format changes the JSON tree it parsed.

Any reuse of a parsed document (a tree shared between a query's miss and the
refresher's read of equal bytes was tried for issue 43: server/quietgc.py) is right only
while every adapter treats the tree as read-only. Each real JSON state file of the corpora, and the
seed convention's epic, is read through the daemon's engine with a parser that keeps
every tree it hands out; after the reads each tree must still equal a fresh parse of its
bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from corpus_harness import Corpus
from epic_state_harness import EPIC, story_id, task_id, write_epic

from storyd.core import switches
from storyd.core.pipeline import Options
from storyd.server.engine import Engine

_JSON = (".json", ".jsonl")


def _json_commits() -> list[tuple[Corpus, dict[str, object]]]:
    """One entry per convention, repository and commit of each corpus that holds a JSON
    state file."""
    seen: set[tuple[str, str, str]] = set()
    found = []
    for corpus in (Corpus("realworld3"), Corpus("realworld4")):
        manifest = corpus.root / "MANIFEST.json"
        rows = orjson.loads(manifest.read_bytes()) if manifest.is_file() else []
        for entry in rows:
            key = (str(entry["convention"]), str(entry["repo"]), str(entry["commit"]))
            if str(entry["path"]).endswith(_JSON) and key not in seen:
                seen.add(key)
                found.append((corpus, entry))
    return found


@pytest.fixture
def kept() -> Iterator[list[tuple[bytes, object]]]:
    trees: list[tuple[bytes, object]] = []

    def parse(data: bytes) -> object:
        tree = orjson.loads(data)
        trees.append((bytes(data), tree))
        return tree

    switches.configure(fast_parse=parse)
    try:
        yield trees
    finally:
        switches.configure(fast_parse=None)


def _read_all(ws: Path) -> None:
    engine = Engine(Options(staleness="mtime"))
    engine.scan(engine.add_workspace(str(ws)))


def _changed(trees: list[tuple[bytes, object]]) -> list[bytes]:
    """The start of each document whose tree no longer equals a fresh parse of it."""
    return [data[:120] for data, tree in trees if tree != orjson.loads(data)]


@pytest.mark.slow
def test_the_corpora_json_files(tmp_path: Path, kept: list[tuple[bytes, object]]) -> None:
    commits = _json_commits()
    if not commits:
        pytest.skip("the realworld3 / realworld4 corpora are absent")
    for n, (corpus, entry) in enumerate(commits):
        ws = tmp_path / f"ws{n}"
        corpus.lay_out_commit(entry, ws)
        _read_all(ws)
    assert len(kept) >= len(commits)  # every commit's state file was parsed (2,325 trees)
    assert _changed(kept) == []


@pytest.mark.parametrize("member", ["stories", "storyStatuses"])
def test_the_seed_epic(tmp_path: Path, kept: list[tuple[bytes, object]], member: str) -> None:
    """The seed's `stories` is read a story at a time (storyd.core.jsonstream): no whole
    tree is handed out to share; the flowVersion 2 shape is parsed whole and left as is."""
    tasks = {story_id(n): {task_id(story_id(n), t): ({"status": "DONE", "commitSha": f"{t:040x}"}
                                                     if t <= n else {"status": "PENDING"})
                           for t in (1, 2, 3)}
             for n in range(1, 5)}
    write_epic(tmp_path / "ws", EPIC, tasks=tasks, member=member)
    _read_all(tmp_path / "ws")
    if member == "stories":
        assert kept == [], "the seed's shape parsed whole"
    else:
        assert kept, "no JSON document was parsed"
    assert _changed(kept) == []
