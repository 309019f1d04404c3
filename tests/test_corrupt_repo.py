"""A corrupt or truncated repository (issue 29): a warning finding and a `doctor` line,
never "0 problems" with an info finding."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_harness import run_storyd_cli
from daemon_harness import daemon_env
from epic_state_harness import STORY
from git_harness import GitWorkspace


@pytest.fixture
def truncated(tmp_path: Path) -> GitWorkspace:
    """Two task commits, recorded; then every object packed and the pack cut short."""
    repo = GitWorkspace(tmp_path / "ws").init()
    repo.commit("base", {"README": "hello\n"})
    repo.record({STORY: repo.tasks_commits(STORY, 2)})
    repo.git("repack", "-adq")
    pack = next((repo.path / ".git" / "objects" / "pack").glob("*.pack"))
    pack.chmod(0o644)
    with pack.open("r+b") as handle:
        handle.truncate(100)
    return repo


@pytest.mark.slow
def test_check_warns_and_doctor_says_so(truncated: GitWorkspace, tmp_path: Path) -> None:
    env = daemon_env(tmp_path, tmp_path / "run" / "none.sock")
    ws = str(truncated.path)
    check = run_storyd_cli("check", "--direct", "--workspace", ws, env=env)
    out = check.stdout.decode()
    assert check.returncode == 1, out
    assert "warning: commit-in-history/repository-corrupt" in out, out
    assert "0 problems" not in out
    doctor = run_storyd_cli("doctor", "--workspace", ws, env=env)
    said = doctor.stdout.decode()
    assert "which the repository cannot read" in said and "fsck" in said, said


@pytest.mark.slow
def test_an_unborn_branch_is_still_only_info(tmp_path: Path) -> None:
    repo = GitWorkspace(tmp_path / "ws").init()
    repo.record({STORY: []})
    env = daemon_env(tmp_path, tmp_path / "run" / "none.sock")
    check = run_storyd_cli("check", "--direct", "--workspace", str(repo.path), env=env)
    assert check.returncode == 0, check.stdout.decode()
    assert "repository-corrupt" not in check.stdout.decode()
