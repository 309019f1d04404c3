"""Hostile workspaces (issue 24): the idle daemon's CPU, and its RSS after refused reads.

    .venv/bin/python bench/bench_faults.py                   # this work tree
    .venv/bin/python bench/bench_faults.py --src /tmp/old    # another tree's `daemon`
                                                             # (e.g. `git archive 467383b`)

Each scenario starts its own `storyd serve` on a temporary workspace, waits for its
warm-up, then measures it from /proc/<pid>/stat and /proc/<pid>/status:

    folders    N folders under `plans/`: idle CPU (share of one core) over the window
    link-out   `plans` a symlink to a folder outside with N folders: idle CPU
    oversize   20 `resume` queries of a 500 MB sparse state file: RSS before and after

Nothing here imports the project; `--src` is put first on the daemon's PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from socket_client import ask, wait_for_ping

STORY = "story-0049-0001"


def write_epic(workspace: Path, epic: str) -> None:
    folder = workspace / "plans" / f"epic-{epic}"
    folder.mkdir(parents=True, exist_ok=True)
    body = {"epic": epic, "stories": {STORY.replace("0049", epic): {"tasks": {
        "T1": {"status": "pending"}}}}}
    (folder / "execution-state.json").write_text(json.dumps(body), encoding="utf-8")


def many_folders(root: Path, count: int) -> None:
    for n in range(count):
        (root / f"d{n // 100:04d}" / f"e{n % 100:02d}").mkdir(parents=True, exist_ok=True)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Daemon:
    """One `storyd serve` child on a private socket and runtime folder."""

    def __init__(self, root: Path, workspace: Path, src: str) -> None:
        self.socket = str(root / "storyd.sock")
        env = dict(os.environ)
        for name in ("config", "runtime", "state"):
            (root / name).mkdir(mode=0o700, exist_ok=True)
        env.update(XDG_CONFIG_HOME=str(root / "config"), XDG_RUNTIME_DIR=str(root / "runtime"),
                   XDG_STATE_HOME=str(root / "state"), STORYD_SOCKET=self.socket,
                   PYTHONPATH=src + os.pathsep + env.get("PYTHONPATH", ""))
        code = "import sys; from storyd.cli import main; sys.exit(main())"
        self.log = open(root / "storyd.core.log", "wb")  # noqa: SIM115  (closed in stop)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, "serve", "--socket", self.socket,
             "--workspace", str(workspace)],
            env=env, cwd=root, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=self.log)
        if wait_for_ping(self.socket, 20.0, lambda: self.proc.poll() is None) is None:
            self.stop()
            raise SystemExit(f"storyd serve did not answer (see {root / 'storyd.core.log'})")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            warm = ask(self.socket, {"op": "stats"}).get("warm")
            if isinstance(warm, dict) and warm.get("warming") is False:
                break
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def idle_share(pid: int, window: float) -> float:
    before, started = cpu_seconds(pid), time.monotonic()
    time.sleep(window)
    return (cpu_seconds(pid) - before) / (time.monotonic() - started)


def scenario_folders(tmp: Path, src: str, folders: int, window: float) -> str:
    ws = tmp / "ws"
    write_epic(ws, "0049")
    many_folders(ws / "plans" / "deep", folders)
    daemon = Daemon(tmp, ws, src)
    try:
        return f"{idle_share(daemon.proc.pid, window):.0%} of a core"
    finally:
        daemon.stop()


def scenario_link_out(tmp: Path, src: str, folders: int, window: float) -> str:
    outside = tmp / "outside"
    many_folders(outside, folders)
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "plans").symlink_to(outside, target_is_directory=True)
    daemon = Daemon(tmp, ws, src)
    try:
        return f"{idle_share(daemon.proc.pid, window):.0%} of a core"
    finally:
        daemon.stop()


def scenario_oversize(tmp: Path, src: str, _folders: int, _window: float) -> str:
    ws = tmp / "ws"
    write_epic(ws, "0049")
    big = ws / "plans" / "epic-0050" / "execution-state.json"
    big.parent.mkdir(parents=True)
    with open(big, "wb") as handle:
        handle.truncate(500 * 1024 * 1024)
    daemon = Daemon(tmp, ws, src)
    try:
        before = rss_mib(daemon.proc.pid)
        for _ in range(20):
            ask(daemon.socket, {"op": "resume", "workspace": str(ws), "epic": "0050",
                                "story": "story-0050-0001"}, timeout=60)
        return f"RSS {before:.0f} -> {rss_mib(daemon.proc.pid):.0f} MiB"
    finally:
        daemon.stop()


SCENARIOS = {"folders": scenario_folders, "link-out": scenario_link_out,
             "oversize": scenario_oversize}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--src", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("--folders", type=int, default=9000)
    parser.add_argument("--window", type=float, default=5.0, help="idle window, seconds")
    args = parser.parse_args()
    print(f"src {args.src}; {args.folders} folders; idle window {args.window:g} s")
    print(f"| {'scenario':<10} | {'result':<26} |")
    print(f"| {'-' * 10} | {'-' * 26} |")
    for name, run in SCENARIOS.items():
        tmp = Path(tempfile.mkdtemp(prefix=f"storyd-faults-{name}-"))
        try:
            result = run(tmp, args.src, args.folders, args.window)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"| {name:<10} | {result:<26} |", flush=True)


if __name__ == "__main__":
    main()
