"""Soak the consistency checkers (tests/consistency.py) against a real `storyd serve`.

    python bench/soak_consistency.py --operations 100000 [--seed 1] [--race-seconds 60]

Runs the sequential model-based history (random atomic, flock(1), same-size, torn
writes, deletes, story edits, git commit/amend/reset, unwatch/watch, SIGTERM and kill -9
restarts, queries from several clients) in rounds of --round operations on fresh
workspaces, then the concurrent writer/readers race, and prints operations, answers
checked and violations (with the first few). Exit 1 on any violation.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from consistency import EPIC, History, Report, race  # noqa: E402
from daemon_harness import DaemonProcess, daemon_env  # noqa: E402
from epic_state_harness import write_epic  # noqa: E402


def _daemon(root: Path, workspaces: list[Path]) -> DaemonProcess:
    sock = root / "run" / "storyd.sock"
    return DaemonProcess(root, socket_path=sock, workspaces=workspaces,
                         env=daemon_env(root, sock))


def soak(operations: int, seed: int, per_round: int, show_log: bool) -> Report:
    """The sequential history, `operations` in all, a fresh workspace every round."""
    total = Report()
    done = 0
    round_seed = seed
    while done < operations:
        with tempfile.TemporaryDirectory(prefix="storyd-soak-") as tmp:
            root = Path(tmp)
            ws = root / "ws"
            proc = _daemon(root, [])
            history = History(proc, ws, round_seed)
            history.prepare()
            proc.workspaces = [str(ws)]
            proc.start()
            history.connect()
            try:
                for _ in range(min(per_round, operations - done)):
                    history.step()
            finally:
                history.close()
                proc.close()
            report = history.report
            if report.violations and show_log:
                print(proc.log_text()[-20000:], file=sys.stderr)
        done += report.operations
        total.operations += report.operations
        total.answers += report.answers
        total.violations += [f"seed {round_seed}: {v}" for v in report.violations]
        for op, n in report.counts.items():
            total.counts[op] = total.counts.get(op, 0) + n
        round_seed += 1
        print(f"  round seed {round_seed - 1}: {report.line()}", flush=True)
        for violation in report.violations:
            print(f"    VIOLATION {violation}", flush=True)
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--operations", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--round", type=int, default=2000, help="operations per workspace")
    parser.add_argument("--race-seconds", type=float, default=30.0)
    parser.add_argument("--show-log", action="store_true", help="the daemon's log on a violation")
    args = parser.parse_args()
    started = time.monotonic()
    history = soak(args.operations, args.seed, args.round, args.show_log)
    with tempfile.TemporaryDirectory(prefix="storyd-race-") as tmp:
        root = Path(tmp)
        ws = root / "ws"
        write_epic(ws, EPIC, {})
        proc = _daemon(root, [ws])
        proc.start()
        try:
            raced = race(proc, ws, args.race_seconds)
        finally:
            proc.close()
    print()
    print("| checker | operations | answers checked | violations |")
    print("|---|---:|---:|---:|")
    print(f"| sequential model | {history.operations:,} | {history.answers:,} | "
          f"{len(history.violations)} |")
    print(f"| concurrent race ({args.race_seconds:g} s, 3 readers) | {raced.operations:,} | "
          f"{raced.answers:,} | {len(raced.violations)} |")
    print(f"\noperations by kind: {dict(sorted(history.counts.items()))}")
    print(f"wall time: {time.monotonic() - started:.0f} s")
    for violation in (history.violations + raced.violations)[:10]:
        print("VIOLATION", violation)
    return 1 if history.violations or raced.violations else 0


if __name__ == "__main__":
    os.environ.setdefault("STORYD_LOG_LEVEL", "info")
    sys.exit(main())
