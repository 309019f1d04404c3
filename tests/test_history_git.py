"""Issue 33: a committed state file's versions from git (api/history_git.py), read with
the real `git`: a few git runs per commit whatever the epic's size, and a workspace
that is a folder inside its repository."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import orjson
import pytest
from git_harness import GitRepo

from storyd.api.history_git import (
    GitHistoryError,
    GitSource,
    changed_rows,
    record_from_git,
    rows_from_git,
    versions_in_git,
)
from storyd.core.formats.epic import ADAPTER

EPIC = "0049"
STATE = f"plans/epic-{EPIC}/execution-state.json"


def _epic(stories: int, done: int) -> dict[str, str]:
    """An epic of `stories` stories with 2 tasks each, the first `done` tasks of each
    DONE; every story's file is in stories/ (the producer's other place)."""
    nodes = {}
    files = {}
    for n in range(1, stories + 1):
        sid = f"story-{EPIC}-{n:04d}"
        tasks = {f"TASK-{EPIC}-{n:04d}-{t:03d}": {"status": "DONE" if t <= done else "PENDING"}
                 for t in (1, 2)}  # fmt: skip
        nodes[sid] = {"tasks": tasks}
        files[f"plans/epic-{EPIC}/stories/{sid}.md"] = f"# {sid}\n"
    files[STATE] = orjson.dumps({"epic": EPIC, "stories": nodes}).decode()
    return files


def _counting_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`git` on PATH is a shim that logs each run, then runs the real one."""
    real = shutil.which("git")
    assert real is not None
    shims = tmp_path / "shims"
    shims.mkdir()
    log = tmp_path / "git-runs.log"
    shim = shims / "git"
    shim.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec "{real}" "$@"\n')
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}{os.pathsep}{os.environ['PATH']}")
    return log


@pytest.mark.slow
def test_a_big_epic_costs_a_few_git_runs_per_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = GitRepo(tmp_path / "ws").init()
    first = repo.commit("plan", _epic(300, 0))
    second = repo.commit("progress", _epic(300, 1))
    log = _counting_git(tmp_path, monkeypatch)
    found = list(versions_in_git(str(repo.path), STATE, ADAPTER, 10))
    assert [sha for sha, _, _ in found] == [first, second]
    runs = log.read_text().splitlines()
    # the log, then per commit: the tree's listing and the state file (was 2 + 300 each)
    assert len(runs) <= 1 + 2 * 2, runs
    units = found[1][2]
    assert len(units) == 300
    assert all(u.story_file == f"plans/epic-{EPIC}/stories/{u.key}.md" for u in units)
    assert sum(t.done for u in units for t in u.tasks) == 300
    assert sum(t.done for u in found[0][2] for t in u.tasks) == 0


def test_a_workspace_inside_its_repository(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo").init()
    files = {f"app/{path}": text for path, text in _epic(2, 1).items()}
    sha = repo.commit("plan", {**files, "README": "the repository's own\n"})
    ws = str(repo.path / "app")
    found = list(versions_in_git(ws, STATE, ADAPTER, 10))
    assert [s for s, _, _ in found] == [sha]
    assert [u.key for u in found[0][2]] == [f"story-{EPIC}-0001", f"story-{EPIC}-0002"]
    source = GitSource(ws, sha)
    assert source.exists(STATE) and source.exists(f"plans/epic-{EPIC}/stories")
    assert not source.exists("README") and not source.exists("plans/nothing.md")


def test_a_commit_git_cannot_list_reads_as_empty(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "ws").init()
    repo.commit("plan", _epic(1, 0))
    source = GitSource(str(repo.path), "0" * 40)
    assert not source.exists(STATE)
    with pytest.raises(Exception, match="is not in commit 000000000000"):
        source.read(STATE)


@pytest.mark.slow
def test_the_child_gives_what_the_daemon_would_work_out_itself(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "ws").init()
    first = repo.commit("plan", _epic(3, 0))
    second = repo.commit("one task each", _epic(3, 1))
    repo.commit("nothing new in the state", {"src/x.txt": "x\n"})
    ws = str(repo.path)
    here = list(changed_rows(ws, STATE, ADAPTER, 10))
    there = list(rows_from_git(ws, STATE, "epic", 10))
    assert there == here
    assert [(sha, key) for sha, _, key, _, _ in there] == [
        (sha, f"story-{EPIC}-{n:04d}") for sha in (first, second) for n in (1, 2, 3)]
    assert there[-1][4][0][1:3] == ("DONE", "done")


def test_a_child_that_fails_or_overruns_says_so(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "ws").init()
    repo.commit("plan", _epic(2, 0))
    ws = str(repo.path)
    with pytest.raises(GitHistoryError, match="no format named 'nothing'"):
        list(rows_from_git(ws, STATE, "nothing", 10))
    with pytest.raises(GitHistoryError, match=r"stopped after 0\.001 s"):
        list(rows_from_git(ws, STATE, "epic", 10, timeout=0.001))


@pytest.mark.slow
def test_the_child_records_into_the_database_or_nothing(tmp_path: Path) -> None:
    from storyd.api import history_db, history_store

    repo = GitRepo(tmp_path / "ws").init()
    repo.commit("plan", _epic(3, 0))
    second = repo.commit("one task each", _epic(3, 1))
    ws = str(repo.path)
    writer = history_db.open_writer(str(tmp_path / "h.sqlite3"))  # the lock's holder
    try:
        assert record_from_git(ws, STATE, "epic", 10, writer.path) == 6
        found = history_store.versions(writer.conn, (ws, STATE, f"story-{EPIC}-0002"))
        assert [v["source"] for v in found][-1] == f"git:{second}"
        assert [v["done"] for v in found] == [0, 1]
        with pytest.raises(GitHistoryError, match="no format named"):
            record_from_git(ws, STATE, "nothing", 10, writer.path)
        with pytest.raises(GitHistoryError, match="stopped after"):
            record_from_git(ws, "plans/other.json", "epic", 10, writer.path, timeout=0.001)
        assert writer.conn.execute("SELECT COUNT(*) FROM versions").fetchone()[0] == 6
    finally:
        writer.close()
