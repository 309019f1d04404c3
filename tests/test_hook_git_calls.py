"""How many git processes a hook starts without a daemon (issue 31): each start is a
few milliseconds of the agent's wait.

On storyd demo's workspace (7 units, 3 state files behind git), a `git` first on PATH
logs each start and runs the real git. session-start dates its story files with one
`git status` and one `git log` for all of them (storytime.prefetch: before, two per
file), beside the detectors' own; stop reads only the codes of `block_stop_on`, so it
dates none and runs only the detectors that raise them.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from agents_harness import AgentsEnv, demo_workspace, hook_payload, run_hook

from storyd.core.paths import which

SESSION_START_BOUND = 7  # 2 to date the story files, 5 for the detectors (main: 13)
STOP_BOUND = 2  # the unrecorded detector's cat-file and log (main: 8)


@pytest.fixture
def counted(tmp_path: Path) -> tuple[Path, dict[str, str], Path]:
    """The demo workspace, an environment whose PATH starts with a logging git, the log."""
    real = which("git")
    assert real is not None
    shims = tmp_path / "shims"
    shims.mkdir()
    log = tmp_path / "git-starts.log"
    shim = shims / "git"
    shim.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {real} "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    ws = demo_workspace(tmp_path)
    env = dict(AgentsEnv(tmp_path).env, PATH=f"{shims}{os.pathsep}{os.environ['PATH']}")
    return ws, env, log


def _starts(log: Path) -> list[str]:
    starts = log.read_text().split("\n")[:-1] if log.exists() else []  # git formats hold \x1e
    log.unlink(missing_ok=True)
    return starts


def test_session_start_dates_every_story_file_in_two_git_runs(
        counted: tuple[Path, dict[str, str], Path]) -> None:  # fmt: skip
    ws, env, log = counted
    done = run_hook("session-start", hook_payload("SessionStart", ws, source="startup"), env)
    assert done.returncode == 0, done.stderr
    assert b"unit(s) in flight" in done.stdout
    starts = _starts(log)
    dating = [s for s in starts if " status " in f" {s} " or "--name-only" in s]
    assert len(dating) == 2, starts  # one status, one log: not two per story file
    assert len(starts) <= SESSION_START_BOUND, "\n".join(starts)


def test_stop_asks_git_only_what_block_stop_on_reads(
        counted: tuple[Path, dict[str, str], Path]) -> None:  # fmt: skip
    ws, env, log = counted
    run_hook("session-start", hook_payload("SessionStart", ws, source="startup"), env)
    _starts(log)
    (ws / "plans/epic-0049/execution-state.json").touch()  # the session's own lag
    done = run_hook("stop", hook_payload("Stop", ws, stop_hook_active=False), env)
    assert done.returncode == 0, done.stderr
    assert b'"decision":"block"' in done.stdout and b"unrecorded" in done.stdout
    starts = _starts(log)
    assert not [s for s in starts if " status " in f" {s} "], starts  # no dating
    assert len(starts) <= STOP_BOUND, starts
