"""`storyd status|list|check --workspace X` with a daemon that will not watch X.

The daemon may decline a workspace: `auto_watch = false`, or `limits.max_workspaces`
reached. The reporting commands then read X themselves (and say so on stderr) instead
of printing "no units found", and they never make the daemon watch X against its
configuration.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from cli_harness import run_storyd_cli
from daemon_harness import DaemonProcess, write_config
from epic_state_harness import write_epic

pytestmark = pytest.mark.slow

Spawn = Callable[..., DaemonProcess]
UNIT = "story-0007-0001"
COMMANDS = ("status", "list", "check")


@pytest.fixture
def other(tmp_path: Path) -> Path:
    """The workspace asked about: one epic unit with one pending task."""
    path = tmp_path / "other"
    write_epic(path, "0007", {UNIT: {"tasks": {"A": {"status": "pending"}}}})
    return path.resolve()


def _report(command: str, proc: DaemonProcess, workspace: Path) -> tuple[str, str, int]:
    done = run_storyd_cli(command, "--workspace", str(workspace), "--socket", str(proc.socket),
                          env=proc.env, cwd=workspace)
    return done.stdout.decode(), done.stderr.decode(), done.returncode


def _shows_the_unit(command: str, out: str) -> None:
    if command == "list":
        units = [orjson.loads(line) for line in out.splitlines()]
        assert [u["unit"] for u in units] == [UNIT], out
    elif command == "status":
        assert UNIT in out and "no units found" not in out, out
    else:
        assert out.endswith("1 units, 0 problems\n"), out


@pytest.mark.parametrize("command", COMMANDS)
def test_auto_watch_off_reads_directly_and_does_not_watch(
        spawn_daemon: Spawn, tmp_path: Path, other: Path, command: str) -> None:
    write_config(tmp_path, "auto_watch = false\n")
    proc = spawn_daemon()
    out, err, code = _report(command, proc, other)
    assert code == 0, err
    _shows_the_unit(command, out)
    assert proc.stats()["workspaces"] == [], "the CLI made the daemon watch against auto_watch"
    assert "auto_watch" in err and str(other) in err, err


@pytest.mark.parametrize("command", COMMANDS)
def test_at_the_workspace_cap_reads_directly(spawn_daemon: Spawn, tmp_path: Path,
                                             other: Path, command: str) -> None:
    first = tmp_path / "first"
    write_epic(first, "0001", {"story-0001-0001": {"tasks": {"A": {"status": "pending"}}}})
    write_config(tmp_path, "[limits]\nmax_workspaces = 1\n")
    proc = spawn_daemon([first])
    out, err, code = _report(command, proc, other)
    assert code == 0, err
    _shows_the_unit(command, out)
    assert "cap" in err and str(other) in err, err
    assert proc.stats()["workspaces"] == [str(first.resolve())]


def test_auto_watch_on_still_watches_and_answers_from_the_daemon(
        spawn_daemon: Spawn, other: Path) -> None:
    proc = spawn_daemon()
    done = run_storyd_cli("status", "--json", "--workspace", str(other), env=proc.env, cwd=other)
    assert done.returncode == 0, done.stderr
    answer = orjson.loads(done.stdout)
    assert answer["source"] == "daemon"
    assert [u["unit"] for u in answer["units"]] == [UNIT]
    assert done.stderr == b""
    assert proc.stats()["workspaces"] == [str(other)]
