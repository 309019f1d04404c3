#!/usr/bin/env python3
"""Issue 43, start-up: two installed storyd side by side (an old and a new one), each
spawned as `storyd serve`, interleaved round by round, beside the floor of any Python
daemon.

    python bench/bench_start.py --venv old=/path/venvA --venv new=/path/venvB \\
        [--sizes 20,1000,3000,10000] [--rounds 5]

For each venv and size (one epic of N stories x 5 tasks, compact JSON, git mode):
the direct read (`storyd resume --direct` for the middle story, whole process), the
same with the answer a socket gives (`--detail`: the detectors' findings and the next
task), and a daemon spawned on the workspace two ways:

- bound: `storyd serve --socket PATH` binds the socket itself; the client retries
  every 2 ms while nothing accepts.
- activated: the socket is bound and listening before the spawn and handed over as
  descriptor 3 (LISTEN_FDS), as systemd's storyd.socket does (`storyd install`): a
  client's first question waits in the backlog from the start. Spawn is of the `sh`
  that sets LISTEN_PID and execs, as systemd's fork does.

Each: spawn to the first `ping` answered (by the early door, server/door.py), and
spawn to the first right `resume` after it (the answer equal to the direct read's).

The floor (bench/floor_server.py under the first venv's interpreter, activated the same
way, asked the same two questions): a Python process that takes the socket and answers
a `resume` by reading and parsing the state file, nothing else. No daemon in Python
answers sooner.

Targets: first right answer within 250 ms at 10,000 stories, and within 1.3x of the
direct read at every size.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from daemonkit import ask  # noqa: E402
from workloads import make_epic_workspace  # noqa: E402

EPIC = "0049"
LIMIT = 60.0  # seconds a daemon may take to give its first right answer
ACTIVATE = 'export LISTEN_PID=$$; exec "$0" "$@" 3<&0 0</dev/null'  # systemd's hand-over


def first_answer(argv: list[str], sock: str, request: dict[str, object],
                 right: Callable[[dict[str, object]], bool], scratch: Path,
                 activated: bool) -> tuple[float, float]:
    """Spawn `argv` serving on `sock`: ms to listening, ms to the first right answer."""
    env = {**os.environ, "XDG_RUNTIME_DIR": str(scratch / "run"),
           "XDG_CONFIG_HOME": str(scratch / "config"), "XDG_STATE_HOME": str(scratch / "state")}
    env.pop("STORYD_HISTORY", None)  # its own history, as the direct reads have
    listener = None
    if activated:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(sock)
        listener.listen(64)
        env.update(LISTEN_FDS="1", LISTEN_FDNAMES="storyd.socket")
        argv = ["sh", "-c", ACTIVATE, *argv]
    spawned = time.perf_counter()
    daemon = subprocess.Popen(argv, env=env, stdin=listener, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    if listener is not None:
        listener.close()  # the daemon holds it now, as systemd's would
    try:
        while ask(sock, {"op": "ping"}) is None:
            if time.perf_counter() - spawned > LIMIT:
                raise SystemExit(f"{argv}: no ping answer in {LIMIT} s")
            time.sleep(0.002)
        listening = time.perf_counter() - spawned
        while True:
            got = ask(sock, request)
            if got is not None and right(got):
                return listening * 1000, (time.perf_counter() - spawned) * 1000
            if time.perf_counter() - spawned > LIMIT:
                raise SystemExit(f"{argv}: no right answer in {LIMIT} s: {got}")
            if got is None:
                time.sleep(0.002)
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)


def fresh(scratch: Path) -> str:
    """An empty scratch folder with a private run folder; the socket path in it."""
    shutil.rmtree(scratch, ignore_errors=True)
    (scratch / "run").mkdir(parents=True, mode=0o700)
    return str(scratch / "run" / "storyd.sock")


def storyd_first(venv: Path, workspace: Path, story: str, want: object, scratch: Path,
                 activated: bool) -> tuple[float, float]:
    """A storyd daemon's start: ms to listening, ms to the first right answer."""
    sock = fresh(scratch)
    argv = [str(venv / "bin" / "storyd"), "serve", "--workspace", str(workspace)]
    if not activated:
        argv += ["--socket", sock]
    request = {"op": "resume", "workspace": str(workspace), "epic": EPIC, "story": story}
    return first_answer(argv, sock, request, lambda got: got.get("envelope") == want,
                        scratch, activated)


