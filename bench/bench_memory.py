#!/usr/bin/env python3
"""Where the daemon's memory goes: tracemalloc of an engine holding N stories.

    .venv/bin/python bench/bench_memory.py [--stories 10000] [--tasks 5] [--top 15]

Runs in-process with the project's venv (like bench_git.py): it builds the benchmark
workspace (bench/workloads.py), scans it with an Engine wired as `storyd serve` wires
it (detectors on, staleness mtime so that git's first-scan cost stays out), and prints
the RSS growth, the traced total and the top allocating lines.
"""

from __future__ import annotations

import argparse
import gc
import linecache
import sys
import tempfile
import tracemalloc
from pathlib import Path

from workloads import make_epic_workspace

REPO = Path(__file__).resolve().parent.parent


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return 0.0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--stories", type=int, default=10_000)
    parser.add_argument("--tasks", type=int, default=5)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    from storyd.api import answers
    from storyd.api.detection import build_detect
    from storyd.config import Config
    from storyd.server.engine import Engine

    scratch = tempfile.TemporaryDirectory(prefix="storyd-bench-memory-",
                                          ignore_cleanup_errors=True)
    with scratch as tmp:
        workspace, _ = make_epic_workspace(Path(tmp), args.stories, args.tasks, compact=True)
        detect, _runner = build_detect(Config(), "mtime")
        engine = Engine(answers.Options(staleness="mtime"), detect=detect)
        gc.collect()
        base = rss_mb()
        ws = engine.add_workspace(str(workspace))
        engine.scan(ws)
        gc.collect()
        grown = rss_mb() - base
        tracemalloc.start(1)
        engine.remove_workspace(str(workspace))
        ws = engine.add_workspace(str(workspace))  # again, traced, from a cold cache
        engine.scan(ws)
        gc.collect()
        snapshot = tracemalloc.take_snapshot()
    stats = snapshot.statistics("lineno")
    total = sum(s.size for s in stats)
    print(f"{args.stories:,} stories x {args.tasks} tasks: RSS growth {grown:.1f} MB "
          f"(untraced scan); traced live after a traced scan {total / 1e6:.1f} MB")
    print(f"{'MB':>7} {'blocks':>8}  line")
    for stat in stats[: args.top]:
        frame = stat.traceback[0]
        where = frame.filename.replace(str(REPO) + "/", "")
        code = linecache.getline(frame.filename, frame.lineno).strip()[:60]
        print(f"{stat.size / 1e6:7.2f} {stat.count:8d}  {where}:{frame.lineno}  {code}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
