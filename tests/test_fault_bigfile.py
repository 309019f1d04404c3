"""Item 6 of issue 24: a state file over the size limit must not inflate the daemon's RSS.

Each refused read used to keep its 64 MiB of chunks alive, referenced from the raised
error's traceback frame, until the cycle collector ran: 94 to 1,026 MB after 20 queries.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from daemon_harness import DaemonProcess
from epic_state_harness import epic_relpath, write_epic

pytestmark = pytest.mark.slow

Spawn = Callable[..., DaemonProcess]
BIG = 500 * 1024 * 1024


def rss_mib(pid: int) -> float:
    """Resident set size of a process, in MiB (from /proc/<pid>/status)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def test_oversized_state_file_costs_no_memory(tmp_path: Path, spawn_daemon: Spawn) -> None:
    ws = tmp_path / "ws"
    write_epic(ws, "0001", {"story-0001-0001": {"tasks": {}}})
    big = ws / epic_relpath("0002")
    big.parent.mkdir(parents=True)
    with open(big, "wb") as handle:
        handle.truncate(BIG)  # sparse: costs no disk
    daemon = spawn_daemon([ws])
    before = rss_mib(daemon.pid)
    for _ in range(20):
        answer = daemon.request(
            {"op": "resume", "workspace": str(ws), "epic": "0002", "story": "story-0002-0001"},
            timeout=30,
        )
        assert answer["ok"] is False, answer
        message = answer["error"]["message"]
        assert f"{BIG:,} bytes, larger than the 8,388,608-byte state-file cap" in message
        assert "limits.max_state_bytes" in message, message
    after = rss_mib(daemon.pid)
    # one refused read may briefly hold one chunk; twenty must not hold twenty
    assert after - before < 150, f"RSS {before:.0f} -> {after:.0f} MiB after 20 refused reads"
    assert os.path.getsize(big) == BIG
