"""Issue 20 item 4 through a real daemon: a workspace that is gone is unwatched and
frees its slot; one a query started watching expires when idle; `stats` says so."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_harness import run_storyd_cli
from daemon_harness import DaemonProcess, wait_for, write_config
from epic_state_harness import write_epic

pytestmark = pytest.mark.slow

Spawn = Callable[..., DaemonProcess]
STORY = "story-0049-0001"


def _ws(path: Path) -> Path:
    write_epic(path, "0049", {STORY: {"tasks": {"T1": {"status": "PENDING"}}}})
    return path


def _counts(proc: DaemonProcess) -> dict[str, object]:
    counts = proc.stats()["watching"]
    assert isinstance(counts, dict)
    return counts


def test_a_removed_workspace_is_forgotten(spawn_daemon: Spawn, tmp_path: Path) -> None:
    write_config(tmp_path, "[limits]\nverify_interval = 0.2\nmax_workspaces = 2\n")
    a, b = _ws(tmp_path / "a"), _ws(tmp_path / "b")
    proc = spawn_daemon([a, b])
    assert _counts(proc) == {"watched": 2, "auto": 0, "expired": 0, "gone": 0,
                             "autoWatchIdle": 86400.0}
    shutil.rmtree(a)  # the git worktree pattern: `git worktree remove`, or rm -rf
    wait_for(lambda: _counts(proc)["gone"] == 1, 10, "the removed workspace to be forgotten")
    assert proc.stats()["workspaces"] == [str(b.resolve())]
    forgotten = proc.wait_log("workspace_forgotten", workspace=str(a.resolve()))
    assert (forgotten["reason"], forgotten["units"]) == ("gone", 0)
    proc.wait_log("last_look", workspace=str(a.resolve()))
    # its slot is free again: a third workspace fits under max_workspaces = 2
    c = _ws(tmp_path / "c")
    done = run_storyd_cli("watch", str(c), env=proc.env)
    assert done.returncode == 0, done.stderr


def test_an_auto_watched_workspace_expires_when_idle(spawn_daemon: Spawn,
                                                     tmp_path: Path) -> None:
    write_config(tmp_path, "[limits]\nverify_interval = 0.2\nauto_watch_idle = 1.5\n")
    named, asked = _ws(tmp_path / "named"), _ws(tmp_path / "asked")
    proc = spawn_daemon([])
    assert run_storyd_cli("watch", str(named), env=proc.env).returncode == 0
    done = run_storyd_cli("resume", "--story-id", STORY, "--epic-id", "49", "--timeout", "5000",
                          env=proc.env, cwd=asked)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: _counts(proc)["auto"] == 1, 5, "the query to auto-watch its workspace")
    assert _counts(proc)["watched"] == 2
    wait_for(lambda: _counts(proc)["expired"] == 1, 10, "the idle workspace to expire")
    assert proc.stats()["workspaces"] == [str(named.resolve())]  # named: never expires
    assert _counts(proc) == {"watched": 1, "auto": 0, "expired": 1, "gone": 0,
                             "autoWatchIdle": 1.5}
    forgotten = proc.wait_log("workspace_forgotten", workspace=str(asked.resolve()))
    assert (forgotten["reason"], forgotten["units"]) == ("expired", 1)
