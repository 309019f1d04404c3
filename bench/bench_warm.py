"""Start-up and warm-up growth curve: time to first answer, time to warm, RSS.

Builds epic workspaces in git mode as a fresh commit leaves them (every story file's
mtime newer than its commit), starts `storyd serve` from a given source tree, and
measures from spawn: the first `ping` answer, the end of the warm-up (`stats` says
`warm.warming` is false; a tree without that field is warm when it first answers),
the resident set after warming, and a write to the state file until `resume` shows it.

    .venv/bin/python bench/bench_warm.py --tree before=/tmp/main-src --tree after=. \\
        --sizes 1000,3000,10000 --spaces 10x200,50x200 --timeout 240

    # issue 33: the same tree with history on (the default) and off, 3 rounds
    .venv/bin/python bench/bench_warm.py --tree on=. --tree off=. --history-off off \\
        --sizes 10000 --spaces '' --rounds 3 --timeout 120

`--tree NAME=DIR` runs `python -m storyd` with DIR on PYTHONPATH (export the
baseline with `git archive main | tar -x -C /tmp/main-src`). Runs are bounded by
`--timeout`; a run that overruns is reported as `>timeout`. Every run has its own
config and state folders (XDG_CONFIG_HOME, XDG_STATE_HOME): a fresh history database,
as a first start has; `--history-off NAME` writes `[history] enabled = false` for that
tree. `--rounds N` runs the trees in turn N times on the same workspaces (interleaved,
so a load on the machine falls on both) and ends with each column's median.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import daemonkit
from daemonkit import ask, rss_kb
from workloads import make_epic_workspace

PYTHON = sys.executable


def measure(tree: Path, workspaces: list[Path], story: tuple[Path, str], scratch: Path,
            timeout: float, history: bool = True) -> dict[str, object]:
    """One daemon run: first answer, warm, RSS, write-to-visible (seconds, KB)."""
    sock = str(scratch / "run" / "storyd.sock")
    config = scratch / "config" / "storyd"
    config.mkdir(parents=True)
    (config / "config.toml").write_text("" if history else "[history]\nenabled = false\n")
    env = {**os.environ, "PYTHONPATH": str(tree), "XDG_CONFIG_HOME": str(scratch / "config"),
           "XDG_RUNTIME_DIR": str(scratch / "run"), "XDG_STATE_HOME": str(scratch / "state")}
    argv = [PYTHON, "-m", "storyd", "serve", "--socket", sock]
    for ws in workspaces:
        argv += ["--workspace", str(ws)]
    began = time.monotonic()
    # cwd=tree: `python -m` puts the working directory first on sys.path, ahead of
    # PYTHONPATH, so run from anywhere else the daemon would import that tree instead.
    log = scratch / "serve.log"  # its lines up to warm: what a start costs the journal
    with open(log, "wb") as err:
        proc = subprocess.Popen(argv, env=env, cwd=tree, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err)
    result: dict[str, object] = {}
    try:
        first = None
        while time.monotonic() - began < timeout and proc.poll() is None:
            if ask(sock, {"op": "ping"}, 0.5) is not None:
                first = time.monotonic() - began
                break
            time.sleep(0.005)
        result["first"] = first
        warm = read = None
        while first is not None and time.monotonic() - began < timeout:
            stats = ask(sock, {"op": "stats"}, 5.0)
            state = stats.get("warm") if stats else None
            if read is None and stats is not None and (
                not isinstance(state, dict) or state["workspacesRead"] == state["workspaces"]
            ):
                read = time.monotonic() - began
            if stats is not None and (not isinstance(state, dict) or not state["warming"]):
                warm = time.monotonic() - began
                result["watches"] = stats.get("watchedDirs")
                break
            time.sleep(0.02)
        result["warm"] = warm
        result["read"] = read
        result["rss_kb"] = rss_kb(proc.pid) if warm is not None else None
        result["settled_kb"] = settled_rss(sock, proc.pid, timeout) if warm is not None else None
        result["log_lines"] = len(log.read_bytes().splitlines()) if warm is not None else None
        result["write"] = write_to_visible(sock, *story) if warm is not None else None
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return result


def write_to_visible(sock: str, workspace: Path, sid: str) -> float | None:
    """Rewrite the state file with one story's node changed; seconds until resume shows it."""
    state_path = next((workspace / "plans").glob("epic-*/execution-state.json"))
    epic = json.loads(state_path.read_bytes())["epicId"]

    def one_task_fewer(data: dict[str, object]) -> None:  # the envelope changes
        tasks = data["stories"][sid]["tasks"]  # type: ignore[index]
        tasks.pop(next(reversed(tasks)))

    request = {"op": "resume", "workspace": str(workspace), "epic": epic, "story": sid}
    seen = daemonkit.write_to_visible(sock, request, state_path, one_task_fewer, indent=2)
    if seen is None:
        print("  write not seen in 10 s", file=sys.stderr)
    return seen


