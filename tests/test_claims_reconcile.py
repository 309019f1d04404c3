"""Fencing (issue 45): `storyd reconcile --apply`/`--undo` on a unit another owner
claims exit 75 naming the holder; `--force` writes and the claims' log says so."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cli_harness import run_storyd_cli
from daemon_harness import reconcile_env
from epic_state_harness import EPIC, STORY
from git_harness import GitWorkspace

from storyd.api import claims


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A private state home: the claims database is its own."""
    return reconcile_env(tmp_path, monkeypatch)


@pytest.fixture
def lagging(tmp_path: Path) -> tuple[GitWorkspace, Path]:
    """T1 DONE at its commit; T2 committed but still PENDING: reconcile has work."""
    repo = GitWorkspace(tmp_path / "ws").init()
    repo.commit("base", {"README": "hello\n"})
    t1, _ = repo.tasks_commits(STORY, 2)
    return repo, repo.record({STORY: [t1]}, pending=1)


def storyd(env: dict[str, str], repo: GitWorkspace,
           *args: str) -> subprocess.CompletedProcess[bytes]:  # fmt: skip
    return run_storyd_cli(*args, "--workspace", str(repo.path), env=env, cwd=repo.path)


STORY_FLAGS = ("--epic-id", EPIC, "--story-id", STORY)


@pytest.mark.slow
class TestReconcileFence:
    """The write is the claim holder's, or refused, or forced and logged."""

    def test_other_owner_is_refused_then_forced(
        self, env: dict[str, str], lagging: tuple[GitWorkspace, Path]
    ) -> None:
        repo, state = lagging
        assert storyd(env, repo, "claim", *STORY_FLAGS, "--owner", "alice").returncode == 0
        before = state.read_bytes()
        refused = storyd(env, repo, "reconcile", "--apply", "--owner", "bob")
        assert refused.returncode == 75, refused.stderr
        assert b"held by alice (token 1)" in refused.stderr
        assert b"reconcile --apply refused" in refused.stderr
        assert state.read_bytes() == before
        undo = storyd(env, repo, "reconcile", "--undo", "--owner", "bob")
        assert undo.returncode == 1  # nothing applied yet: nothing to undo, not a refusal
        forced = storyd(env, repo, "reconcile", "--apply", "--owner", "bob", "--force")
        assert forced.returncode == 0, forced.stderr
        assert state.read_bytes() != before
        entry = claims.log()[-1]
        assert (entry["kind"], entry["owner"]) == ("forced", "bob")
        assert "over alice (token 1)" in str(entry["detail"])
        undone = storyd(env, repo, "reconcile", "--undo", "--owner", "bob")
        assert undone.returncode == 75 and b"reconcile --undo refused" in undone.stderr
        assert storyd(env, repo, "reconcile", "--undo", "--owner", "alice").returncode == 0
        assert state.read_bytes() == before

    def test_holder_writes(self, env: dict[str, str],
                           lagging: tuple[GitWorkspace, Path]) -> None:  # fmt: skip
        repo, state = lagging
        before = state.read_bytes()
        assert storyd(env, repo, "claim", *STORY_FLAGS, "--owner", "alice").returncode == 0
        done = storyd(env, repo, "reconcile", "--apply", "--owner", "alice")
        assert done.returncode == 0, done.stderr
        assert state.read_bytes() != before
