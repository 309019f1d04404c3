"""Two installs' hooks without a daemon, interleaved: before and after, under one load.

    .venv/bin/python bench/bench_hooks_ab.py --runs 30 --installed A/bin --against B/bin \\
        [--event post-tool-use]

On a copy of storyd demo's workspace, each install's hook runs as `storyd install` from
that install writes it (its own `storyd.agents.installs.command`, through `sh -c`) and as
`storyd hook EVENT`, with Claude Code's, Cursor's and Gemini CLI's payloads
(bench/bench_hooks.py's), beside each install's bare `python -c pass`. Every round runs
all rows in a new shuffled order, so a heavy row's aftermath and the machine's load fall
on every row alike. Medians and p90 in milliseconds, `x bare` against the row's own
install's interpreter, and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_hooks import _ms, _payloads, _timed, hook_workspace


def _installed_command(bin_dir: Path, event: str, agent: str) -> str:
    """The hook command `storyd install` of the install in `bin_dir` writes."""
    code = ("import sys\nfrom storyd.agents.installs import command\n"
            "print(command(sys.argv[1], sys.argv[2], sys.argv[3]))")  # fmt: skip
    done = subprocess.run([str(bin_dir / "python"), "-c", code, str(bin_dir / "storyd"), event,
                           agent], capture_output=True, text=True, check=True)  # fmt: skip
    return done.stdout.strip()


def _rows(bins: dict[str, Path], ws: Path, event: str) -> dict[str, tuple[list[str], bytes]]:
    rows: dict[str, tuple[list[str], bytes]] = {}
    for label, bin_dir in bins.items():
        rows[f"{label}: bare python -c pass"] = ([str(bin_dir / "python"), "-c", "pass"], b"")
        for agent, events in _payloads(ws).items():
            data = events[event]
            flag = [] if agent == "claude" else ["--agent", agent]
            rows[f"{label}: {agent}, as installed"] = (
                ["sh", "-c", _installed_command(bin_dir, event, agent)], data)
            rows[f"{label}: {agent}, storyd hook"] = (
                [str(bin_dir / "storyd"), "hook", event, *flag], data)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--installed", metavar="BIN", required=True, help="a venv's bin/ (A)")
    parser.add_argument("--against", metavar="BIN", required=True, help="another's bin/ (B)")
    parser.add_argument("--event", default="post-tool-use",
                        choices=("session-start", "stop", "post-tool-use"))
    args = parser.parse_args()
    bins = {"A": Path(args.installed).resolve(), "B": Path(args.against).resolve()}
    for label, where in bins.items():
        print(f"{label}: {where}")
    with tempfile.TemporaryDirectory() as tmp:
        ws, env = hook_workspace(Path(tmp))
        rows = _rows(bins, ws, args.event)
        names = list(rows)
        times: dict[str, list[float]] = {name: [] for name in names}
        for argv, data in rows.values():  # untimed: config.toml's parse kept, records made
            _timed(argv, data, env)
        before = os.getloadavg()
        order = random.Random(31)
        for _ in range(args.runs):  # a new order each round: no row always follows another
            order.shuffle(names)
            for name in names:
                times[name].append(_timed(*rows[name], env))
        after = os.getloadavg()
    print(f"\n{args.event}, no daemon, {args.runs} rounds in shuffled order "
          f"(load average {before[0]:.2f} -> {after[0]:.2f})")
    print(f"| {'row':<30} | median ms |   p90 ms | x bare | B / A |")
    print(f"| {'-' * 30} | --------- | -------- | ------ | ----- |")
    for name in rows:
        label, _, what = name.partition(": ")
        bare = statistics.median(times[f"{label}: bare python -c pass"])
        other = f"{'B' if label == 'A' else 'A'}: {what}"
        ratio = statistics.median(times[f"B: {what}"]) / statistics.median(times[f"A: {what}"])
        shown = f"{ratio:5.2f}" if label == "B" and other in times else "     "
        print(f"| {name:<30} | {_ms(times[name])} | "
              f"{statistics.median(times[name]) / bare:6.2f} | {shown} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
