"""Other clients' latency while one unit is huge (issue 29): a probe's p50, p99 and max.

    .venv/bin/python bench/bench_probe.py [--storyd PATH] [--tasks 100000] [--seconds 10]

One `storyd serve` watches a workspace with a small epic (the probe's) and a huge one
(one story of --tasks tasks, the cap of one answer). A probe client sends the small
epic's `resume` on a persistent connection as fast as it can, while the load does one
of these at a time:

    idle      nothing
    epic      another client asks the huge epic's view (`epic` op) again and again
    rewrite   the huge state file is rewritten (temp file, rename) ten times a second

The load runs in a process of its own, so that its JSON work is not counted against
the daemon. Prints the probe's p50, p99 and max (ms) per load, how many probes took
over 50 and 100 ms (on a shared machine a single max is often the scheduler's, idle
included), and the daemon's RSS (MB) before and after. Issue 29's target: p99 under
50 ms and max under 100 ms while a huge file is read or rewritten.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from socket_client import ask, wait_for_ping

SMALL, HUGE = "0001", "0002"


def write_epic(ws: Path, epic: str, tasks: int) -> None:
    folder = ws / "plans" / f"epic-{epic}"
    folder.mkdir(parents=True, exist_ok=True)
    story = f"story-{epic}-0001"
    nodes = {f"TASK-{epic}-0001-{n:06d}": {"status": "DONE" if n < tasks // 2 else "PENDING"}
             for n in range(1, tasks + 1)}
    tmp = folder / "execution-state.json.tmp"
    tmp.write_text(json.dumps({"epic": epic, "stories": {story: {"tasks": nodes}}}),
                   encoding="utf-8")
    tmp.rename(folder / "execution-state.json")


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return 0


def probe(sock: str, ws: Path, seconds: float) -> list[float]:
    request = json.dumps({"op": "resume", "workspace": str(ws), "epic": SMALL,
                          "story": f"story-{SMALL}-0001"}).encode() + b"\n"
    times = []
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(sock)
        reader = conn.makefile("rb")
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            started = time.perf_counter()
            conn.sendall(request)
            reader.readline()
            times.append((time.perf_counter() - started) * 1000)
    return times


def load(kind: str, sock: str, ws: Path, tasks: int, stop: threading.Event) -> None:
    """Apply one load until `stop` (in a child process: see `loader`)."""
    while not stop.is_set():
        if kind == "epic":
            ask(sock, {"op": "epic", "workspace": str(ws), "epic": HUGE}, timeout=60)
        elif kind == "rewrite":
            write_epic(ws, HUGE, tasks)
            stop.wait(0.1)
        else:
            stop.wait(0.1)


def loader(kind: str, sock: str, ws: Path, tasks: int) -> subprocess.Popen[bytes]:
    """The load in its own process: in the probe's, its JSON work (dumping the huge
    file, parsing the view) would hold the probe's own interpreter lock and be counted
    as the daemon's latency."""
    return subprocess.Popen([sys.executable, __file__, "--load", kind, "--socket", sock,
                             "--workspace", str(ws), "--tasks", str(tasks)],
                            stdin=subprocess.PIPE)


def run_load(args: argparse.Namespace) -> None:
    """`--load KIND`: apply the load until stdin closes."""
    stop = threading.Event()
    worker = threading.Thread(target=load, args=(args.load, args.socket, Path(args.workspace),
                                                 args.tasks, stop))
    worker.start()
    sys.stdin.read()
    stop.set()
    worker.join()


def quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = Path(__file__).resolve().parent.parent
    parser.add_argument("--storyd", default=str(here / ".venv" / "bin" / "storyd"))
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--loads", default="idle,epic,rewrite",
                        help="which loads, in order (comma-separated; default all three)")
    parser.add_argument("--load", help=argparse.SUPPRESS)
    parser.add_argument("--socket", help=argparse.SUPPRESS)
    parser.add_argument("--workspace", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load:
        run_load(args)
        return
    print(f"storyd {args.storyd}; huge epic of {args.tasks:,} tasks; {args.seconds:g} s per "
          f"load; load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="storyd-probe-") as tmp:
        root = Path(tmp)
        ws = root / "ws"
        write_epic(ws, SMALL, 5)
        write_epic(ws, HUGE, args.tasks)
        env = {**os.environ, "XDG_CONFIG_HOME": str(root / "c"), "XDG_RUNTIME_DIR": str(root / "r"),
               "XDG_STATE_HOME": str(root / "s")}
        sock = str(root / "storyd.sock")
        daemon = subprocess.Popen([args.storyd, "serve", "--socket", sock, "--workspace", str(ws),
                                   "--staleness", "mtime"], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            if wait_for_ping(sock, 60.0, lambda: daemon.poll() is None) is None:
                sys.exit("storyd serve did not answer")
            time.sleep(2.0)
            print(f"RSS after the warm-up {rss(daemon.pid)} MB")
            print("| load | probes | p50 ms | p99 ms | max ms | over 50 ms | over 100 ms "
                  "| RSS after MB | load avg |")
            print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
            for kind in args.loads.split(","):
                child = loader(kind, sock, ws, args.tasks)
                times = sorted(probe(sock, ws, args.seconds))
                assert child.stdin is not None
                child.stdin.close()
                child.wait(120)
                time.sleep(2.0)
                over = [sum(1 for t in times if t > bound) for bound in (50, 100)]
                print(f"| {kind} | {len(times)} | {quantile(times, 0.5):.3f} | "
                      f"{quantile(times, 0.99):.3f} | {times[-1]:.1f} | {over[0]} | {over[1]} "
                      f"| {rss(daemon.pid)} | {os.getloadavg()[0]:.2f} |")
        finally:
            daemon.terminate()
            daemon.wait(20)


if __name__ == "__main__":
    main()
