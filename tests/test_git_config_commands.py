"""A command a repository's git configuration names is not run by storyd's reads where
turning it off costs no answer: `core.fsmonitor` on every git command storyd's staleness
runs (`git status` ran it on `resume`, `status`, `check` and each hook: a fresh user's
try), textconv drivers on the detectors' patches. docs/security.md says what still runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

from cli_harness import run_storyd_cli
from daemon_harness import daemon_env
from epic_state_harness import write_epic
from git_harness import GitWorkspace

EPIC, STORY = "0049", "story-0049-0001"


def test_a_configured_fsmonitor_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "fsmonitor-ran"
    hook = tmp_path / "fsmonitor.sh"
    hook.write_text(f"#!/bin/sh\ntouch '{marker}'\nexit 1\n")
    hook.chmod(0o755)
    repo = GitWorkspace(tmp_path / "ws").init(ignore_plans=False)
    ws = repo.path
    repo.commit("initial", {"README": "x\n"})
    (sha,) = repo.tasks_commits(STORY, 1, first=1)
    write_epic(ws, EPIC, tasks={STORY: {"T1": {"status": "DONE", "commitSha": sha,
                                               "completedAt": "2026-11-25T10:00:00Z"},
                                        "T2": {"status": "PENDING"}}})  # fmt: skip
    (ws / "plans" / f"epic-{EPIC}" / f"{STORY}.md").write_text("# story\n")  # dated by git
    repo.git("config", "core.fsmonitor", str(hook))
    subprocess.run(["git", "-C", str(ws), "status", "--porcelain"], capture_output=True,
                   check=False, timeout=30)  # fmt: skip
    assert marker.exists(), "git itself runs it: the premise"
    marker.unlink()
    env = daemon_env(tmp_path, tmp_path / "run" / "storyd.sock")
    for argv in (["resume", "--direct", "--epic-id", EPIC, "--story-id", STORY],
                 ["resume", "--direct", "--detail", "--epic-id", EPIC, "--story-id", STORY],
                 ["status", "--direct"], ["check", "--direct"]):  # fmt: skip
        done = run_storyd_cli(*argv, "--workspace", str(ws), env=env)
        assert done.returncode in (0, 1), (argv, done.stderr)
        assert not marker.exists(), f"storyd {' '.join(argv)} ran core.fsmonitor"
