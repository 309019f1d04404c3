"""Item 7 of issue 24: a stale `.git/index.lock` deferred the detectors without limit.

On 467383b, while an index.lock left by a crashed git existed, the daemon never ran its
detectors: no finding that `check --direct` reports, no drift, and `doctor` said all was
well. Now the deferral is bounded by `limits.git_lock_wait`; past it the detectors check
anyway and each unit says how long the lock has been held, and so does `doctor`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_harness import run_storyd_cli
from daemon_harness import DaemonProcess, daemon_env, wait_for
from epic_state_harness import STORY, task_id
from git_harness import GitWorkspace

Spawn = Callable[..., DaemonProcess]


def codes(daemon: DaemonProcess, ws: Path) -> set[str]:
    answer = daemon.request({"op": "resume", "workspace": str(ws), "epic": "0049",
                             "story": STORY})
    assert answer["ok"] is True, answer
    return {f"{f['detector']}/{f['code']}" for f in answer["findings"]}  # type: ignore[union-attr]


@pytest.mark.slow
def test_a_stale_index_lock_defers_the_detectors_only_for_a_while(
    tmp_path: Path, spawn_daemon: Spawn
) -> None:
    repo = GitWorkspace(tmp_path / "ws").init()
    repo.commit("base", {"README": "hello\n"})
    t1 = repo.commit(f"{task_id(STORY, 1)} one", {"a.txt": "a\n"})
    repo.record({STORY: [t1]})
    daemon = spawn_daemon([repo.path])
    assert not {c for c in codes(daemon, repo.path) if "unrecorded" in c}
    lock = repo.path / ".git" / "index.lock"
    lock.write_bytes(b"")  # a crashed git's lock: never removed
    # a commit naming task 2, made without the index (its lock is taken)
    tree = repo.git("rev-parse", "HEAD^{tree}")
    sha = repo.git("commit-tree", tree, "-p", "HEAD", "-m", f"{task_id(STORY, 2)} two")
    repo.git("update-ref", "refs/heads/main", sha)
    started = time.monotonic()

    # a query meanwhile reads git itself (the daemon's recheck waits for the lock), as
    # `check --direct` would: the commit's finding, the lock not yet long held
    assert "unrecorded-commit/unrecorded" in codes(daemon, repo.path)

    def checked() -> set[str] | None:
        now = codes(daemon, repo.path)
        return now if "git-lock/git-lock-held" in now else None

    found = wait_for(checked, 20.0, "the detectors to check despite the lock (5 s default)")
    assert "unrecorded-commit/unrecorded" in found, found
    assert time.monotonic() - started < 15
    lock.unlink()
    wait_for(lambda: "git-lock/git-lock-held" not in codes(daemon, repo.path), 15.0,
             "the warning to go with the lock")
    daemon.stop()


def test_doctor_says_how_long_a_git_lock_has_been_held(tmp_path: Path) -> None:
    repo = GitWorkspace(tmp_path / "ws").init()
    repo.commit("base", {"README": "hello\n"})
    lock = repo.path / ".git" / "index.lock"
    lock.write_bytes(b"")
    old = time.time() - 120
    os.utime(lock, (old, old))
    env = daemon_env(tmp_path, tmp_path / "run" / "none.sock")
    done = run_storyd_cli("doctor", "--workspace", str(repo.path), env=env)
    out = done.stdout.decode()
    assert "a git lock has been held for 12" in out, out
    assert str(lock) in out, out
