#!/usr/bin/env python3
"""Issue 43: pay for the unit asked, not for the file. Each target against its yardstick.

    .venv/bin/python bench/bench_one_unit.py [--sizes 20,1000,3000,10000] [--rounds 3]

One epic of N stories x 5 tasks (bench/workloads.py, compact JSON, git mode), for each
size in one interleaved run (every round goes through every size and every row, so a
load on the shared machine falls on all of them alike):

- direct: `storyd resume --direct` for the middle story, whole process, against the
  yardstick `python -c "import orjson; orjson.loads(open(F, 'rb').read())"` in the same
  interpreter. Targets: within 1.5x at 10,000 stories, 1.2x at 20.
- daemon: `storyd serve` spawned with the workspace; the client pings until it listens
  (the socket bound and the early door open, server/door.py), then asks the middle story
  until the answer is the direct read's (first right, from spawn; target 250 ms at
  10,000 and within 1.3x of the direct read at every size), then asks other stories
  until the warm-up ends (slowest resume while warming; target 100 ms), then rewrites
  the file with one task of the middle story changed and asks until the answer shows
  it (write to visible; target 150 ms); RSS right after that, and once the daemon
  has given the write's freed heap back (the trim that follows the answer; target
  80 MB at 10,000, issue 18's bound).

storyd runs from bench_resume.py's non-editable venv (bench/results/.venv-bench), as an
installed storyd starts. The cached answer against the asyncio echo server is
bench/bench_echo.py (pinned, interleaved).
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

import daemonkit  # noqa: E402
from bench_resume import VENV, child_env, ensure_venv  # noqa: E402
from daemonkit import ask, rss_kb  # noqa: E402
from workloads import make_epic_workspace  # noqa: E402

EPIC = "0049"
WARM_LIMIT = 120.0  # seconds a daemon run may take to warm
BOUNDED = (  # rows with an absolute target at 10,000 stories: row, key, unit, bound
    ("daemon: slowest resume while warming", "warming", "ms", 100),
    ("daemon: write to visible", "visible", "ms", 150),
    ("daemon: RSS right after the write", "rss", "MB", None),
    ("daemon: RSS settled (the write's freed heap given back)", "settled", "MB", 80),
)
SETTLE_LIMIT = 10.0  # seconds to wait for the trim that follows a write


def timed(argv: list[str], env: dict[str, str]) -> float:
    """One process's wall time in ms (stdout discarded; a failure stops the bench)."""
    began = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return (time.perf_counter() - began) * 1000


