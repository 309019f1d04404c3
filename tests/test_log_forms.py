"""Issue 20 item 9: the daemon's log lines in the form their reader wants, through a real
`storyd serve`: journald priorities when stderr is the journal (JOURNAL_STREAM), human
lines on a terminal, JSON lines otherwise."""

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
from daemon_harness import DaemonProcess, wait_for

pytestmark = pytest.mark.slow

Spawn = Callable[..., DaemonProcess]


def test_journal_lines_carry_their_priority(spawn_daemon: Spawn, tmp_path: Path) -> None:
    missing = tmp_path / "not-there"
    proc = spawn_daemon([missing], start=False)
    proc.log_path.touch()  # the file its stderr goes to, standing in for the journal's stream
    st = os.stat(proc.log_path)
    proc.env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"

    def lines() -> list[bytes]:
        return proc.log_path.read_bytes().splitlines()

    proc.spawn()
    wait_for(lambda: any(b'"serving"' in line for line in lines()), 10, "the serving line")
    by_event = {}
    for line in lines():
        assert line[:1] == b"<" and line[2:4] == b">{", line  # 0.2: bare JSON, no priority
        event = orjson.loads(line[3:])
        by_event[event["event"]] = (int(line[1:2]), event["level"])
    assert by_event["workspace_skipped"] == (4, "warning")  # journalctl -p warning finds it
    assert by_event["serving"] == (6, "info")
    proc.stop()


def test_other_streams_get_json(spawn_daemon: Spawn, tmp_path: Path) -> None:
    proc = spawn_daemon([], start=False)
    st = os.stat(tmp_path)  # a JOURNAL_STREAM that is not stderr's is not believed
    proc.env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
    proc.start()
    assert proc.wait_log("serving")["level"] == "info"  # every line parses as JSON
    proc.stop()


def test_a_terminal_gets_human_lines(spawn_daemon: Spawn) -> None:
    proc = spawn_daemon([], start=False)
    master, slave = pty.openpty()
    env = {**proc.env, "TERM": "xterm", "NO_COLOR": "1"}
    child = subprocess.Popen(proc.argv(), stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                             env=env)
    os.close(slave)
    seen = b""
    selector = selectors.DefaultSelector()
    selector.register(master, selectors.EVENT_READ)
    try:
        deadline = time.monotonic() + 10
        while b"serving" not in seen and time.monotonic() < deadline:
            if selector.select(0.2):
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    break
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(10)
        selector.close()
        os.close(master)
    (line,) = [x for x in seen.splitlines() if b"serving" in x]
    assert not line.lstrip().startswith(b"{"), line  # 0.2: JSON on a terminal too
    assert b"[info     ] serving" in line and b"\x1b[" not in line, line