def fmt(value: object, unit: str) -> str:
    if value is None:
        return "timeout"
    if unit == "ms":
        return f"{float(value) * 1000:.0f} ms"  # type: ignore[arg-type]
    if unit == "s":
        return f"{float(value):.2f} s"  # type: ignore[arg-type]
    if unit == "lines":
        return f"{int(value):,}"  # type: ignore[call-overload]
    return f"{int(value) / 1024:.0f} MB"  # type: ignore[call-overload]


def _max_watches() -> str:
    try:
        with open("/proc/sys/fs/inotify/max_user_watches", encoding="ascii") as limit:
            return limit.read().strip()
    except OSError:
        return "unknown"


def settled_rss(sock: str, pid: int, timeout: float) -> int | None:
    """RSS once the history writer has written what the warm-up queued (at once
    with history off); None if it never drains within `timeout`."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        stats = ask(sock, {"op": "stats"}, 5.0) or {}
        history = stats.get("history")
        if not isinstance(history, dict) or not history.get("queued"):
            return rss_kb(pid)
        time.sleep(0.05)
    return None


def _row(shape: str, name: str, found: dict[str, object]) -> str:
    return (f"| {shape} | {name} | {fmt(found['first'], 'ms')} | "
            f"{fmt(found['read'], 's')} | {fmt(found['warm'], 's')} | "
            f"{fmt(found['rss_kb'], 'kb')} | {fmt(found['settled_kb'], 'kb')} | "
            f"{fmt(found['write'], 'ms')} | {found.get('watches', '-')} | "
            f"{fmt(found['log_lines'], 'lines')} |")


def _median(runs: list[dict[str, object]]) -> dict[str, object]:
    """Each column's median over the runs that measured it (None: none did)."""
    out: dict[str, object] = {}
    for column in ("first", "read", "warm", "rss_kb", "settled_kb", "write", "log_lines",
                   "watches"):
        values = [r[column] for r in runs if isinstance(r.get(column), (int, float))]
        out[column] = statistics.median(values) if values else None  # type: ignore[type-var]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, help="NAME=DIR")
    parser.add_argument("--sizes", default="1000,3000,10000")
    parser.add_argument("--spaces", default="10x200,50x200")
    parser.add_argument("--timeout", type=float, default=240.0)
    parser.add_argument("--skip", action="append", default=[],
                        help="NAME:SHAPE to leave out (e.g. before:10000)")
    parser.add_argument("--history-off", action="append", default=[], metavar="NAME",
                        help="run tree NAME with [history] enabled = false")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run the trees in turn this many times (medians at the end)")
    args = parser.parse_args()
    trees = [(name, Path(d).resolve()) for name, _, d in (t.partition("=") for t in args.tree)]
    shapes = [(1, int(s)) for s in args.sizes.split(",") if s]
    for space in (s for s in args.spaces.split(",") if s):
        count, _, stories = space.partition("x")
        shapes.append((int(count), int(stories)))
    print(f"load average before: {os.getloadavg()}", flush=True)
    print(f"inotify budget (fs.inotify.max_user_watches): {_max_watches()}")
    header = ("| stories | daemon | first answer | envelopes cached | detectors done (warm) "
              "| RSS | RSS, history written | write-to-visible | watched dirs | log lines |\n"
              "|---|---|---|---|---|---|---|---|---|---|")
    print(header)
    runs: dict[tuple[str, str], list[dict[str, object]]] = {}
    for count, stories in shapes:
        shape = f"{count}x{stories}" if count > 1 else str(stories)
        root = Path(tempfile.mkdtemp(prefix="storyd-warm-"))
        try:
            spaces = []
            ids = []
            for index in range(count):
                ws, sids = make_epic_workspace(root / f"w{index}", stories, 4)
                spaces.append(ws)
                ids.append(sids)
            time.sleep(1.1)  # the files' ctime is now before any daemon's status pass
            for _round in range(args.rounds):
                for name, tree in trees:
                    if f"{name}:{shape}" in args.skip:
                        print(f"| {shape} | {name} | skipped | | | | | | |", flush=True)
                        continue
                    scratch = Path(tempfile.mkdtemp(prefix="storyd-run-", dir=root))
                    (scratch / "run").mkdir(mode=0o700)
                    # each run takes a task off a story of its own (the workspace is shared)
                    run = len(runs.get((shape, name), [])) * len(trees) + trees.index((name, tree))
                    story = (spaces[0], ids[0][(len(ids[0]) // 3 + run) % len(ids[0])])
                    found = measure(tree, spaces, story, scratch, args.timeout,
                                    history=name not in args.history_off)  # fmt: skip
                    runs.setdefault((shape, name), []).append(found)
                    print(_row(shape, name, found), flush=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    if args.rounds > 1:
        print(f"\nmedians of {args.rounds} rounds:\n{header}")
        for (shape, name), found in runs.items():
            print(_row(shape, name, _median(found)))
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
