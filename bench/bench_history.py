"""Issue 33's costs: what recording history costs the query path and the write-to-event
latency, and how big the database gets.

    python bench/bench_history.py [--rounds 20] [--per-round 2000] [--writes 60]
                                  [--size-stories 10000] [--size-versions 100]

Two daemons watch one workspace (22 stories x 5 tasks), one recording history (the
default) and one with `[history] enabled = false`, pinned to the same CPU. A writer
rewrites the state file every 20 ms (a task flips, so every write is a version to
record) while one client alternates rounds of `resume` round trips between the two
(issue 33's target: no measurable difference). Then `--writes` single writes, 150 ms
apart, each timed from the rename to the `changed` event on both daemons' subscriptions
at once, the daemons free to run on any CPU (target: within 10%). Last, a database of
`--size-stories` units x `--size-versions` versions (8 tasks each, 40-digit shas, one
task changing per version) written through the writer's own functions, against
`[history] max_mb`'s default.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_echo import connect, pin, quantile, round_trips  # noqa: E402
from socket_client import encode, resume_request, wait_for_ping  # noqa: E402
from workloads import make_epic_workspace  # noqa: E402

STATE = "plans/epic-0049/execution-state.json"


def start(root: Path, name: str, workspace: Path, history: bool) -> tuple[subprocess.Popen, str]:
    """One daemon with its own config, state home and socket."""
    config = root / name / "config"
    (config / "storyd").mkdir(parents=True)
    (config / "storyd" / "config.toml").write_text(
        "" if history else "[history]\nenabled = false\n"
    )
    sock = str(root / name / "storyd.sock")
    env = {**os.environ, "XDG_CONFIG_HOME": str(config), "XDG_STATE_HOME": str(root / name),
           "STORYD_LOG_LEVEL": "warning"}  # fmt: skip
    storyd = Path(sys.executable).parent / "storyd"
    proc = subprocess.Popen([str(storyd), "serve", "--socket", sock, "--workspace",
                             str(workspace)], env=env, stderr=subprocess.DEVNULL)  # fmt: skip
    wait_for_ping(sock, 30.0, lambda: proc.poll() is None)
    return proc, sock


class Flipper:
    """Rewrites the state file (tmp + rename), flipping one task of `story` each time."""

    def __init__(self, workspace: Path, story: str) -> None:
        self.path = workspace / STATE
        self.document = json.loads(self.path.read_text())
        self.tasks = self.document["stories"][story]["tasks"]
        self.story = story
        self.n = 0

    def write(self) -> int:
        """One write; perf_counter_ns right after the rename."""
        keys = sorted(self.tasks) if isinstance(self.tasks, dict) else None
        node = self.tasks[keys[-1]] if keys else self.tasks[-1]
        node["status"] = "PENDING" if node.get("status") == "DONE" else "DONE"
        self.n += 1
        tmp = self.path.with_name(".bench.tmp")
        tmp.write_text(json.dumps(self.document))
        os.replace(tmp, self.path)
        return time.perf_counter_ns()


def query_path(socks: dict[str, str], request: bytes, flipper: Flipper, rounds: int,
               per_round: int) -> dict[str, list[int]]:
    """Interleaved rounds while a writer writes every 20 ms."""
    conns = {k: connect(v) for k, v in socks.items()}
    for c in conns.values():
        round_trips(c, request, 500)
    stop = threading.Event()

    def writer() -> None:
        while not stop.wait(0.02):
            flipper.write()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    samples: dict[str, list[int]] = {k: [] for k in conns}
    try:
        for r in range(rounds):
            order = list(conns) if r % 2 == 0 else list(reversed(conns))
            for label in order:
                samples[label] += round_trips(conns[label], request, per_round)
    finally:
        stop.set()
        thread.join()
        for c in conns.values():
            c.close()
    return samples


def write_to_event(socks: dict[str, str], flipper: Flipper, writes: int) -> dict[str, list[float]]:
    """Milliseconds from a rename to its `changed` event, on both daemons at once."""
    sel = selectors.DefaultSelector()
    buffers: dict[str, bytes] = {}
    for label, path in socks.items():
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        sock.sendall(encode({"op": "subscribe"}))
        sel.register(sock, selectors.EVENT_READ, label)
        buffers[label] = b""
    got: dict[str, list[float]] = {k: [] for k in socks}
    time.sleep(0.3)
    for _ in range(writes):
        for key, _ in sel.select(0):  # drop anything before this write
            key.fileobj.recv(1 << 20)  # type: ignore[union-attr]
        buffers = dict.fromkeys(buffers, b"")
        began = flipper.write()
        waiting = set(socks)
        deadline = time.monotonic() + 5
        while waiting and time.monotonic() < deadline:
            for key, _ in sel.select(0.5):
                label = key.data
                chunk = key.fileobj.recv(1 << 20)  # type: ignore[union-attr]
                now = time.perf_counter_ns()
                buffers[label] += chunk
                *lines, buffers[label] = buffers[label].split(b"\n")
                for line in lines:
                    event = json.loads(line) if line.startswith(b'{"event"') else {}
                    if (label in waiting and event.get("event") == "changed"
                            and event.get("unit") == flipper.story):
                        got[label].append((now - began) / 1e6)
                        waiting.discard(label)
        time.sleep(0.15)
    for key in list(sel.get_map().values()):
        key.fileobj.close()  # type: ignore[union-attr]
    return got


def database_size(stories: int, versions: int, folder: Path) -> tuple[float, float, int]:
    """(MB, seconds, versions) of a database written through the writer's functions."""
    from storyd.api import history_db, history_store
    from storyd.config.history import History

    path = str(folder / "size.sqlite3")
    writer = history_db.open_writer(path)
    conn = writer.conn
    rng = random.Random(33)
    began = time.perf_counter()
    conn.execute("BEGIN")
    for s in range(stories):
        key = ("/home/user/src/project", STATE, f"story-0049-{s:04d}")
        uid = history_store.unit_id(conn, key, "epic")
        tasks = [(f"TASK-0049-{s:04d}-{t:03d}", "PENDING", "pending", None, None)
                 for t in range(8)]  # fmt: skip
        for v in range(versions):
            t = v % 8
            if tasks[t][1] == "PENDING":
                tasks[t] = (tasks[t][0], "DONE", "done", f"{rng.getrandbits(160):040x}",
                            f"2026-11-25T{v // 60 % 24:02d}:{v % 60:02d}:00Z")  # fmt: skip
            else:
                tasks[t] = (tasks[t][0], "PENDING", "pending", None, None)
            done = sum(1 for x in tasks if x[2] == "done")
            summary = json.dumps({"done": done, "total": 8, "resumePoint": tasks[0][0],
                                  "findings": 0, "worst": None, "error": None})  # fmt: skip
            history_store.record(conn, uid, 1.7e9 + v, f"1a2b3c4d:{s * versions + v}",
                                 "daemon", "changed", list(tasks), summary)  # fmt: skip
        if s % 500 == 499:
            conn.execute("COMMIT")
            conn.execute("BEGIN")
    conn.execute("COMMIT")
    conn.execute("BEGIN IMMEDIATE")
    limits = History()
    pruned = history_store.prune(conn, limits.max_versions, 0.0, limits.max_mb << 20)
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    seconds = time.perf_counter() - began
    writer.close()
    return os.path.getsize(path) / 1e6, seconds, pruned


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--per-round", type=int, default=2000)
    parser.add_argument("--writes", type=int, default=60)
    parser.add_argument("--size-stories", type=int, default=10_000)
    parser.add_argument("--size-versions", type=int, default=100)
    args = parser.parse_args()
    print(f"load average: {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="storyd-history-") as tmp:
        root = Path(tmp)
        workspace, ids = make_epic_workspace(root / "ws", 22, 5)
        story = ids[len(ids) // 2]
        procs = {}
        socks = {}
        for label, history in (("history", True), ("no history", False)):
            procs[label], socks[label] = start(root, label.replace(" ", "-"), workspace, history)
        try:
            cpu = sorted(os.sched_getaffinity(0))[-1]
            for proc in procs.values():
                pin(proc.pid, cpu)
            flipper = Flipper(workspace, story)
            request = resume_request(str(workspace), "0049", story)
            samples = query_path(socks, request, flipper, args.rounds, args.per_round)
            print(f"\nquery path: {args.rounds} rounds x {args.per_round} resume round trips "
                  "per daemon, interleaved, a write every 20 ms")  # fmt: skip
            print("| daemon | p50 µs | p99 µs |\n|---|---:|---:|")
            for label, got in samples.items():
                print(f"| {label} | {quantile(got, 0.5):.1f} | {quantile(got, 0.99):.1f} |")
            ratio = quantile(samples["history"], 0.5) / quantile(samples["no history"], 0.5)
            print(f"p50 ratio history / no history: {ratio:.3f}")
            for proc in procs.values():  # each on any CPU: one write wakes both at once
                for task in os.listdir(f"/proc/{proc.pid}/task"):
                    os.sched_setaffinity(int(task), os.sched_getaffinity(0))
            latency = write_to_event(socks, flipper, args.writes)
            print(f"\nwrite to event: {args.writes} writes, both daemons subscribed")
            print("| daemon | events | median ms | p90 ms |\n|---|---:|---:|---:|")
            for label, got in latency.items():
                p90 = statistics.quantiles(got, n=10)[-1] if len(got) > 1 else float("nan")
                print(f"| {label} | {len(got)} | {statistics.median(got):.2f} | {p90:.2f} |")
            ratio = statistics.median(latency["history"]) / statistics.median(latency["no history"])
            print(f"median ratio history / no history: {ratio:.3f}")
            stats = json.loads(subprocess.run(
                [str(Path(sys.executable).parent / "storyd"), "stats", "--socket",
                 socks["history"]], capture_output=True, check=True).stdout)  # fmt: skip
            print(f"recorded: {stats['history']}")
        finally:
            for proc in procs.values():
                proc.terminate()
                proc.wait(10)
        from storyd.config.history import History

        mb, seconds, pruned = database_size(args.size_stories, args.size_versions, root)
        total = args.size_stories * args.size_versions
        print(f"\ndatabase: {args.size_stories} units x {args.size_versions} versions = "
              f"{total:,}: {mb:.1f} MB ({mb * 1e6 / total:.0f} bytes a version), written "
              f"in {seconds:.1f} s; [history] max_mb = {History().max_mb}; pruned {pruned}")
    print(f"load average: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
