"""SIGHUP applies every `limits.*` key, or says it needs a restart (issue 12, defect 3).

A real `storyd serve` with a config file, reloaded with `kill -HUP`; a real flock(1)
writer holds a state file's lock.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from daemon_harness import DaemonProcess, wait_for, write_config
from epic_state_harness import write_epic
from locks_harness import exclusively_locked

Spawn = Callable[..., DaemonProcess]
STORY = "story-0049-0001"
STORIES = {STORY: {"tasks": {"T1": {"status": "pending"}}}}
OLD = """auto_watch = false
[limits]
max_line_bytes = 65536
lock_timeout = 30.0
verify_interval = 60.0
settle_ms = 20
"""
NEW = """auto_watch = false
[limits]
max_line_bytes = 1024
lock_timeout = 0.2
verify_interval = 0.5
settle_ms = 5
connection_buffer = 65536
total_buffer = 1048576
idle_timeout = 120.0
max_state_bytes = 1048576
max_answer_bytes = 2097152
"""


def _reload(proc: DaemonProcess, tmp_path: Path, text: str) -> None:
    seen = len([e for e in proc.log_events() if e.get("event") == "reloaded"])
    write_config(tmp_path, text)
    proc.signal(signal.SIGHUP)
    wait_for(
        lambda: len([e for e in proc.log_events() if e.get("event") == "reloaded"]) > seen,
        10.0,
        "the reloaded log line",
    )


@pytest.fixture
def reloaded(spawn_daemon: Spawn, tmp_path: Path) -> DaemonProcess:
    write_config(tmp_path, OLD)
    proc = spawn_daemon()
    _reload(proc, tmp_path, NEW)
    return proc


def test_stats_shows_the_reloaded_limits(reloaded: DaemonProcess) -> None:
    assert reloaded.stats()["limits"] == {
        "max_workspaces": 64,
        "max_line_bytes": 1024,
        "lock_timeout": 0.2,
        "verify_interval": 0.5,
        "settle_ms": 5,
        "max_subscribers": 256,
        "subscriber_buffer": 1048576,
        "connection_buffer": 65536,
        "total_buffer": 1048576,
        "idle_timeout": 120.0,
        "git_lock_wait": 5.0,
        "max_state_bytes": 1048576,
        "max_answer_bytes": 2097152,
    }


@pytest.mark.slow
def test_a_line_over_the_new_max_line_bytes_is_refused(reloaded: DaemonProcess) -> None:
    padded = {"op": "ping", "pad": "x" * 2000}
    answer = reloaded.request(padded)
    assert answer["ok"] is False
    assert answer["error"] == {  # type: ignore[comparison-overlap]
        "code": 64,
        "name": "EX_USAGE",
        "message": "line longer than 1024 bytes; discarded",
    }
    assert reloaded.request({"op": "ping"})["ok"] is True


@pytest.mark.slow
def test_a_held_lock_times_out_after_the_new_lock_timeout(
    reloaded: DaemonProcess, tmp_path: Path
) -> None:
    """auto_watch is off: a query about another workspace is a direct read under the lock,
    bounded by lock_timeout. With the old 30 s the answer would not come in time."""
    other = tmp_path / "other"
    state = write_epic(other, "0049", STORIES)
    writer = subprocess.Popen(["flock", "-x", str(state), "sleep", "30"])
    try:
        wait_for(lambda: exclusively_locked(state), message="flock(1) to take the lock")
        began = time.monotonic()
        answer = reloaded.request(
            {"op": "resume", "workspace": str(other), "epic": "0049", "story": STORY},
            timeout=10.0,
        )
        waited = time.monotonic() - began
    finally:
        writer.kill()
        writer.wait()
    assert answer["ok"] is False
    assert answer["error"]["code"] == 75  # type: ignore[index]
    assert waited < 10.0


@pytest.mark.slow
def test_a_refresher_waiting_out_a_long_interval_takes_the_new_one() -> None:
    """In process: `configure` wakes a refresher that waits out 3600 s, and the new 0.05 s
    interval makes it verify (its tick) at once, not in an hour."""
    from storyd.api.answers import Options
    from storyd.server.engine import Engine
    from storyd.server.refresher import Refresher

    refresher = Refresher(Engine(Options(staleness="mtime")), verify_interval=3600.0)
    ticked = threading.Event()
    refresher.on_tick = ticked.set
    refresher.start()
    try:
        assert not ticked.wait(0.3)
        refresher.configure(settle=0.005, verify_interval=0.05)
        assert ticked.wait(5.0), "the refresher kept waiting out the old interval"
        assert refresher.settle == 0.005
    finally:
        refresher.stop()
        refresher.join(timeout=5)


@pytest.mark.slow
def test_keys_read_at_start_only_say_they_need_a_restart(
    spawn_daemon: Spawn, tmp_path: Path
) -> None:
    write_config(tmp_path, 'staleness = "git"\n')
    proc = spawn_daemon()
    _reload(proc, tmp_path, 'staleness = "mtime"\n[reconcile]\nauto = ["unrecorded"]\n')
    keys = sorted(
        str(e["key"]) for e in proc.log_events() if e.get("event") == "reload_needs_restart"
    )
    assert keys == ["reconcile.auto", "staleness"]
    assert proc.stats()["staleness"] == "git"
