"""How many git processes a hook starts without a daemon (issue 31): each start is a
few milliseconds of the agent's wait.

On storyd demo's workspace (7 units, 3 state files behind git), a `git` first on PATH
logs each start and runs the real git. session-start dates its story files with one
`git status` and one `git log` for all of them (storytime.prefetch: before, two per
file), beside the detectors' own; stop reads only the codes of `block_stop_on`, so it
dates none and runs only the detectors that raise them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agents_harness import LoggingGit, demo_workspace, hook_payload, run_hook

SESSION_START_BOUND = 7  # 2 to date the story files, 5 for the detectors (main: 13)
STOP_BOUND = 2  # the unrecorded detector's cat-file and log (main: 8)


@pytest.fixture
def counted(tmp_path: Path) -> tuple[Path, LoggingGit]:
    """The demo workspace and a logging git first on PATH."""
    return demo_workspace(tmp_path), LoggingGit(tmp_path)


def test_session_start_dates_every_story_file_in_two_git_runs(
        counted: tuple[Path, LoggingGit]) -> None:  # fmt: skip
    ws, git = counted
    done = run_hook("session-start", hook_payload("SessionStart", ws, source="startup"),
                    git.env)
    assert done.returncode == 0, done.stderr
    assert b"unit(s) in flight" in done.stdout
    starts = git.starts()
    dating = [s for s in starts if " status " in f" {s} " or "--name-only" in s]
    assert len(dating) == 2, starts  # one status, one log: not two per story file
    assert len(starts) <= SESSION_START_BOUND, "\n".join(starts)


def test_stop_asks_git_only_what_block_stop_on_reads(
        counted: tuple[Path, LoggingGit]) -> None:  # fmt: skip
    ws, git = counted
    run_hook("session-start", hook_payload("SessionStart", ws, source="startup"), git.env)
    git.starts()
    (ws / "plans/epic-0049/execution-state.json").touch()  # the session's own lag
    done = run_hook("stop", hook_payload("Stop", ws, stop_hook_active=False), git.env)
    assert done.returncode == 0, done.stderr
    assert b'"decision":"block"' in done.stdout and b"unrecorded" in done.stdout
    starts = git.starts()
    assert not [s for s in starts if " status " in f" {s} "], starts  # no dating
    assert len(starts) <= STOP_BOUND, starts
