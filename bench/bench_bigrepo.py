"""The no-daemon hooks on a big repository, beside the demo's small one and a bare start.

    .venv/bin/python bench/bench_bigrepo.py --commits 50000 200000 [--files 3000]
        [--runs 10] [--installed VENV/bin] [--before OTHER/bin] [--keep DIR]

Builds, with `git fast-import`, a history of N commits over a few thousand files (each
commit changes one), checks it out, and puts storyd demo's workspace on top (its state
files and their commits at the tip); one more story in flight has DONE tasks naming
commits deep in the history (N/2 and N-10 commits below the demo's). Then times `storyd hook
session-start` and `stop` (Claude Code's payload, no daemon) beside `python -c pass`,
interleaved and shuffled each round, on the demo alone and on each big repository.
`--before BIN` times a second install in the same rounds (main's, for a before/after);
`--trace` prints, once per workspace, each git process a session-start runs and its
wall time (strace -f); `--commit-graph` writes the big repositories' commit-graph first
(what `git gc` leaves); `--deep-done` leaves the deep story all done, so the hooks
check only the demo's own commits near the tip. Medians and p90 in milliseconds, with
the load average.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_hooks import REPO, hook_workspace

BIN = Path(sys.executable).parent
_DEEP_STORY = "story-0049-0011"


def _fast_import_stream(commits: int, files: int) -> bytes:
    """A history of `commits` commits: the first adds `files` files, each later one
    changes one of them (round robin)."""
    out: list[bytes] = []
    when = 1_500_000_000
    who = b"big <big@storyd.invalid>"
    first = [b"commit refs/heads/main\nmark :1\n",
             b"committer %s %d +0000\ndata 7\ninitial\n" % (who, when)]  # fmt: skip
    for f in range(files):
        body = b"file %d\n" % f
        path = b"src/d%02d/f%05d.txt" % (f % 64, f)
        first.append(b"M 100644 inline %s\ndata %d\n%s" % (path, len(body), body))
    out.append(b"".join(first) + b"\n")
    for i in range(2, commits + 1):
        f = i % files
        body = b"file %d rev %d\n" % (f, i)
        message = b"change %d" % i
        out.append(
            b"commit refs/heads/main\nmark :%d\ncommitter %s %d +0000\ndata %d\n%s\n"
            b"M 100644 inline src/d%02d/f%05d.txt\ndata %d\n%s\n"
            % (i, who, when + i * 60, len(message), message, f % 64, f, len(body), body)
        )
    return b"".join(out)


def build_big(root: Path, commits: int, files: int, graph: bool = False,
              deep_done: bool = False) -> tuple[Path, dict[str, str]]:  # fmt: skip
    """A big repository under `root`, the demo workspace on top: (workspace, env)."""
    from storyd.cli.commands.demo import prepare

    ws, env = hook_workspace(root)  # the configuration; the workspace is made anew
    shutil.rmtree(ws)
    subprocess.run(["git", "init", "-q", "-b", "main", str(ws)], check=True)
    marks = root / "marks"
    subprocess.run(["git", "fast-import", "--quiet", f"--export-marks={marks}"], cwd=ws,
                   input=_fast_import_stream(commits, files), check=True)  # fmt: skip
    subprocess.run(["git", "checkout", "-q", "-f", "main"], cwd=ws, check=True)
    shas = dict(line.split() for line in marks.read_text().splitlines())
    prepare(str(REPO / "daemon" / "demo"), str(ws))  # `git init` keeps the history
    _deep_story(ws, [shas[f":{commits // 2}"], shas[f":{max(2, commits - 10)}"]], deep_done)
    if graph:  # what `git gc` leaves in most clones (gc.writeCommitGraph)
        subprocess.run(["git", "commit-graph", "write", "--reachable"], cwd=ws, check=True,
                       capture_output=True)  # fmt: skip
    return ws, env


def _deep_story(ws: Path, deep: list[str], done: bool) -> None:
    """One more story, first in the file, whose DONE tasks name commits deep in history:
    in flight (the hooks check it), or with `done` all done (the hooks skip it)."""
    state_path = ws / "plans" / "epic-0049" / "execution-state.json"
    state = orjson.loads(state_path.read_bytes())
    tasks = {f"TASK-0049-0011-{n:03d}": {"status": "DONE", "commitSha": sha,
                                         "completedAt": "2026-02-01T09:00:00Z"}
             for n, sha in enumerate(deep, 1)}  # fmt: skip
    if not done:
        tasks[f"TASK-0049-0011-{len(deep) + 1:03d}"] = {"status": "PENDING"}  # in flight
    state["stories"] = {_DEEP_STORY: {"title": "deep history", "tasks": tasks},
                        **state["stories"]}  # fmt: skip
    state_path.write_bytes(orjson.dumps(state, option=orjson.OPT_INDENT_2))


def _payload(ws: Path, event: str) -> bytes:
    base = {"session_id": "s", "transcript_path": "/tmp/t.jsonl", "cwd": str(ws)}
    extra = ({"hook_event_name": "SessionStart", "source": "startup"} if event == "session-start"
             else {"hook_event_name": "Stop", "stop_hook_active": False})  # fmt: skip
    return orjson.dumps({**base, **extra})


def _timed(argv: list[str], data: bytes, env: dict[str, str], cwd: Path) -> tuple[float, bytes]:
    began = time.perf_counter()
    done = subprocess.run(argv, input=data, env=env, cwd=cwd, capture_output=True, check=False)
    return time.perf_counter() - began, done.stdout


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return f"{statistics.median(values) * 1000:9.1f} | {p90 * 1000:8.1f}"


def bench(spaces: dict[str, tuple[Path, dict[str, str]]], installs: dict[str, Path],
          runs: int) -> None:  # fmt: skip
    """Every hook on every workspace with every install, and a bare start, interleaved."""
    first = next(iter(installs.values()))
    bare = "bare interpreter (python -c pass)"
    cases: dict[str, tuple[list[str], bytes, dict[str, str], Path]] = {}
    for space, (ws, env) in spaces.items():
        for event in ("session-start", "stop"):
            for label, where in installs.items():
                argv = [str(where / "storyd"), "hook", event]
                cases[f"{space} {event} {label}"] = (argv, _payload(ws, event), env, ws)
    cases[bare] = ([str(first / "python"), "-c", "pass"], b"", dict(os.environ), Path.cwd())
    outputs: dict[str, set[bytes]] = {name: set() for name in cases}
    for name, case in cases.items():  # untimed: config.toml's parse kept, caches warm
        outputs[name].add(_timed(*case)[1])
    rows: dict[str, list[float]] = {name: [] for name in cases}
    names = list(cases)
    order = random.Random(31)
    for _ in range(runs):
        order.shuffle(names)
        for name in names:
            took, out = _timed(*cases[name])
            rows[name].append(took)
            outputs[name].add(out)
    base = statistics.median(rows[bare])
    load = os.getloadavg()
    print(f"\nno-daemon hooks ({runs} runs each; load average {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f})")
    print(f"| {'workspace, hook, install':<44} | median ms |   p90 ms | x bare |")
    print(f"| {'-' * 44} | --------- | -------- | ------ |")
    for name, values in rows.items():
        ratio = statistics.median(values) / base
        print(f"| {name:<44} | {_ms(values)} | {ratio:6.2f} |")
    if len(installs) > 1:
        for space in spaces:
            for event in ("session-start", "stop"):
                seen = {outputs[f"{space} {event} {label}"].__iter__().__next__()
                        for label in installs}
                same = "same" if len(seen) == 1 else "DIFFERENT"
                print(f"{space} {event}: output {same} across installs")


_EXEC = re.compile(r'^(\d+) +([\d:.]+) execve\("[^"]*", \[(.*?)\]')
_EXIT = re.compile(r"^(\d+) +([\d:.]+) \+\+\+ (?:exited|killed)")


def trace(ws: Path, env: dict[str, str], storyd: Path, event: str) -> None:
    """Each git process the hook starts and its wall time (strace -f -tt)."""
    if shutil.which("strace") is None:
        print("(strace is not installed: no trace)")
        return
    with tempfile.NamedTemporaryFile(suffix=".strace") as log:
        argv = ["strace", "-f", "-tt", "-e", "trace=execve", "-o", log.name,
                str(storyd), "hook", event]  # fmt: skip
        subprocess.run(argv, input=_payload(ws, event), env=env, cwd=ws, capture_output=True,
                       check=False)  # fmt: skip
        began: dict[str, tuple[float, str]] = {}
        spans: list[tuple[float, float, str]] = []
        for line in Path(log.name).read_text().splitlines():
            if (m := _EXEC.match(line)) and "git" in m.group(3):
                began[m.group(1)] = (_secs(m.group(2)), m.group(3).replace('"', ""))
            elif (m := _EXIT.match(line)) and m.group(1) in began:
                start, what = began.pop(m.group(1))
                spans.append((start, _secs(m.group(2)) - start, what))
    print(f"\ngit processes of one `storyd hook {event}` on {ws.parent.name} (strace -f):")
    origin = spans[0][0] if spans else 0.0
    for start, took, what in sorted(spans):
        print(f"  +{(start - origin) * 1000:7.1f} ms  {took * 1000:7.1f} ms  {what[:110]}")


def _secs(clock: str) -> float:
    h, m, s = clock.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, nargs="+", default=[50_000, 200_000])
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--installed", metavar="BIN", help="the storyd and python to time "
                        "(a venv's bin/; default: this interpreter's)")
    parser.add_argument("--before", metavar="BIN", help="a second install timed in the same "
                        "rounds (main's, for a before/after)")
    parser.add_argument("--trace", action="store_true", help="print each git process of "
                        "one session-start and its wall time (strace -f)")
    parser.add_argument("--commit-graph", action="store_true", help="write each big "
                        "repository's commit-graph (git gc's default) before timing")
    parser.add_argument("--deep-done", action="store_true", help="the deep story all done "
                        "(the hooks skip it): only the demo's own commits are checked")
    parser.add_argument("--keep", metavar="DIR", help="build the workspaces in DIR and keep them")
    args = parser.parse_args()
    installs = {"after": Path(args.installed).resolve() if args.installed else BIN}
    if args.before:
        installs["before"] = Path(args.before).resolve()
    if len(installs) == 1:
        installs = {"": installs["after"]}
    top = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bigrepo-"))
    try:
        spaces = {"demo": hook_workspace(top / "demo")}
        for n in args.commits:
            began = time.perf_counter()
            spaces[f"{n // 1000}k"] = build_big(top / f"big{n}", n, args.files, args.commit_graph,
                                               args.deep_done)
            took = time.perf_counter() - began
            print(f"built {n} commits over {args.files} files in {took:.1f} s")
        if args.trace:
            for ws, env in spaces.values():
                for label, where in installs.items():
                    print(f"[{label or 'storyd'}]", end="")
                    trace(ws, env, where / "storyd", "session-start")
        bench(spaces, installs, args.runs)
    finally:
        if not args.keep:
            shutil.rmtree(top, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
