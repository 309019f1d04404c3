#!/usr/bin/env python3
"""Time a git operation's drift event: from git's exit to the event on a subscriber.

    .venv/bin/python bench/bench_drift.py [--runs N]

One `storyd serve` (this venv's, as the tests start it) watches three real repositories
made in a temporary folder with fixed dates, and one subscriber reads its events on a
thread that stamps each line as it arrives. Each row repeats one operation N times
(default 20, after one unmeasured warm-up), undoing it between runs and waiting for the
undo's `resolved` events, so every run starts from the same state. Each operation runs
with a later committer date than the last, so every rewrite makes new commits, as a real
one does (the daemon has computed no patch id for them yet):

    amend        `git commit --amend -m ...` of the recorded tip: one drift
                 (unreachable, rewritten: now <sha>); undone by `git reset --hard <old>`
    reset        `git reset --hard HEAD~1` dropping a recorded commit: one drift
                 (unreachable); undone the same way
    rebase-50    `git rebase main` of a 50-commit branch whose commits five stories record:
                 50 drift events; the row times the last one (the first is within a few ms)
    restore      the undo of `amend` and `reset`: `git reset --hard <old>` to the resolved

Columns: `git` is the operation's own duration (median); `median`, `p99` and `max` are
from git's exit to the event, the part the daemon answers for, against the 200 ms target.
p99 is the nearest rank, so with 20 runs it is the largest but one. `from start` is the
median from the moment git was started. Needs `git` on PATH; imports the test harness
(tests/daemon_harness.py, tests/git_harness.py), so run it with the project's venv.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "tests"))

from daemon_harness import DaemonProcess, EventStream, daemon_env, write_config  # noqa: E402
from epic_state_harness import story_id, task_id  # noqa: E402
from git_harness import GitWorkspace  # noqa: E402

TARGET_MS = 200.0
STORY = story_id(13)
REBASE_STORIES = [story_id(n) for n in range(1, 6)]  # 5 stories x 10 tasks = 50 commits


class Sample:
    """One run: when git started and exited, and when the awaited event arrived."""

    __slots__ = ("arrived", "exited", "started")

    def __init__(self, started: float, exited: float, arrived: float) -> None:
        self.started = started
        self.exited = exited
        self.arrived = arrived


def _ms(seconds: float) -> float:
    return seconds * 1000


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


class Bench:
    """The daemon, its subscriber and the three repositories."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.single = self._single(root / "single")
        self.rebase = self._rebase(root / "rebase")
        write_config(root, "[notify]\ndesktop = false\n")
        sock = root / "run" / "storyd.sock"
        self.proc = DaemonProcess(root, socket_path=sock,
                                  workspaces=[self.single.path, self.rebase.path],
                                  env=daemon_env(root, sock))
        self.events: EventStream | None = None

    @staticmethod
    def _single(path: Path) -> GitWorkspace:
        repo = GitWorkspace(path).init()
        repo.commit("base", {"README": "hello\n"})
        repo.record({STORY: repo.tasks_commits(STORY, 2)})
        return repo

    @staticmethod
    def _rebase(path: Path) -> GitWorkspace:
        repo = GitWorkspace(path).init()
        repo.commit("base", {"README": "hello\n"})
        repo.git("checkout", "-q", "-b", "topic")
        recorded = {s: repo.tasks_commits(s, 10) for s in REBASE_STORIES}
        repo.git("checkout", "-q", "main")
        repo.commit("upstream work", {"upstream.txt": "u\n"})
        repo.git("checkout", "-q", "topic")
        repo.record(recorded)
        return repo

    def __enter__(self) -> Bench:
        self.proc.start()
        self.events = EventStream(self.proc)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.events is not None:
            self.events.close()
        self.proc.stop()

    def _timed(self, repo: GitWorkspace, args: tuple[str, ...], kind: str,
               count: int) -> Sample:
        assert self.events is not None
        workspace = str(repo.path.resolve())
        repo.clock += 60  # a new committer date: every rewrite makes commits never seen before
        mark = self.events.mark()
        started = time.monotonic()
        repo.git(*args)
        exited = time.monotonic()
        found = self.events.wait_count(
            lambda e: e["event"] == kind and e["workspace"] == workspace, count, start=mark,
            timeout=30, message=f"{count} {kind} after git {' '.join(args)}")
        return Sample(started, exited, max(stamp for stamp, _ in found))

    def amend(self) -> tuple[Sample, Sample]:
        """Amend the recorded tip (one drift), then restore it (one resolved)."""
        old = self.single.head()
        drift = self._timed(self.single,
                            ("commit", "-q", "--amend", "-m", f"{task_id(STORY, 2)} reworded"),
                            "drift", 1)
        return drift, self._timed(self.single, ("reset", "-q", "--hard", old), "resolved", 1)

    def reset(self) -> tuple[Sample, Sample]:
        """Drop the recorded tip (one drift), then restore it (one resolved)."""
        old = self.single.head()
        drift = self._timed(self.single, ("reset", "-q", "--hard", "HEAD~1"), "drift", 1)
        return drift, self._timed(self.single, ("reset", "-q", "--hard", old), "resolved", 1)

    def rebase50(self) -> Sample:
        """Rebase the 50 recorded commits (50 drifts), then put the branch back."""
        old = self.rebase.head()
        drift = self._timed(self.rebase, ("rebase", "-q", "main"), "drift", 50)
        self._timed(self.rebase, ("reset", "-q", "--hard", old), "resolved", 50)
        return drift


