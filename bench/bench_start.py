#!/usr/bin/env python3
"""Issue 43, start-up: two installed storyd side by side (an old and a new one), each
spawned as `storyd serve`, interleaved round by round.

    python bench/bench_start.py --venv old=/path/venvA --venv new=/path/venvB \\
        [--sizes 20,1000,3000,10000] [--rounds 5]

For each venv and size (one epic of N stories x 5 tasks, compact JSON, git mode):
the direct read (`storyd resume --direct` for the middle story, whole process), and a
daemon spawned on the workspace: spawn to listening (the first `ping` answered, by the
early door once the socket is bound, server/door.py; the client retries every 2 ms
while nothing accepts) and spawn to the first right
`resume` (the answer equal to the direct read's). Targets: first right answer within
250 ms at 10,000 stories, and within 1.3x of the direct read at every size.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from daemonkit import ask  # noqa: E402
from workloads import make_epic_workspace  # noqa: E402

EPIC = "0049"
LIMIT = 60.0  # seconds a daemon may take to give its first right answer


def first_answer(venv: Path, workspace: Path, story: str, want: object,
                 scratch: Path) -> tuple[float, float]:
    """Spawn `storyd serve`: ms to listening, ms to the first right answer."""
    shutil.rmtree(scratch, ignore_errors=True)
    (scratch / "run").mkdir(parents=True, mode=0o700)
    sock = str(scratch / "run" / "storyd.sock")
    env = {**os.environ, "XDG_RUNTIME_DIR": str(scratch / "run"),
           "XDG_CONFIG_HOME": str(scratch / "config"), "XDG_STATE_HOME": str(scratch / "state")}
    request = {"op": "resume", "workspace": str(workspace), "epic": EPIC, "story": story}
    spawned = time.perf_counter()
    daemon = subprocess.Popen([str(venv / "bin" / "storyd"), "serve", "--socket", sock,
                               "--workspace", str(workspace)], env=env,
                              stderr=subprocess.DEVNULL)
    try:
        while ask(sock, {"op": "ping"}) is None:
            if time.perf_counter() - spawned > LIMIT:
                raise SystemExit(f"{venv}: no ping answer in {LIMIT} s")
            time.sleep(0.002)
        listening = time.perf_counter() - spawned
        while True:
            got = ask(sock, request)
            if got is not None and got.get("envelope") == want:
                return listening * 1000, (time.perf_counter() - spawned) * 1000
            if time.perf_counter() - spawned > LIMIT:
                raise SystemExit(f"{venv}: no right answer in {LIMIT} s: {got}")
            if got is None:
                time.sleep(0.002)
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", action="append", required=True, help="label=path")
    parser.add_argument("--sizes", default="20,1000,3000,10000")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    venvs = {label: Path(path) for label, _, path in (v.partition("=") for v in args.venv)}
    sizes = [int(n) for n in args.sizes.split(",")]
    rows: dict[tuple[str, int, str], list[float]] = {}
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="storyd-start-") as tmp:
        root = Path(tmp)
        spaces = {}
        for n in sizes:
            workspace, ids = make_epic_workspace(root / f"ws{n}", n, 5, EPIC, compact=True)
            spaces[n] = workspace, ids[len(ids) // 2]
        wants = {}
        for label, venv in venvs.items():
            for n, (workspace, story) in spaces.items():
                direct = [str(venv / "bin" / "storyd"), "resume", "--direct", "--epic-id",
                          EPIC, "--story-id", story, "--workspace", str(workspace)]
                out = subprocess.run(direct, check=True, capture_output=True).stdout
                wants[label, n] = direct, json.loads(out)
        for _ in range(args.rounds):
            for n, (workspace, story) in spaces.items():
                for label, venv in venvs.items():
                    direct, want = wants[label, n]
                    began = time.perf_counter()
                    subprocess.run(direct, check=True, stdout=subprocess.DEVNULL)
                    rows.setdefault((label, n, "direct"), []).append(
                        (time.perf_counter() - began) * 1000)
                    listening, first = first_answer(venv, workspace, story, want,
                                                    root / "daemon")
                    rows.setdefault((label, n, "listening"), []).append(listening)
                    rows.setdefault((label, n, "first"), []).append(first)
            load.append(os.getloadavg()[0])
    print(f"{args.rounds} rounds, interleaved; {os.cpu_count()} CPUs, "
          f"1-min load {min(load):.1f}-{max(load):.1f}; medians in ms")
    print("| stories | venv | direct | listening | first right | first/direct | target | met |")
    print("|---:|---|---:|---:|---:|---:|---|:-:|")
    for n in sizes:
        for label in venvs:
            direct, listening, first = (statistics.median(rows[label, n, key])
                                        for key in ("direct", "listening", "first"))
            ok = first <= 1.3 * direct and (n < 10_000 or first <= 250)
            target = "<= 1.3x" + (", <= 250 ms" if n >= 10_000 else "")
            print(f"| {n:,} | {label} | {direct:.0f} | {listening:.0f} | {first:.0f} | "
                  f"{first / direct:.2f}x | {target} | {'yes' if ok else 'no'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
