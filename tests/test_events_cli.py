"""Issue 20 item 8: `storyd events` through a real daemon: the severity of each finding
(coloured on a terminal), and a stream that outlives a daemon restart (`--once`: not)."""

from __future__ import annotations

import os
import pty
import selectors
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from cli_harness import STORYD, PipeLines
from daemon_harness import DaemonProcess
from epic_state_harness import EPIC, story_id, task_id, write_epic
from git_harness import GitWorkspace

pytestmark = pytest.mark.slow

Spawn = Callable[..., DaemonProcess]


def _missing(n: int) -> dict[str, object]:
    """Story n with one DONE task at a commit that does not exist (an error finding)."""
    story = story_id(n)
    return {story: {"tasks": {task_id(story, 1): {
        "status": "DONE", "commitSha": "0" * 40, "completedAt": "2026-01-01T12:00:00Z"}}}}


def _workspace(tmp_path: Path) -> GitWorkspace:
    repo = GitWorkspace(tmp_path / "ws").init()
    repo.commit("base", {"README": "hello\n"})
    write_epic(repo.path, EPIC, {story_id(1): {"tasks": {task_id(story_id(1), 1): {
        "status": "PENDING"}}}})
    return repo


def _events(proc: DaemonProcess, *args: str) -> tuple[subprocess.Popen[bytes], PipeLines]:
    child = subprocess.Popen([STORYD, "events", *args], env=proc.env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return child, PipeLines(child)


def _until(lines: PipeLines, word: bytes, timeout: float = 10.0) -> bytes:
    deadline = time.monotonic() + timeout
    while True:
        line = lines.readline(max(0.1, deadline - time.monotonic()))
        if word in line:
            return line


def _end(child: subprocess.Popen[bytes], lines: PipeLines) -> bytes:
    lines.close()
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=10)
    return err


def test_the_severity_is_shown(spawn_daemon: Spawn, tmp_path: Path) -> None:
    repo = _workspace(tmp_path)
    proc = spawn_daemon([repo.path])
    child, lines = _events(proc)
    try:
        assert lines.readline().startswith(b"subscribed at ")
        write_epic(repo.path, EPIC, _missing(1))
        line = _until(lines, b"drift").decode()
    finally:
        _end(child, lines)
    assert " drift    error   epic story-0049-0001  commit-in-history/missing: " in line, line


def test_colour_on_a_terminal(spawn_daemon: Spawn, tmp_path: Path) -> None:
    repo = _workspace(tmp_path)
    proc = spawn_daemon([repo.path])
    master, slave = pty.openpty()
    env = {k: v for k, v in proc.env.items() if k != "NO_COLOR"}
    child = subprocess.Popen([STORYD, "events"], env={**env, "TERM": "xterm"},
                             stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.DEVNULL)
    os.close(slave)
    seen = b""
    selector = selectors.DefaultSelector()
    selector.register(master, selectors.EVENT_READ)
    try:
        deadline = time.monotonic() + 10
        wrote = False
        while b"drift" not in seen and time.monotonic() < deadline:
            if selector.select(0.2):
                seen += os.read(master, 65536)
            if b"subscribed at" in seen and not wrote:
                write_epic(repo.path, EPIC, _missing(1))
                wrote = True
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(10)
        selector.close()
        os.close(master)
    assert b"\x1b[31mdrift    error  \x1b[0m" in seen, seen  # errors in red


def test_the_stream_outlives_a_restart(spawn_daemon: Spawn, tmp_path: Path) -> None:
    repo = _workspace(tmp_path)
    proc = spawn_daemon([repo.path])
    child, lines = _events(proc, "--json")
    try:
        first = orjson.loads(lines.readline())
        assert first["subscribed"] is True
        proc.stop()  # 0.2: the stream ended here, exit 0, silently
        proc.start()
        again = orjson.loads(_until(lines, b'"subscribed"'))
        assert again["freshInstance"] is True  # a new instance: the full list instead
        known = [u["unit"] for u in again["units"]]
        if not known and again.get("warm", {}).get("warming", True):
            # subscribed during the new daemon's warm-up: the list may be partial, and
            # each unit's first sight comes as a `changed` event (docs/protocol.md)
            known = [orjson.loads(_until(lines, b'"changed"'))["unit"]]
        assert known == [story_id(1)]
        write_epic(repo.path, EPIC, _missing(1))
        drift = orjson.loads(_until(lines, b'"drift"'))
        assert drift["clock"].split(":")[0] == again["clock"].split(":")[0]
        assert child.poll() is None
    finally:
        err = _end(child, lines)
    assert b"storyd events: the daemon went away; waiting for it" in err


def test_once_ends_with_the_daemon(spawn_daemon: Spawn, tmp_path: Path) -> None:
    repo = _workspace(tmp_path)
    proc = spawn_daemon([repo.path])
    child, lines = _events(proc, "--once")
    try:
        assert lines.readline().startswith(b"subscribed at ")
        proc.stop()
        assert child.wait(10) == 0
    finally:
        _end(child, lines)