def floor_first(python: Path, workspace: Path, stories: int, scratch: Path) -> float:
    """The floor server's start under `python` (a measured venv's: its site, not this
    process's, which may be an editable install's), activated: ms to its first
    `resume` answer."""
    sock = fresh(scratch)
    state = workspace / "plans" / f"epic-{EPIC}" / "execution-state.json"
    argv = [str(python), str(HERE / "floor_server.py"), str(state)]
    return first_answer(argv, sock, {"op": "resume"},
                        lambda got: got.get("stories") == stories, scratch, True)[1]


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
        floor_python = next(iter(venvs.values())) / "bin" / "python"
        # the direct reads' own empty config and state: no history database of this
        # machine's daemon read by --detail, no socket asked
        quiet = {**os.environ, "XDG_CONFIG_HOME": str(root / "direct" / "config"),
                 "XDG_STATE_HOME": str(root / "direct" / "state"),
                 "XDG_RUNTIME_DIR": str(root / "direct" / "run")}
        quiet.pop("STORYD_HISTORY", None)
        wants = {}
        for label, venv in venvs.items():
            for n, (workspace, story) in spaces.items():
                direct = [str(venv / "bin" / "storyd"), "resume", "--direct", "--epic-id",
                          EPIC, "--story-id", story, "--workspace", str(workspace)]
                out = subprocess.run(direct, check=True, capture_output=True,
                                     env=quiet).stdout
                wants[label, n] = direct, json.loads(out)
                subprocess.run([*direct, "--detail"], check=True, stdout=subprocess.DEVNULL,
                               env=quiet)
        for _ in range(args.rounds):
            for n, (workspace, story) in spaces.items():
                rows.setdefault(("floor", n, "first"), []).append(
                    floor_first(floor_python, workspace, n, root / "floor"))
                for label, venv in venvs.items():
                    direct, want = wants[label, n]
                    for argv, key in ((direct, "direct"), ([*direct, "--detail"], "detail")):
                        began = time.perf_counter()
                        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL,
                                       env=quiet)
                        rows.setdefault((label, n, key), []).append(
                            (time.perf_counter() - began) * 1000)
                    for activated, key in ((False, "bound"), (True, "activated")):
                        listening, first = storyd_first(venv, workspace, story, want,
                                                        root / "daemon", activated)
                        rows.setdefault((label, n, f"{key} ping"), []).append(listening)
                        rows.setdefault((label, n, key), []).append(first)
            load.append(os.getloadavg()[0])
    report(args.rounds, load, sizes, list(venvs), rows)
    return 0


def report(rounds: int, load: list[float], sizes: list[int], labels: list[str],
           rows: dict[tuple[str, int, str], list[float]]) -> None:
    """The side-by-side tables: medians; the first answers against the direct read,
    the direct read with findings (--detail) and the floor."""
    print(f"{rounds} rounds, interleaved; {os.cpu_count()} CPUs, "
          f"1-min load {min(load):.1f}-{max(load):.1f}; medians in ms")
    print("| stories | venv | direct | direct --detail | floor | ping, bound | "
          "ping, activated | first right, bound | first right, activated |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    ratios = []
    for n in sizes:
        floor = statistics.median(rows["floor", n, "first"])
        for label in labels:
            direct, detail, bound_ping, activated_ping, bound, activated = (
                statistics.median(rows[label, n, key])
                for key in ("direct", "detail", "bound ping", "activated ping", "bound",
                            "activated"))
            print(f"| {n:,} | {label} | {direct:.0f} | {detail:.0f} | {floor:.0f} | "
                  f"{bound_ping:.0f} | {activated_ping:.0f} | {bound:.0f} | "
                  f"{activated:.0f} |")
            for way, first in (("bound", bound), ("activated", activated)):
                ok = first <= 1.3 * direct and (n < 10_000 or first <= 250)
                ratios.append(f"| {n:,} | {label} | {way} | {first / direct:.2f}x | "
                              f"{first / detail:.2f}x | {first / floor:.2f}x | "
                              f"{floor / direct:.2f}x | {'yes' if ok else 'no'} |")
    print()
    print("Target: first right answer <= 1.3x of the direct read at every size, and <= 250 ms "
          "at 10,000 stories.")
    print("| stories | venv | spawned | first/direct | first/direct --detail | first/floor | "
          "floor/direct | met |")
    print("|---:|---|---|---:|---:|---:|---:|:-:|")
    print("\n".join(ratios))


if __name__ == "__main__":
    sys.exit(main())
