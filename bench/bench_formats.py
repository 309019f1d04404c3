"""The four newer formats (spec-kit, Kiro, Task Master, beads) against the epic format.

    python bench/bench_formats.py [--rounds 20] [--per-round 500] [--reads 15]

1. The cached socket answer (bench_echo's raw client, one persistent connection, the
   request encoded before the clock starts): one daemon watching a workspace with a
   22-story epic and the largest real file of each convention from
   ../shared/corpus/realworld3 (read in place, never copied into the project), the
   `resume` op for each unit in interleaved rounds. Prints p50/p99 and the ratio of each
   format's p50 to the epic's (issue 32's target: what an epic answer costs).
2. A direct read of the largest real file against parsing it alone: the adapter's
   `load` (locked read, parse, tasks, next task, findings) against `json.loads` of the
   whole file (Task Master), `json.loads` of each line (beads) or splitting the lines
   (spec-kit, Kiro), interleaved, medians (target: within 2x).
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
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from bench_echo import connect, quantile, round_trips  # noqa: E402
from realworld3 import CORPUS, entries, lay_out  # noqa: E402
from socket_client import encode, resume_request, wait_for_ping  # noqa: E402
from workloads import make_epic_workspace  # noqa: E402

from storyd.core.formats import adapter_for  # noqa: E402
from storyd.core.formats.base import Source  # noqa: E402

CONVENTIONS = ("spec-kit", "kiro", "task-master", "beads")


def largest(convention: str) -> dict[str, object]:
    """The convention's largest corpus file (not a state.json)."""
    files = [e for e in entries(convention) if not str(e["path"]).endswith("state.json")]
    return max(files, key=lambda e: os.path.getsize(CORPUS / str(e["file"])))


def baseline(convention: str, data: bytes) -> object:
    """Parsing the file alone, the cheapest way its format allows."""
    if convention == "task-master":
        return json.loads(data)
    if convention == "beads":
        return [json.loads(line) for line in data.split(b"\n") if line.strip()]
    return data.decode("utf-8", "replace").splitlines()


def direct_reads(root: Path, reads: int) -> None:
    print("\n| convention | file | bytes | adapter load ms (p50) | parse alone ms (p50) | ratio |")
    print("|---|---|---:|---:|---:|---:|")
    for convention in CONVENTIONS:
        entry = largest(convention)
        ws = root / f"direct-{convention}"
        relpath = lay_out(entry, ws)
        adapter = adapter_for(relpath)
        data = (ws / relpath).read_bytes()
        load_ms: list[float] = []
        parse_ms: list[float] = []
        for _ in range(reads):
            began = time.perf_counter()
            adapter.load(Source(str(ws)), relpath)
            load_ms.append((time.perf_counter() - began) * 1000)
            began = time.perf_counter()
            baseline(convention, (ws / relpath).read_bytes())
            parse_ms.append((time.perf_counter() - began) * 1000)
        a, b = statistics.median(load_ms), statistics.median(parse_ms)
        print(f"| {convention} | {entry['repo']} {entry['path']} | {len(data):,} | "
              f"{a:.2f} | {b:.2f} | {a / b:.2f}x |")


def socket_answers(root: Path, rounds: int, per_round: int) -> None:
    workspace, ids = make_epic_workspace(root / "ws", 22, 5)
    requests = {"epic": resume_request(str(workspace), "0049", ids[len(ids) // 2])}
    for convention in CONVENTIONS:
        relpath = lay_out(largest(convention), workspace)
        requests[convention] = encode({"op": "resume", "workspace": str(workspace),
                                       "stateFile": relpath})
    sock_path = str(root / "storyd.sock")
    env = {**os.environ, "XDG_CONFIG_HOME": str(root / "config"), "STORYD_LOG_LEVEL": "warning"}
    storyd = Path(sys.executable).parent / "storyd"
    daemon = subprocess.Popen([str(storyd), "serve", "--socket", sock_path, "--workspace",
                               str(workspace)], env=env, stderr=subprocess.DEVNULL)
    try:
        wait_for_ping(sock_path, 30.0, lambda: daemon.poll() is None)
        sock: socket.socket = connect(sock_path)
        for name, request in requests.items():  # a miss, then warm
            first = round_trips(sock, request, 1)
            del first
            sock.send(request)
            answer = sock.recv(1 << 20)
            while not answer.endswith(b"\n"):
                answer += sock.recv(1 << 20)
            assert b'"ok":true' in answer, (name, answer[:300])
            round_trips(sock, request, 200)
        samples: dict[str, list[int]] = {k: [] for k in requests}
        for _ in range(rounds):
            for name, request in requests.items():
                samples[name] += round_trips(sock, request, per_round)
        sock.close()
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)
    epic = quantile(samples["epic"], 0.5)
    print(f"cached `resume` over the socket: {rounds} rounds x {per_round} per format, "
          f"interleaved; load average {os.getloadavg()[0]:.2f}")
    print("| format | p50 µs | p99 µs | p50 / epic |")
    print("|---|---:|---:|---:|")
    for name, got in samples.items():
        print(f"| {name} | {quantile(got, 0.5):.1f} | {quantile(got, 0.99):.1f} | "
              f"{quantile(got, 0.5) / epic:.2f}x |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--per-round", type=int, default=500)
    parser.add_argument("--reads", type=int, default=15)
    args = parser.parse_args()
    if not (CORPUS / "MANIFEST.json").is_file():
        sys.exit(f"bench_formats: no corpus at {CORPUS}")
    root = Path(tempfile.mkdtemp(prefix="storyd-formats-"))
    try:
        socket_answers(root, args.rounds, args.per_round)
        direct_reads(root, args.reads)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
