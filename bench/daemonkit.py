"""What the daemon benchmarks share: one request over the socket, a process's RSS, and
a write's time until `resume` shows it (bench_one_unit.py, bench_warm.py)."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["ask", "rss_kb", "write_to_visible"]


def ask(path: str, request: dict[str, object], timeout: float = 10.0) -> dict[str, object] | None:
    """One request on a fresh connection; None when nothing answers in time."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(path)
            sock.sendall(json.dumps(request).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(1 << 20)
                if not chunk:
                    return None
                data += chunk
            return json.loads(data)  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return None


def rss_kb(pid: int) -> int:
    """A process's resident set (VmRSS), in KB; 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def write_to_visible(sock: str, request: dict[str, object], state: Path,
                     change: Callable[[dict[str, object]], None], *, indent: int | None = None,
                     limit: float = 10.0) -> float | None:
    """Rewrite `state` with `change` applied (atomically, by a rename), then ask
    `request` until its envelope differs from the one before: seconds, or None."""
    before = None
    for _ in range(3):  # a busy daemon (a 10,000-story file in git mode) may miss one
        before = ask(sock, request, 5.0)
        if before is not None:
            break
    if before is None:
        return None
    data = json.loads(state.read_bytes())
    change(data)
    fresh = state.with_name(".bench.tmp")
    fresh.write_text(json.dumps(data, indent=indent) + "\n")
    began = time.perf_counter()
    os.replace(fresh, state)
    while time.perf_counter() - began < limit:
        got = ask(sock, request, 5.0)
        if got and got.get("envelope") != before.get("envelope"):
            return time.perf_counter() - began
    return None
