#!/usr/bin/env python3
"""Time the git-aware detectors on a large repository and print a table.

    .venv/bin/python bench/bench_git.py [--quick] [--commits N] [--shas N]

The repository (50,000 commits on `main`, 200 more on `next` for fast-forwards) is
built once with `git fast-import` and cached in bench/results/ (git-ignored). Rows:

    cold            a new GitView, then commit-in-history on one unit with 1,000 DONE
                    tasks whose shas are spread over the whole history: cat-file start,
                    one `rev-list` walk, 1,000 lookups (target <= 1 s)
    warm            the same check again, nothing changed (all cached)
    fast-forward    `main` moves on by one commit, then the same check: one
                    `rev-list new ^old`, the rest from the caches (target <= 20 ms)
    memory          what the views hold after the cold check: tracemalloc's traced
                    bytes and the process's RSS growth

Cold rows are measured with git's commit-graph off (a fast-import repository has none)
and on (what `git gc` leaves in most clones).
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))

from storyd.core.model import DONE, Task, Unit  # noqa: E402
from storyd.detectors import Context  # noqa: E402
from storyd.detectors.gitview import GitView, close_views, git_context  # noqa: E402
from storyd.detectors.history import DETECTOR as HISTORY  # noqa: E402

RESULTS = BENCH / "results"
AHEAD = 200  # commits on `next` beyond `main`, one fast-forward each
EPOCH = 1767225600
COLD_TARGET_S = 1.0
FF_TARGET_MS = 20.0
FORMAT_VERSION = "1"  # bump when the generated history changes


def git(repo: Path, *args: str, input: bytes | None = None) -> str:
    """Run git in `repo`; raise on failure."""
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    done = subprocess.run(["git", *args], cwd=repo, env=env, input=input, capture_output=True,
                          check=False)
    if done.returncode:
        msg = f"git {' '.join(args)}: {done.stderr.decode(errors='replace')}"
        raise RuntimeError(msg)
    return done.stdout.decode().strip()


def fast_import_stream(commits: int) -> Iterator[bytes]:
    """`commits` linear commits on refs/heads/next, each changing one of 100 files."""
    for i in range(1, commits + 1):
        msg = f"commit {i}\n"
        body = f"line {i}\n"
        parent = f"from :{i - 1}\n" if i > 1 else ""
        yield (
            f"commit refs/heads/next\nmark :{i}\n"
            f"committer Bench <bench@example.com> {EPOCH + i * 60} +0000\n"
            f"data {len(msg)}\n{msg}{parent}"
            f"M 100644 inline f{i % 100}.txt\ndata {len(body)}\n{body}\n"
        ).encode()


def build_repo(commits: int) -> Path:
    """The cached benchmark repository, built when absent or stale."""
    path = RESULTS / f"git-{commits}"
    stamp = path / ".bench-stamp"
    want = f"{FORMAT_VERSION} {commits} {AHEAD}"
    if stamp.is_file() and stamp.read_text() == want:
        return path
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    began = time.monotonic()
    git(path, "fast-import", "--quiet", input=b"".join(fast_import_stream(commits + AHEAD)))
    git(path, "update-ref", "refs/heads/main", f"next~{AHEAD}")
    git(path, "reset", "-q", "--hard", "main")
    git(path, "commit-graph", "write", "--reachable")
    stamp.write_text(want)
    print(f"built {path} in {time.monotonic() - began:.1f} s")
    return path


def story(repo: Path, count: int, digits: int) -> Unit:
    """A unit with `count` DONE tasks whose shas are spread evenly over main's history."""
    history = git(repo, "rev-list", "main").split()
    step = max(1, len(history) // count)
    shas = history[::step][:count]
    tasks = tuple(
        Task(f"TASK-{i:05d}", "DONE", DONE, commit_sha=sha[:digits]) for i, sha in enumerate(shas)
    )
    return Unit("epic", "plans/epic-0001/execution-state.json", "story-0001-0001", tasks)


@contextmanager
def commit_graph(enabled: bool) -> Iterator[None]:
    """Run git with core.commitGraph set for the block (through git's env config)."""
    keys = ("GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update(dict(zip(keys, ("1", "core.commitGraph", str(enabled).lower()),
                               strict=True)))
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def check(local: dict[str, object], repo: Path, unit: Unit) -> float:
    """Seconds for one commit-in-history check through git_context; it must be clean."""
    began = time.perf_counter()
    context: Context = git_context(local, str(repo), unit, None, "git")
    found = HISTORY.check(unit, context)
    elapsed = time.perf_counter() - began
    if found:
        msg = f"unexpected findings: {found[:3]}"
        raise RuntimeError(msg)
    return elapsed


def cold(repo: Path, unit: Unit, runs: int) -> list[float]:
    """Each run: a new view, one check."""
    samples = []
    for _ in range(runs):
        local: dict[str, object] = {}
        samples.append(check(local, repo, unit))
        close_views(local)
    return samples