class Size:
    """One workspace and its commands."""

    def __init__(self, root: Path, stories: int) -> None:
        self.stories = stories
        self.workspace, self.ids = make_epic_workspace(root, stories, 5, EPIC, compact=True)
        self.story = self.ids[len(self.ids) // 2]
        self.state = self.workspace / "plans" / f"epic-{EPIC}" / "execution-state.json"
        python = str(VENV / "bin" / "python")
        self.direct = [str(VENV / "bin" / "storyd"), "resume", "--direct", "--epic-id", EPIC,
                       "--story-id", self.story, "--workspace", str(self.workspace)]
        self.floor = [python, "-c", f"import orjson; orjson.loads(open({str(self.state)!r}, "
                                    "'rb').read())"]
        self.serve = [python, "-m", "storyd", "serve", "--workspace", str(self.workspace)]
        self.rows: dict[str, list[float]] = {}

    def add(self, row: str, value: float) -> None:
        self.rows.setdefault(row, []).append(value)

    def median(self, row: str) -> float:
        return statistics.median(self.rows[row])


def daemon_run(size: Size, env: dict[str, str], scratch: Path, want: dict[str, object]) -> None:
    """Spawn, first right answer, resumes while warming, write to visible, RSS."""
    shutil.rmtree(scratch, ignore_errors=True)
    (scratch / "run").mkdir(parents=True, mode=0o700)
    sock = str(scratch / "run" / "storyd.sock")
    env = {**env, "XDG_RUNTIME_DIR": str(scratch / "run"),
           "XDG_CONFIG_HOME": str(scratch / "config"), "XDG_STATE_HOME": str(scratch / "state")}
    request = {"op": "resume", "workspace": str(size.workspace), "epic": EPIC}
    spawned = time.perf_counter()
    daemon = subprocess.Popen([*size.serve, "--socket", sock], env=env,
                              stderr=subprocess.DEVNULL)
    text = size.state.read_bytes()
    try:
        while ask(sock, {"op": "ping"}) is None and time.perf_counter() - spawned < WARM_LIMIT:
            time.sleep(0.002)  # not listening yet
        size.add("listening", (time.perf_counter() - spawned) * 1000)
        first = None
        slowest = 0.0
        n = 0
        while time.perf_counter() - spawned < WARM_LIMIT:
            story = size.story if first is None else size.ids[(n * 7919) % len(size.ids)]
            began = time.perf_counter()
            got = ask(sock, {**request, "story": story})
            ended = time.perf_counter()
            if got is None:
                time.sleep(0.002)  # not listening yet
                continue
            n += 1
            slowest = max(slowest, ended - began)
            if first is None and got.get("envelope") == want:
                first = ended - spawned
            stats = ask(sock, {"op": "stats"})
            warm = stats.get("warm", {}) if stats else {}
            if first is not None and isinstance(warm, dict) and warm.get("warming") is False:
                break
        size.add("first", (first or float("nan")) * 1000)
        size.add("warming", slowest * 1000)
        size.add("visible", write_to_visible(size, sock, request))
        size.add("rss", rss_kb(daemon.pid) / 1024)
        size.add("settled", settled_rss(sock, daemon.pid))
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
        size.state.write_bytes(text)


def _heap(sock: str) -> dict[str, object]:
    stats = ask(sock, {"op": "stats"})
    heap = stats.get("heap") if stats else None
    return heap if isinstance(heap, dict) else {}


def settled_rss(sock: str, pid: int) -> float:
    """RSS in MB once the daemon has given back the heap the write's read freed: it
    trims after the answer (at most once a second, and at every verification tick), so
    a trim made after the answer was seen, and none due since (or SETTLE_LIMIT passed:
    NaN). A daemon that never read a big file (quietgc.BIG_BYTES) has none to give back:
    its RSS as it is."""
    trims = _heap(sock).get("trims", 0)
    deadline = time.perf_counter() + SETTLE_LIMIT
    while time.perf_counter() < deadline:
        heap = _heap(sock)
        if heap.get("bigReads") == 0 and heap.get("trimDue") is False:
            return rss_kb(pid) / 1024  # no big read ever: no heap to give back
        if heap.get("trimDue") is False and heap.get("trims", 0) > trims:  # type: ignore[operator]
            return rss_kb(pid) / 1024
        time.sleep(0.05)  # the trim comes with the next verification tick
    return float("nan")


def write_to_visible(size: Size, sock: str, request: dict[str, object]) -> float:
    """Rewrite the file (one task of the middle story done), ask until it shows: ms."""

    def one_task_done(state: dict[str, object]) -> None:
        tasks = state["stories"][size.story]["tasks"]  # type: ignore[index]
        tasks[list(tasks)[-1]] = {"status": "DONE", "commitSha": "f" * 40,
                                  "completedAt": "2026-01-01T00:00:00Z"}

    seen = daemonkit.write_to_visible(sock, {**request, "story": size.story}, size.state,
                                      one_task_done, limit=30.0)
    return float("nan") if seen is None else seen * 1000


def report(sizes: list[Size]) -> None:
    """The table: each target beside its yardstick and whether it is met."""
    print("| stories | row | figure (median) | yardstick | target | met |")
    print("|---:|---|---:|---:|---:|:-:|")
    for size in sizes:
        n = size.stories
        direct, floor = size.median("direct"), size.median("floor")
        ratio = direct / floor
        limit = 1.5 if n >= 10_000 else 1.2 if n <= 20 else None
        rows = [("direct read", f"{direct:.0f} ms", f"parse alone {floor:.0f} ms",
                 f"{ratio:.2f}x", f"<= {limit}x" if limit else "-",
                 "-" if limit is None else "yes" if ratio <= limit else "no")]
        first = size.median("first")
        rows.append(("daemon: first right answer from spawn", f"{first:.0f} ms",
                     f"direct {direct:.0f} ms", f"{first / direct:.2f}x",
                     "<= 1.3x" + (", <= 250 ms" if n >= 10_000 else ""),
                     "yes" if first <= 1.3 * direct and (n < 10_000 or first <= 250) else "no"))
        listening = size.median("listening")
        rows.append(("daemon: first right answer less spawn-to-listening",
                     f"{first - listening:.0f} ms", f"direct {direct:.0f} ms",
                     f"{(first - listening) / direct:.2f}x", "(<= 1.3x)",
                     "yes" if first - listening <= 1.3 * direct else "no"))
        for row, key, unit, bound in BOUNDED:
            got = size.median(key)
            target, met = (f"<= {bound} {unit}", "yes" if got <= bound else "no") \
                if n >= 10_000 and bound is not None else ("-", "-")
            spread = size.rows[key]  # the rounds' lowest and highest, beside the median
            rows.append((row, f"{got:.1f} {unit} ({min(spread):.1f}-{max(spread):.1f})"
                         if unit == "MB" else f"{got:.0f} {unit}", "", "", target, met))
        for row, figure, yardstick, got, target, met in rows:
            cell = f"{yardstick} ({got})" if got else yardstick
            print(f"| {n:,} | {row} | {figure} | {cell} | {target} | {met} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="20,1000,3000,10000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5, help="direct/floor pairs a round")
    args = parser.parse_args()
    print(f"bench venv: {ensure_venv()}")
    with tempfile.TemporaryDirectory(prefix="storyd-one-unit-") as tmp:
        root = Path(tmp)
        env = child_env(root)
        sizes = [Size(root / f"ws{n}", n) for n in map(int, args.sizes.split(","))]
        wants = {}
        for size in sizes:
            out = subprocess.run(size.direct, env=env, check=True, capture_output=True).stdout
            wants[size.stories] = json.loads(out)
            timed(size.floor, env)  # warm the page cache and the bytecode
        for _ in range(args.rounds):
            for size in sizes:
                for _ in range(args.runs):
                    size.add("direct", timed(size.direct, env))
                    size.add("floor", timed(size.floor, env))
                daemon_run(size, env, root / "daemon", wants[size.stories])
        print(f"{args.rounds} rounds x {args.runs} direct/floor pairs and one daemon run per "
              f"size, interleaved; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
        report(sizes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
