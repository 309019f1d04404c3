#!/usr/bin/env python3
"""Time the fleet (issue 22): publish throughput, `fleet status`, local queries meanwhile.

    .venv/bin/python bench/bench_fleet.py [--machines 50] [--units 2000] [--seconds 10]

Needs nats-server on PATH and nats-py (pip install -e '.[fleet]'). Everything runs on a
local `nats-server -js` with a temporary store:

1. publish: `--machines` Publishers (daemon/fleet/publisher.py, the daemon's own code,
   each with its thread and asyncio loop, all in this one process) connect and publish
   `--units` summaries each (a reconnect's re-publish), then 100 events each.
2. fleet status: `storyd fleet status --json` and the text screen over that bucket,
   median of 3 runs, in a fresh process each (what a user waits for).
3. local queries: a real `storyd serve` on a 2,000-story workspace answers `resume`
   on one persistent connection while a writer rewrites its state file (2,000
   changed events each time); without [fleet], with [fleet] publishing, and with
   [fleet] while the server is down. p50 / p99 / max of each.
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
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from socket_client import ask, resume_request, wait_for_ping  # noqa: E402
from workloads import make_epic_workspace  # noqa: E402

STORYD = str(Path(sys.executable).parent / "storyd")
EPIC = "0049"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Server:
    def __init__(self, root: Path) -> None:
        self.port = free_port()
        self.store = root / "nats"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["nats-server", "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(self.store)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        sys.exit("nats-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None


def synthetic(machine: int, units: int) -> list[dict[str, object]]:
    """Engine-shaped summaries (what `engine.summaries(detail=True)` returns)."""
    out = []
    for n in range(units):
        epic = f"{n // 100:04d}"
        out.append({
            "epic": epic, "story": f"story-{epic}-{n % 100:04d}",
            "workspace": f"/home/dev{machine}/src/app", "format": "epic",
            "stateFile": f"plans/epic-{epic}/execution-state.json",
            "unit": f"story-{epic}-{n % 100:04d}", "done": n % 9, "total": 8,
            "resumePoint": "all-done" if n % 9 == 8 else f"phase-1-task-{n % 9 + 1}",
            "findings": n % 3, "worst": "warning" if n % 3 else None, "generation": n + 1,
            "error": None,
            "findingList": [{"detector": "git", "code": "commit-missing"}] * (n % 3),
        })
    return out


def publish(url: str, machines: int, units: int) -> dict[str, float]:
    from storyd.fleet.config import Fleet
    from storyd.fleet.publisher import Publisher

    class Quiet:
        def __getattr__(self, _name: str):
            return lambda *a, **k: None

    pubs = []
    began = time.perf_counter()
    for m in range(machines):
        data = synthetic(m, units)
        pub = Publisher(Fleet(url=url, machine=f"m{m:03d}", heartbeat=30.0, backlog=100_000),
                        instance=f"{m:08x}", current=lambda data=data: data, log=Quiet(),
                        version="bench")
        pub.start()
        pubs.append(pub)
    total = machines * units
    while sum(p.counters["summaries"] for p in pubs) < total:
        time.sleep(0.02)
    kv_s = time.perf_counter() - began
    began = time.perf_counter()
    for m, pub in enumerate(pubs):
        for n in range(100):
            pub.offer({"event": "drift", "clock": f"x:{n}", "workspace": f"/home/dev{m}/src/app",
                       "stateFile": "plans/epic-0000/execution-state.json",
                       "unit": f"story-0000-{n:04d}", "format": "epic",
                       "finding": {"detector": "git", "code": "commit-missing",
                                   "severity": "warning", "task": "TASK-1",
                                   "message": "commit aaaaaaa is not in the history"}})
    while sum(p.counters["events"] for p in pubs) < machines * 100:
        time.sleep(0.02)
    ev_s = time.perf_counter() - began
    for pub in pubs:
        pub.close()
    return {"units": total, "kv_s": kv_s, "events": machines * 100, "events_s": ev_s}


def fleet_status(url: str) -> dict[str, float]:
    times: dict[str, list[float]] = {"json": [], "text": []}
    size = 0
    for _ in range(3):
        for kind in ("json", "text"):
            began = time.perf_counter()
            done = subprocess.run([STORYD, "fleet", "status", "--url", url,
                                   *(["--json"] if kind == "json" else [])],
                                  capture_output=True, check=True)
            times[kind].append(time.perf_counter() - began)
            if kind == "json":
                size = len(json.loads(done.stdout)["units"])
    return {"units": size, "json_s": statistics.median(times["json"]),
            "text_s": statistics.median(times["text"])}


def churn(state: Path, stop: threading.Event, counter: list[int], stories: int) -> None:
    """Rewrite the state file, `stories` stories' last task flipped, until told to stop."""
    data = json.loads(state.read_text())
    flip = False
    while not stop.is_set():
        flip = not flip
        for story in list(data["stories"].values())[:stories]:
            last = list(story["tasks"])[-1]
            story["tasks"][last]["status"] = "done" if flip else "pending"
        tmp = state.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        os.replace(tmp, state)
        counter[0] += 1
        stop.wait(0.5)


