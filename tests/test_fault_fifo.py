"""Item 3 of issue 24: FIFOs where storyd reads, git that never answers, SIGTERM that must work.

Real FIFOs (mkfifo), real repositories, real `storyd` processes. Each of these hung for
ever on 467383b: a checkpoint output that is a FIFO (`reconcile`, the daemon's op), a
`.git` that is a FIFO (the refresher, warm-up, SIGTERM), and a loose ref that is a FIFO
(every git process; storytime's own read of HEAD's ref).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_harness import run_storyd_cli
from daemon_harness import DaemonProcess, daemon_env, wait_for
from epic_state_harness import STORY, write_epic
from git_harness import GitWorkspace

from storyd.core.regular import NotRegularFile, open_regular, read_regular

Spawn = Callable[..., DaemonProcess]
BOUND = 20.0  # seconds: each of these hung for ever before


def cli(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    """Run storyd; a hang fails the test (it does not wait for ever)."""
    try:
        return run_storyd_cli(*args, env=env, cwd=cwd, timeout=BOUND)
    except subprocess.TimeoutExpired:
        pytest.fail(f"storyd {' '.join(args)} did not end within {BOUND:g} s")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    environ = daemon_env(tmp_path, tmp_path / "run" / "storyd.sock")
    environ["XDG_STATE_HOME"] = str(tmp_path / "state")
    environ["STORYD_GIT_TIMEOUT"] = "2"
    return environ


def checkpoint_workspace(root: Path) -> Path:
    """A checkpoint workspace whose running task's output file is a FIFO."""
    state = root / "memory" / "state"
    reports = root / "memory" / "reports" / "tasks"
    state.mkdir(parents=True)
    reports.mkdir(parents=True)
    (state / "phase.json").write_text(json.dumps({
        "workflow_id": "wf-1", "started_at": "2026-03-02T10:00:00Z",
        "last_updated": "2026-03-02T11:00:00Z", "current_phase": "IMPLEMENTATION",
        "phase_status": "in_progress", "completed_phases": [], "interruption_safe": True,
    }))
    (state / "execution.json").write_text(json.dumps({
        "workflow_id": "wf-1", "phase": "IMPLEMENTATION", "interruption_safe": True,
        "tasks": [{"id": "task-001", "status": "running", "attempts": 1,
                   "started_at": "2026-03-02T11:15:00Z", "completed_at": None,
                   "output": "memory/reports/tasks/task-001.json"}],
    }))
    os.mkfifo(reports / "task-001.json")
    return root


def test_open_regular_refuses_a_fifo_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFile, match="a FIFO"):
        open_regular(str(fifo))
    with pytest.raises(OSError, match="a folder"):
        read_regular(str(tmp_path))
    (tmp_path / "file").write_bytes(b"abc")
    assert read_regular(str(tmp_path / "file")) == b"abc"
    fd = open_regular(str(tmp_path / "file"))
    try:  # blocking again once known to be a regular file
        import fcntl

        assert not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK
    finally:
        os.close(fd)


@pytest.mark.slow
def test_reconcile_with_a_fifo_output_ends(tmp_path: Path, env: dict[str, str]) -> None:
    ws = checkpoint_workspace(tmp_path / "ws")
    for args in ((), ("--apply",)):
        done = cli(env, "reconcile", "--workspace", str(ws), *args, cwd=ws)
        assert b"Traceback" not in done.stderr, done.stderr
        assert done.returncode in (0, 1), (done.returncode, done.stderr)


@pytest.mark.slow
def test_daemon_reconcile_op_with_a_fifo_output_and_sigterm(
    tmp_path: Path, spawn_daemon: Spawn
) -> None:
    ws = checkpoint_workspace(tmp_path / "ws")
    daemon = spawn_daemon([ws])
    answer = daemon.request({"op": "reconcile", "workspace": str(ws)}, timeout=BOUND)
    assert answer["ok"] is True, answer
    assert daemon.request({"op": "ping"})["ok"] is True
    started = time.monotonic()
    daemon.stop(timeout=BOUND)
    assert time.monotonic() - started < BOUND