def measure(runs: int) -> tuple[dict[str, list[Sample]], dict[str, list[float]]]:
    """Every row's samples (one warm-up run of each operation is left out), and the
    durations of the daemon's git rechecks (from its log) per repository."""
    rows: dict[str, list[Sample]] = {"amend": [], "reset": [], "rebase-50": [], "restore": []}
    rechecks: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-drift-") as tmp, Bench(Path(tmp)) as bench:
        steps: list[tuple[str, Callable[[], object]]] = [
            ("amend", bench.amend), ("reset", bench.reset), ("rebase-50", bench.rebase50)]
        for _, step in steps:
            step()  # warm-up: cold git views and patch ids
        for _ in range(runs):
            for name, step in steps:
                result = step()
                if isinstance(result, tuple):
                    rows[name].append(result[0])
                    rows["restore"].append(result[1])
                else:
                    rows[name].append(result)  # type: ignore[arg-type]
        names = {str(bench.single.path.resolve()): "single", str(bench.rebase.path.resolve()):
                 "rebase-50"}
        for line in bench.proc.log_events():
            if line.get("event") == "git_recheck":
                where = names.get(str(line.get("workspace")), "?")
                rechecks.setdefault(where, []).append(float(line["duration_ms"]))  # type: ignore[arg-type]
    return rows, rechecks


def table(rows: dict[str, list[Sample]], rechecks: dict[str, list[float]]) -> str:
    """The printed table."""
    head = (f"{'operation':<11} {'n':>3} {'git':>8} {'median':>8} {'p99':>8} {'max':>8} "
            f"{'from start':>10}  vs {TARGET_MS:g} ms")
    lines = [head, "-" * len(head)]
    for name, samples in rows.items():
        after = [_ms(s.arrived - s.exited) for s in samples]
        whole = [_ms(s.arrived - s.started) for s in samples]
        git = [_ms(s.exited - s.started) for s in samples]
        p99 = _p99(after)
        verdict = "ok" if p99 <= TARGET_MS else "OVER"
        lines.append(f"{name:<11} {len(samples):>3} {statistics.median(git):>8.1f} "
                     f"{statistics.median(after):>8.1f} {p99:>8.1f} {max(after):>8.1f} "
                     f"{statistics.median(whole):>10.1f}  {verdict}")
    lines.append("(ms; median/p99/max from git's exit to the event on the subscriber)")
    for where, durations in sorted(rechecks.items()):
        lines.append(f"daemon git_recheck in {where}: n={len(durations)}, median "
                     f"{statistics.median(durations):.1f} ms, max {max(durations):.1f} ms")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the rows and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=20, help="measured runs per row")
    args = parser.parse_args(argv)
    started = time.monotonic()
    rows, rechecks = measure(args.runs)
    print(table(rows, rechecks))
    print(f"total {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