def queries(sock_path: str, requests: list[bytes], seconds: float) -> list[float]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(sock_path)
    out = []
    end = time.monotonic() + seconds
    i = 0
    try:
        while time.monotonic() < end:
            i += 1
            req = requests[i % len(requests)]
            began = time.perf_counter_ns()
            sock.sendall(req)
            data = sock.recv(1 << 16)
            while not data.endswith(b"\n"):
                data += sock.recv(1 << 16)
            out.append((time.perf_counter_ns() - began) / 1000)
    finally:
        sock.close()
    return out


def local_latency(root: Path, server: Server, n: float, reverse: bool) -> list[tuple]:
    workspace, ids = make_epic_workspace(root / "ws", 2000, 8, EPIC)
    state = workspace / f"plans/epic-{EPIC}/execution-state.json"
    rows = []
    variants = [("no [fleet]", False, False, 20), ("[fleet], publishing", True, False, 20),
                ("no [fleet]", False, False, 2000), ("[fleet], publishing", True, False, 2000)]
    if reverse:  # the other order, to see what the machine's load did to either
        variants.reverse()
    for label, fleet, down, stories in [*variants, ("[fleet], server down", True, True, 2000)]:
        if down:
            server.stop()
        conf = root / f"conf-{len(rows)}"
        (conf / "storyd").mkdir(parents=True)
        text = '[notify]\ndesktop = false\nlog = false\n'
        if fleet:
            text += f'\n[fleet]\nurl = "{server.url}"\nmachine = "bench"\n'
        (conf / "storyd" / "config.toml").write_text(text)
        sock = str(root / f"s{len(rows)}.sock")
        env = {**os.environ, "XDG_CONFIG_HOME": str(conf)}
        with open(root / f"d{len(rows)}.log", "wb") as log:
            proc = subprocess.Popen([STORYD, "serve", "--socket", sock, "--workspace",
                                     str(workspace)], env=env, stdout=subprocess.DEVNULL,
                                    stderr=log)
        wait_for_ping(sock, 30, lambda proc=proc: proc.poll() is None)
        deadline = time.monotonic() + 120
        while ask(sock, {"op": "stats"})["warm"]["warming"] and time.monotonic() < deadline:
            time.sleep(0.1)
        requests = [resume_request(str(workspace), EPIC, s) for s in ids[:200]]
        stop, count = threading.Event(), [0]
        writer = threading.Thread(target=churn, args=(state, stop, count, stories))
        writer.start()
        try:
            lat = queries(sock, requests, n)
        finally:
            stop.set()
            writer.join()
        stats = ask(sock, {"op": "stats"})
        fleet_state = stats.get("fleet", {})
        proc.terminate()
        proc.wait(20)
        rows.append((f"{label}, {stories:,} stories changed per rewrite", lat, count[0],
                     fleet_state))
    return rows


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def sections_1_2(server: Server, args: argparse.Namespace) -> None:
    pub = publish(server.url, args.machines, args.units)
    print(f"\n## publish: {args.machines} machines x {args.units} units, one process")
    print("| what | count | seconds | per second |\n|---|---:|---:|---:|")
    print(f"| KV summaries (re-publish) | {pub['units']:,} | {pub['kv_s']:.2f} | "
          f"{pub['units'] / pub['kv_s']:,.0f} |")
    print(f"| stream events (100 per machine) | {pub['events']:,} | {pub['events_s']:.2f} "
          f"| {pub['events'] / pub['events_s']:,.0f} |")
    fs = fleet_status(server.url)
    print(f"\n## storyd fleet status over {fs['units']:,} units (median of 3, new process)")
    print("| form | seconds |\n|---|---:|")
    print(f"| --json | {fs['json_s']:.2f} |\n| text | {fs['text_s']:.2f} |", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", type=int, default=50)
    parser.add_argument("--units", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0, help="queries per daemon")
    parser.add_argument("--only-latency", action="store_true", help="skip sections 1 and 2")
    parser.add_argument("--reverse", action="store_true", help="section 3 in reverse order")
    args = parser.parse_args()
    if not shutil.which("nats-server"):
        sys.exit("needs nats-server on PATH (apt-get install nats-server)")
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as scratch:
        root = Path(scratch)
        server = Server(root)
        server.start()
        try:
            if not args.only_latency:
                sections_1_2(server, args)
            rows = local_latency(root, server, args.seconds, args.reverse)
        finally:
            server.stop()
    print(f"\n## local `resume` round trips while the state file is rewritten every 0.5 s "
          f"(2,000 stories, {args.seconds:g} s of queries each, one connection)")
    print("| daemon | queries | p50 µs | p99 µs | max µs | rewrites | fleet after |\n"
          "|---|---:|---:|---:|---:|---:|---|")
    for label, lat, count, state in rows:
        after = (f"connected={state.get('connected')} backlog={state.get('backlog')} "
                 f"dropped={state.get('dropped')}" if state else "-")
        print(f"| {label} | {len(lat):,} | {pct(lat, 0.5):.0f} | {pct(lat, 0.99):.0f} | "
              f"{max(lat):.0f} | {count} | {after} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
