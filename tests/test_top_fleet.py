"""Issue 34: `storyd top --fleet --once`: every machine's units from NATS (issue 22's
reader) in the same frame, named machine:workspace:unit; a server that does not answer
is a clear error (69). Skips without nats-py or nats-server."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from cli_harness import STORYD
from daemon_harness import wait_for
from epic_state_harness import EPIC, story_id, task_id, write_epic
from git_harness import GitWorkspace
from nats_harness import NEEDS_NATS, fleet_config, free_port

pytestmark = [pytest.mark.slow, NEEDS_NATS]


def _workspace(path: Path, done: int) -> Path:
    repo = GitWorkspace(path).init()
    repo.commit("base", {"README": "x\n"})
    story = story_id(1)
    write_epic(repo.path, EPIC, {story: {"tasks": {
        task_id(story, n): {"status": "DONE" if n <= done else "PENDING"} for n in (1, 2)}}})
    return repo.path


def _top(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([STORYD, "top", "--fleet", "--once", *args], capture_output=True,
                          text=True, timeout=60, check=False,
                          env={**env, "COLUMNS": "120"})  # fmt: skip


def test_every_machine_in_one_frame(tmp_path: Path, spawn_daemon, nats_server) -> None:
    server = nats_server()
    procs = []
    for machine, done in (("alpha", 1), ("beta", 2)):
        cfg = tmp_path / f"{machine}.toml"
        cfg.write_text("[notify]\ndesktop = false\n\n" + fleet_config(server.url, machine))
        ws = _workspace(tmp_path / machine / "ws", done)
        procs.append(spawn_daemon([ws], args=["--config", str(cfg)],
                                  socket_path=tmp_path / f"{machine}.sock"))  # fmt: skip
    env = dict(os.environ)

    def frame() -> str | None:
        done = _top(env, "--url", server.url)
        assert done.returncode == 0, done.stderr
        return done.stdout if "2 units" in done.stdout else None

    text = wait_for(frame, 15, "both machines' units in the frame")
    assert "storyd top (fleet, 2 machines)" in text
    assert "alpha:ws:story-0049-0001" in text and "beta:ws:story-0049-0001" in text
    lines = text.splitlines()
    beta = next(x for x in lines if "beta:ws:" in x)
    assert "2/2" in beta and "all-done" in beta
    assert "\033" not in text


def test_no_server_is_a_clear_error() -> None:
    done = _top(dict(os.environ), "--url", f"nats://127.0.0.1:{free_port()}")
    assert done.returncode == 69
    assert done.stderr.startswith("storyd top: cannot reach nats://127.0.0.1:")
    assert "Traceback" not in done.stderr
