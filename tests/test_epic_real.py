"""Every real version of the seed-000 producer's execution-state.json, through storyd.

The corpus (tests/fixtures/epic-real/corpus, built by build_corpus.py) holds the 131
distinct versions of plans/*/execution-state.json in edercnj/ia-dev-environment's history,
prose replaced. Every story of every version must answer with exit 0 and the five-key
envelope, by `--epic-id/--story-id` and by `--state-file/--unit`; where the seed's
algorithm applies, the bytes are the reference's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_harness import run_reference
from epic_corpus import ENVELOPE_KEYS, epic_of, lay_out, load, manifest, shape, story_ids

from storyd.api.answers import Options, resume_epic, resume_unit
from storyd.core.formats import builtin
from storyd.core.formats.base import Source

Run = Callable[..., subprocess.CompletedProcess[bytes]]
ENTRIES = manifest()
READABLE = [e for e in ENTRIES if e["expect"] == "ok"]
TORN = [e for e in ENTRIES if e["expect"] != "ok"]


def _ids(entry: dict[str, str]) -> str:
    return entry["file"]


def test_corpus_covers_every_shape() -> None:
    shapes = {shape(load(e)) for e in READABLE}
    assert shapes == {
        "stories-map-tasks",
        "stories-map",
        "stories-array",
        "story-statuses",
        "single-story",
    }
    assert len(ENTRIES) == 131
    assert any("-" in e["path"].split("/")[1][5:] for e in ENTRIES)  # slugged folders
    assert any(len(s) == len("story-0018-001") for e in READABLE for s in story_ids(load(e)))


@pytest.mark.parametrize("entry", READABLE, ids=_ids)
def test_every_story_answers_in_process(entry: dict[str, str], tmp_path: Path) -> None:
    relpath = lay_out(entry, tmp_path)
    ids = story_ids(load(entry))
    assert ids, f"{entry['file']}: a real file with no story"
    for story in ids:
        by_epic = resume_epic(str(tmp_path), epic_of(entry["path"]), story.lower(), Options())
        assert list(by_epic.envelope) == ENVELOPE_KEYS
        by_path = resume_unit(str(tmp_path), relpath, story, Options())
        assert by_path.line == by_epic.line
    units = builtin("epic").load(Source(str(tmp_path)), relpath)
    assert [u.key for u in units] == ids
    assert all(u.error is None for u in units)


@pytest.mark.slow
@pytest.mark.parametrize("entry", READABLE, ids=_ids)
def test_first_and_last_story_through_storyd(
    entry: dict[str, str], tmp_path: Path, run_storyd: Run
) -> None:
    relpath = lay_out(entry, tmp_path)
    ids = story_ids(load(entry))
    first = run_storyd(
        "resume",
        "--epic-id",
        epic_of(entry["path"]),
        "--story-id",
        ids[0],
        "--direct",
        cwd=tmp_path,
    )
    assert first.returncode == 0, first.stderr
    assert list(json.loads(first.stdout)) == ENVELOPE_KEYS
    last = run_storyd("resume", "--state-file", relpath, "--unit", ids[-1], cwd=tmp_path)
    assert last.returncode == 0, last.stderr
    assert list(json.loads(last.stdout)) == ENVELOPE_KEYS


@pytest.mark.parametrize("entry", TORN, ids=_ids)
def test_a_torn_real_file_is_exit_65(
    entry: dict[str, str], tmp_path: Path, run_storyd: Run
) -> None:
    lay_out(entry, tmp_path)
    done = run_storyd(
        "resume",
        "--epic-id",
        epic_of(entry["path"]),
        "--story-id",
        "story-0037-0001",
        "--direct",
        cwd=tmp_path,
    )
    assert done.returncode == 65
    assert done.stdout == b""
    assert len(done.stderr.decode().splitlines()) == 1


SEED_SHAPED = [e for e in READABLE if shape(load(e)) == "stories-map-tasks"]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("jq") is None, reason="the reference needs jq")
@pytest.mark.parametrize("entry", SEED_SHAPED, ids=_ids)
def test_seed_shaped_real_files_match_the_reference(
    entry: dict[str, str], tmp_path: Path, run_storyd: Run
) -> None:
    lay_out(entry, tmp_path)
    env = {"TZ": "UTC", "LC_ALL": "C.UTF-8", "PATH": "/usr/bin:/bin:/usr/local/bin"}
    for story in story_ids(load(entry)):
        argv = ["--story-id", story, "--epic-id", epic_of(entry["path"])]
        ours = run_storyd("resume", *argv, "--direct", "--staleness", "mtime", cwd=tmp_path)
        theirs = run_reference(argv, tmp_path, env)
        assert (ours.returncode, ours.stdout, ours.stderr) == (
            theirs.returncode,
            theirs.stdout,
            theirs.stderr,
        ), story
