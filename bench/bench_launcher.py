"""`storyd resume` start-up: our launcher vs pip's console-script wrapper vs a bare interpreter.

    .venv/bin/python bench/bench_launcher.py --runs 40
    .venv/bin/python bench/bench_launcher.py --runs 40 --vs OTHER/.venv/bin/python

Run it with the python of a regular (non-editable) install to see what users get: an
editable install's path finder imports `re` in `site`, for both scripts. `--vs` adds the
launcher of another install (an older checkout, `pip install .` into its own venv),
interleaved with the rest, so a change is measured against its baseline in one run.

Each run is a fresh process, interleaved (bare, pip wrapper, launcher) so load hits all
three alike; the table gives medians, p90 and the ratio to the bare interpreter start
(`python -c pass`, site included, as every script pays it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

PIP_WRAPPER = """# -*- coding: utf-8 -*-
import re
import sys
from storyd.cli import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""


def timed(argv: list[str], cwd: str) -> float:
    began = time.perf_counter()
    subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True)
    return time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--vs", metavar="PYTHON",
                        help="the python of another install, whose launcher is timed too")
    args = parser.parse_args()
    launcher = str(Path(sys.executable).parent / "storyd")
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "plans" / "epic-0049" / "execution-state.json"
        state.parent.mkdir(parents=True)
        state.write_bytes(orjson.dumps({"epic": "0049", "stories": {"story-0049-0001": {
            "tasks": {"TASK-0049-0001-001": {"status": "PENDING"}}}}}))
        wrapper = Path(tmp) / "pip-storyd"
        wrapper.write_text(PIP_WRAPPER, encoding="utf-8")
        resume = ["resume", "--direct", "--epic-id", "0049", "--story-id", "story-0049-0001"]
        commands = {
            "bare interpreter (python -c pass)": [sys.executable, "-c", "pass"],
            "pip console-script wrapper": [sys.executable, str(wrapper), *resume],
            "bin/storyd launcher": [sys.executable, launcher, *resume],
        }
        if args.vs:
            other = str(Path(args.vs).parent / "storyd")
            commands[f"bin/storyd launcher of {args.vs}"] = [args.vs, other, *resume]
        times: dict[str, list[float]] = {name: [] for name in commands}
        for argv in commands.values():
            timed(argv, tmp)  # warm the page cache
        for _ in range(args.runs):
            for name, argv in commands.items():
                times[name].append(timed(argv, tmp))
    print(f"load average: {os.getloadavg()}; {args.runs} runs each, interleaved")
    print("| command | median | p90 | ratio to bare |")
    print("|---|---|---|---|")
    bare = statistics.median(times["bare interpreter (python -c pass)"])
    for name, found in times.items():
        found.sort()
        median = statistics.median(found)
        p90 = found[int(len(found) * 0.9) - 1]
        print(f"| {name} | {median * 1000:.1f} ms | {p90 * 1000:.1f} ms | {median / bare:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
