"""Issue 20 item 7: a progress line on stderr while long work runs, through the real CLI.

A real `flock(1)` writer holds the state file, so the read waits for as long as the
test wants: the line must appear on a terminal (a pty as stderr) while it waits, and
never when stderr is piped or --quiet is given.
"""

from __future__ import annotations

import os
import pty
import selectors
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_harness import STORYD
from daemon_harness import DaemonProcess
from epic_state_harness import epic_relpath, write_epic
from locks_harness import FlockWriter

Spawn = Callable[..., DaemonProcess]
STORY = "story-0049-0001"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        subprocess.run(["which", "flock"], capture_output=True, check=False).returncode != 0,
        reason="needs flock(1) from util-linux"),
]


def _ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    write_epic(ws, "0049", {STORY: {"tasks": {"T1": {"status": "DONE"},
                                             "T2": {"status": "PENDING"}}}})
    return ws


def _run_held(argv: list[str], ws: Path, env: dict[str, str], tmp_path: Path, *,
              tty: bool) -> tuple[int, bytes, bytes]:
    """Run `argv` while a writer holds the state file; release it once the progress line
    shows (tty) or after a second (piped). Exit code, stdout, stderr."""
    writer = FlockWriter(ws / epic_relpath("0049"), "-x", tmp_path / "fifo")
    master, slave = pty.openpty() if tty else (-1, -1)
    try:
        child = subprocess.Popen(argv, cwd=ws, env=env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE,
                                 stderr=slave if tty else subprocess.PIPE)
        err = b""
        if tty:
            os.close(slave)
            selector = selectors.DefaultSelector()
            selector.register(master, selectors.EVENT_READ)
            deadline = time.monotonic() + 10
            while b" s" not in err.split(b"\r")[-1] and time.monotonic() < deadline:
                if "--quiet" in argv and time.monotonic() > deadline - 9:
                    break  # quiet: a second of nothing is the answer
                if selector.select(0.1):
                    err += os.read(master, 4096)
            selector.close()
        else:
            time.sleep(1.0)  # nothing to wait for: the point is that nothing is printed
        writer.release()
        out, piped = child.communicate(timeout=30)
        if tty:
            try:
                while chunk := os.read(master, 4096):
                    err += chunk
            except OSError:
                pass
        return child.returncode, out, err if tty else piped
    finally:
        writer.kill()
        if tty:
            os.close(master)


@pytest.mark.parametrize("command", ["status", "check"])
def test_direct_work_shows_progress_on_a_terminal(command: str, tmp_path: Path,
                                                  isolated_env: dict[str, str]) -> None:
    ws = _ws(tmp_path)
    code, out, err = _run_held([STORYD, command, "--direct"], ws, isolated_env, tmp_path,
                               tty=True)
    assert code == 0, (out, err)
    assert STORY.encode() in out or b"1 units, 0 problems" in out
    assert f"\r\x1b[Kstoryd {command}: 0 units read, 0 s".encode() in err, err
    assert err.endswith(b"\r\x1b[K"), err  # cleared at the end


def test_piped_or_quiet_shows_nothing(tmp_path: Path, isolated_env: dict[str, str]) -> None:
    ws = _ws(tmp_path)
    code, _, err = _run_held([STORYD, "status", "--direct"], ws, isolated_env, tmp_path,
                             tty=False)
    assert (code, err) == (0, b"")
    again = tmp_path / "again"  # a folder for the second writer's FIFO
    again.mkdir()
    code, out, err = _run_held([STORYD, "status", "--direct", "--quiet"], ws, isolated_env,
                               again, tty=True)
    assert (code, err) == (0, b"") and STORY.encode() in out


def test_reconcile_shows_how_long(tmp_path: Path, isolated_env: dict[str, str]) -> None:
    ws = _ws(tmp_path)
    code, _, err = _run_held([STORYD, "reconcile", "--lock-timeout", "30"], ws, isolated_env,
                             tmp_path, tty=True)
    assert code in (0, 1), err
    assert b"\r\x1b[Kstoryd reconcile: planning: 0 s" in err, err


def test_the_first_status_of_a_workspace_through_the_daemon(spawn_daemon: Spawn,
                                                            tmp_path: Path) -> None:
    ws = _ws(tmp_path)
    proc = spawn_daemon([])
    code, out, err = _run_held([STORYD, "status", "--workspace", str(ws)], ws, proc.env,
                               tmp_path, tty=True)
    assert code == 0, (out, err)
    assert b"\r\x1b[Kstoryd status: 0 units read, 0 s" in err, err
    assert STORY.encode() in out
    assert b"reading it directly" not in err  # the daemon read it: the answer waited
    assert str(ws.resolve()) in proc.stats()["workspaces"]  # type: ignore[operator]