@pytest.mark.slow
def test_a_fifo_dotgit_does_not_stop_the_refresher(tmp_path: Path, spawn_daemon: Spawn) -> None:
    ws = tmp_path / "ws"
    write_epic(ws, "0049", {STORY: {"tasks": {"T1": {"status": "pending"}}}})
    os.mkfifo(ws / ".git")
    daemon = spawn_daemon([ws])  # waits for the warm-up's end: it never came before
    request = {"op": "resume", "workspace": str(ws), "epic": "0049", "story": STORY}
    first = daemon.request(request)
    write_epic(ws, "0049", {STORY: {"tasks": {"T1": {"status": "done", "commitSha": "abc1"},
                                              "T2": {"status": "pending"}}}})
    wait_for(lambda: daemon.request(request)["envelope"] != first["envelope"], BOUND,
             "the change to be seen")
    assert daemon.stop(timeout=BOUND) == 0


def fifo_ref_repo(root: Path) -> GitWorkspace:
    """A repository whose checked-out branch's loose ref is a FIFO."""
    repo = GitWorkspace(root).init()
    t1 = repo.commit(f"TASK-{STORY.removeprefix('story-')}-001 one", {"a.txt": "a\n"})
    repo.record({STORY: [t1]})
    ref = root / ".git" / "refs" / "heads" / "main"
    ref.unlink()
    os.mkfifo(ref)
    return repo


@pytest.mark.slow
def test_git_that_never_answers_is_killed_with_a_finding(
    tmp_path: Path, env: dict[str, str]
) -> None:
    repo = fifo_ref_repo(tmp_path / "ws")
    started = time.monotonic()
    done = cli(env, "check", "--direct", "--workspace", str(repo.path), cwd=repo.path)
    assert b"Traceback" not in done.stderr, done.stderr
    assert b"git did not answer within 2 s" in done.stdout + done.stderr, done.stdout
    assert time.monotonic() - started < BOUND


@pytest.mark.slow
def test_a_fifo_packed_refs_is_named_without_starting_git(
    tmp_path: Path, env: dict[str, str]
) -> None:
    repo = GitWorkspace(tmp_path / "ws").init()
    t1 = repo.commit(f"TASK-{STORY.removeprefix('story-')}-001 one", {"a.txt": "a\n"})
    repo.record({STORY: [t1]})
    os.mkfifo(repo.path / ".git" / "packed-refs")
    done = cli(env, "status", "--direct", "--workspace", str(repo.path), cwd=repo.path)
    assert b"packed-refs is not a regular file" in done.stdout, done.stdout
    assert b"Traceback" not in done.stderr, done.stderr


@pytest.mark.slow
def test_exit_now_ends_a_process_whose_worker_is_stuck(tmp_path: Path) -> None:
    """A thread-pool worker blocked for ever in open(2) of a FIFO: the process still ends."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code = (
        "import sys\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from storyd.server.service import exit_now\n"
        "pool = ThreadPoolExecutor(1)\n"
        f"pool.submit(open, {str(fifo)!r})\n"
        "pool.shutdown(wait=False)\n"
        "exit_now(3, grace=0.5)\n"
        "sys.exit(0)\n"
    )
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=BOUND,
                          check=False)
    assert done.returncode == 3, done.stderr
    assert b"exit_forced" in done.stdout + done.stderr
    assert time.monotonic() - started < BOUND


def test_a_fifo_commondir_does_not_hang_opening_the_repository(tmp_path: Path) -> None:
    """Opening a repository reads `.git/commondir`: a FIFO there once hung it."""

    repo = GitWorkspace(tmp_path / "ws").init()
    repo.commit("base", {"README": "hello\n"})
    os.mkfifo(repo.path / ".git" / "commondir")
    code = (
        "from storyd.detectors.gitview import open_view\n"
        f"print(open_view({str(repo.path)!r}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=BOUND,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == b"None"