def fast_forwards(repo: Path, unit: Unit, runs: int) -> tuple[list[float], dict[str, int]]:
    """Move main on by one commit per run, then check; main is put back afterwards."""
    start = git(repo, "rev-parse", "main")
    local: dict[str, object] = {}
    check(local, repo, unit)
    samples = []
    try:
        for i in range(min(runs, AHEAD)):
            git(repo, "update-ref", "refs/heads/main", f"next~{AHEAD - i - 1}")
            samples.append(check(local, repo, unit))
        view = next(iter(local["storyd.gitviews"].values()))  # type: ignore[attr-defined]
        stats = dict(view.stats)
    finally:
        close_views(local)
        git(repo, "update-ref", "refs/heads/main", start)
    return samples, stats


def memory(repo: Path, unit: Unit) -> tuple[int, int]:
    """(traced bytes, RSS growth in bytes) held by a view after one cold check."""
    warm_up: dict[str, object] = {}
    git_context(warm_up, str(repo), unit, None, "git")  # warms the imports: not the view's
    close_views(warm_up)
    gc.collect()
    rss_before = rss()
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    local: dict[str, object] = {}
    check(local, repo, unit)
    gc.collect()
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    grown = rss() - rss_before
    view: GitView = next(iter(local["storyd.gitviews"].values()))  # type: ignore[attr-defined]
    assert view.stats["full_walks"] == 1
    close_views(local)
    return held - base, grown


def rss() -> int:
    """The process's resident set size in bytes (Linux)."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def ms(seconds: float) -> str:
    """Milliseconds, aligned."""
    return f"{seconds * 1000:9.2f} ms"


def row(label: str, samples: list[float], target: str, ok: bool | None) -> None:
    """One table row: median, max, target and verdict."""
    verdict = "" if ok is None else ("PASS" if ok else "FAIL")
    print(f"  {label:<50} {len(samples):>4} {ms(statistics.median(samples))} "
          f"{ms(max(samples))}  {target:<9} {verdict}")


def main(argv: list[str] | None = None) -> int:
    """Build (or reuse) the repository, measure, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    parser.add_argument("--commits", type=int, default=50_000)
    parser.add_argument("--shas", type=int, default=1_000)
    args = parser.parse_args(argv)
    runs = 3 if args.quick else 7
    ff_runs = 20 if args.quick else 100
    repo = build_repo(args.commits)
    full, short = story(repo, args.shas, 40), story(repo, args.shas, 7)
    with commit_graph(False):
        traced, grown = memory(repo, full)  # first, before other rows grow the heap
    results: list[tuple[str, list[float], str, Callable[[float], bool] | None]] = []
    for graph in (False, True):
        with commit_graph(graph):
            label = "commit-graph on" if graph else "no commit-graph"
            results.append((f"cold, {args.shas} full shas, {label}", cold(repo, full, runs),
                            f"<= {COLD_TARGET_S:g} s", lambda m: m <= COLD_TARGET_S))
            results.append((f"cold, {args.shas} 7-digit shas, {label}", cold(repo, short, runs),
                            f"<= {COLD_TARGET_S:g} s", lambda m: m <= COLD_TARGET_S))
    with commit_graph(False):
        local: dict[str, object] = {}
        check(local, repo, full)
        warm = [check(local, repo, full) for _ in range(runs * 5)]
        close_views(local)
        results.append((f"warm recheck, {args.shas} full shas, no change", warm, "", None))
        ff, stats = fast_forwards(repo, full, ff_runs)
        results.append((f"fast-forward by 1 commit, then recheck ({args.shas})", ff,
                        f"<= {FF_TARGET_MS:g} ms", lambda m: m * 1000 <= FF_TARGET_MS))
        short_ff, _ = fast_forwards(repo, short, ff_runs)
        results.append(("fast-forward by 1 commit, then recheck (7-digit)", short_ff,
                        f"<= {FF_TARGET_MS:g} ms", lambda m: m * 1000 <= FF_TARGET_MS))

    print(f"\n== commit-in-history on {args.commits:,} commits ({repo.relative_to(REPO)}), "
          f"git {git(repo, 'version').split()[-1]}, Python {sys.version.split()[0]}")
    print(f"  load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"  {'row':<50} {'n':>4} {'median':>12} {'max':>12}  {'target':<9} verdict")
    for label, samples, target, test in results:
        row(label, samples, target, None if test is None else test(statistics.median(samples)))
    print(f"  fast-forward runs: {stats['full_walks']} full walk, "
          f"{stats['incremental_walks']} incremental walks, {stats['walked']:,} commits read")
    print(f"  memory held by one view after a cold check: {traced / 2**20:.1f} MiB traced "
          f"(tracemalloc), {grown / 2**20:.1f} MiB RSS growth")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
