"""`limits.max_state_bytes` holds for the direct read as for the daemon: a state file
over the default 8 MiB cap, with the cap raised in the configuration, answers the same
either way (the direct read once refused it, exit 65, asking to raise the very setting
the user had raised; `storyd-resume` with the daemon down failed so)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_harness import run_storyd_cli
from daemon_harness import daemon_env, write_config
from epic_state_harness import write_epic

EPIC, STORY = "0049", "story-0049-0001"
NINE_MIB = 9 * 1024 * 1024


def _big_epic(ws: Path) -> None:
    """Story 0001 small, and a second story whose notes make the file 9 MiB."""
    write_epic(ws, EPIC, {STORY: {"tasks": {"T1": {"status": "DONE"}, "T2": {"status": "PENDING"}}},
                          "story-0049-0002": {"notes": "x" * NINE_MIB, "tasks": {}}})  # fmt: skip


@pytest.mark.parametrize("raised", [True, False])
def test_the_direct_read_takes_the_configured_cap(tmp_path: Path, raised: bool) -> None:
    ws = tmp_path / "ws"
    _big_epic(ws)
    env = daemon_env(tmp_path, tmp_path / "run" / "storyd.sock")
    if raised:
        write_config(tmp_path, "[limits]\nmax_state_bytes = 16777216\n")
    done = run_storyd_cli("resume", "--direct", "--workspace", str(ws), "--epic-id", EPIC,
                          "--story-id", STORY, env=env)  # fmt: skip
    status = run_storyd_cli("status", "--direct", "--workspace", str(ws), env=env)
    if raised:
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["tasksPending"] == ["T2"], done.stdout
        assert status.returncode == 0 and b"UNREADABLE" not in status.stdout, status.stdout
    else:
        assert done.returncode == 65, done.stderr
        assert b"limits.max_state_bytes" in done.stderr


@pytest.mark.slow
def test_the_daemon_and_the_direct_read_answer_a_big_file_alike(
        tmp_path: Path, spawn_daemon: object) -> None:
    ws = tmp_path / "ws"
    _big_epic(ws)
    write_config(tmp_path, "[limits]\nmax_state_bytes = 16777216\n")
    daemon = spawn_daemon([ws])  # type: ignore[operator]
    argv = ("resume", "--workspace", str(ws), "--epic-id", EPIC, "--story-id", STORY)
    served = run_storyd_cli(*argv, env=daemon.env)
    direct = run_storyd_cli(argv[0], "--direct", *argv[1:], env=daemon.env)
    assert (served.returncode, direct.returncode) == (0, 0), served.stderr + direct.stderr
    assert served.stdout == direct.stdout
