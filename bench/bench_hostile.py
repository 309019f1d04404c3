#!/usr/bin/env python3
"""Hostile clients against storyd's daemon: answers pipelined and never read, a drip-fed line.

    python3 bench/bench_hostile.py [--hogs 64] [--hog-bytes 131072] [--stories 5]
        [--seconds 5] [--drip-bytes 1048576] [--drip-chunk 1024] [--drip-pause 200]
        [--json PATH]

Stdlib only; it never imports the project, and the daemon runs from bench_daemon.py's
non-editable venv (bench/results/.venv-bench). Two sections:

1. `--hogs` client connections each write `--hog-bytes` of `{"op":"list","detail":true}`
   lines and never read. Measured: the daemon's RSS (before, peak while the hogs hold
   their connections, after they close), how many of the hogs' bytes the daemon took,
   how many requests it answered, and a well-behaved client's round trips (`resume` on
   a persistent connection, and `ping` on a fresh connection each time) without and
   with the hogs: p50, p99, max.
2. One client drip-feeds a `--drip-bytes` request line in `--drip-chunk` pieces (so each
   piece reaches the daemon as one read, the sender sleeps `--drip-pause` µs after each).
   Measured: the sender's CPU and the daemon's CPU for the line, with `max_line_bytes`
   raised above the line (it is answered) and at the default (it is discarded).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_daemon import Daemon, Latency, Plan, make_workspace, run_clients
from bench_resume import ensure_venv, write_json
from socket_client import Connection, encode, resume_request

LIST_DETAIL = encode({"op": "list", "detail": True})
QUIET_AFTER_S = 20.0


def _rss_kb(pid: int, key: str = "VmRSS") -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


class RssSampler(threading.Thread):
    """The highest VmRSS of a process, sampled every 20 ms until stopped."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_kb = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.02):
            self.peak_kb = max(self.peak_kb, _rss_kb(self.pid))

    def stop(self) -> int:
        self.done.set()
        self.join()
        return self.peak_kb


def hog_process(path: str, hogs: int, payload: bytes, pipe: object) -> None:
    """Open `hogs` connections, write `payload` on each as far as the daemon takes it,
    never read; report the bytes sent, then hold the connections until told to go."""
    socks = []
    for _ in range(hogs):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        sock.setblocking(False)
        socks.append(sock)
    sent = [0] * hogs
    last_progress = time.monotonic()
    while time.monotonic() - last_progress < 2.0 and min(sent) < len(payload):
        moved = False
        for k, sock in enumerate(socks):
            if sent[k] >= len(payload):
                continue
            try:
                n = sock.send(payload[sent[k]:sent[k] + 65536])
            except BlockingIOError:
                continue
            except OSError:
                sent[k] = len(payload)  # closed by the daemon
                continue
            sent[k] += n
            moved = True
        if moved:
            last_progress = time.monotonic()
        else:
            time.sleep(0.01)
    pipe.send(sent)  # type: ignore[attr-defined]
    pipe.recv()  # type: ignore[attr-defined]  # "go": close everything
    for sock in socks:
        sock.close()


def fresh_pings(path: str, seconds: float) -> list[int]:
    """Round trips (ns) of `ping` on a fresh connection each, for `seconds`."""
    request = encode({"op": "ping"})
    samples: list[int] = []
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        began = time.perf_counter_ns()
        try:
            conn = Connection(path, timeout=60)
            try:
                conn.roundtrip(request)
            finally:
                conn.close()
        except OSError as exc:
            print(f"   ping failed after {(time.perf_counter_ns() - began) / 1e9:.1f} s: {exc}")
            continue
        samples.append(time.perf_counter_ns() - began)
        time.sleep(0.001)  # about a thousand a second: a prober, not a load
    return samples


def probe(daemon: Daemon, requests: list[bytes], seconds: float, tag: str) -> dict[str, object]:
    """A persistent `resume` client (its own process) and fresh pings (this one), together."""
    plan = Plan(seconds, 50, 0, 0, 0, 0, 0, 0, 0, 0.0, 0.0)
    pings: list[int] = []
    pinger = threading.Thread(target=lambda: pings.extend(fresh_pings(daemon.socket, seconds)))
    pinger.start()
    persistent = run_clients(daemon, requests, persistent=True, clients=1, plan=plan)
    pinger.join()
    fresh = Latency(f"ping-{tag}", "ping, fresh connection", 1, pings, len(pings) / seconds)
    return {"resume": persistent, "ping": fresh}


def section_hogs(daemon: Daemon, requests: list[bytes], args: argparse.Namespace
                 ) -> dict[str, object]:
    """Hogs that pipeline `list --detail` and never read, against a prober's latency.

    The loaded window starts with the prober: the hogs connect half a second into it,
    so the window covers the daemon taking and answering their lines.
    """
    quiet = probe(daemon, requests, args.seconds, "quiet")
    rss_before = _rss_kb(daemon.pid)
    requests_before = int(daemon.ask({"op": "stats"})["requests"])  # type: ignore[arg-type]
    payload = LIST_DETAIL * (args.hog_bytes // len(LIST_DETAIL))
    ctx = multiprocessing.get_context("fork")
    mine, theirs = ctx.Pipe()
    sampler = RssSampler(daemon.pid)
    sampler.start()
    hogs = ctx.Process(target=hog_process, args=(daemon.socket, args.hogs, payload, theirs),
                       daemon=True)
    sent: list[int] = []
    timer = threading.Timer(0.5, hogs.start)
    timer.start()
    loaded = probe(daemon, requests, args.seconds, "hogs")
    timer.join()
    sent = mine.recv()
    rss_holding = _rss_kb(daemon.pid)
    stats = daemon.ask({"op": "stats"})
    mine.send("go")
    hogs.join()
    peak = sampler.stop()
    deadline = time.monotonic() + QUIET_AFTER_S
    while time.monotonic() < deadline and int(daemon.ask({"op": "stats"})["connections"]) > 1:  # type: ignore[arg-type]
        time.sleep(0.05)
    daemon.quiet(QUIET_AFTER_S)
    return {
        "hogs": args.hogs,
        "payload_bytes": len(payload),
        "answer_bytes": len(daemon_list_answer(daemon)),
        "sent_bytes_total": sum(sent),
        "sent_bytes_min": min(sent),
        "sent_bytes_max": max(sent),
        "answered": int(stats["requests"]) - requests_before,  # type: ignore[arg-type]
        "rss_before_mb": rss_before / 1024,
        "rss_peak_mb": peak / 1024,
        "rss_holding_mb": rss_holding / 1024,
        "rss_after_mb": _rss_kb(daemon.pid) / 1024,
        "quiet": quiet,
        "loaded": loaded,
        "limits": stats.get("limits"),
    }


def daemon_list_answer(daemon: Daemon) -> bytes:
    conn = Connection(daemon.socket)
    try:
        return conn.roundtrip(LIST_DETAIL)
    finally:
        conn.close()


def _read_total(pid: int) -> int:
    """Bytes the process has read through read(2)-like calls (/proc/PID/io rchar)."""
    with open(f"/proc/{pid}/io", encoding="ascii") as io:
        for line in io:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    return 0


def section_drip(daemon: Daemon, args: argparse.Namespace) -> dict[str, object]:
    """One request line of `drip_bytes`, sent `drip_chunk` bytes at a time; CPU each side."""
    pad = args.drip_bytes - len(b'{"op":"ping","pad":""}\n')
    line = b'{"op":"ping","pad":"' + b"x" * pad + b'"}\n'
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)
    sock.connect(daemon.socket)
    cpu_before = daemon.cpu()[0]
    mine_before = time.process_time()
    wall = time.monotonic()
    pieces = 0
    pause = args.drip_pause / 1e6
    for start in range(0, len(line), args.drip_chunk):
        sock.sendall(line[start:start + args.drip_chunk])
        pieces += 1
        time.sleep(pause)  # the daemon reads each piece on its own
    mine = time.process_time() - mine_before
    answer = b""
    while not answer.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        answer += chunk
    wall = time.monotonic() - wall
    theirs = daemon.cpu()[0] - cpu_before
    sock.close()
    parsed = json.loads(answer) if answer.endswith(b"\n") else {"ok": None}
    return {
        "line_bytes": len(line),
        "chunk_bytes": args.drip_chunk,
        "pieces": pieces,
        "sender_cpu_s": mine,
        "daemon_cpu_s": theirs,
        "ratio": theirs / mine if mine else None,
        "wall_s": wall,
        "answer_ok": parsed.get("ok"),
        "answer_error": parsed.get("error"),
    }


def _lat(row: Latency) -> str:
    return f"{row.p50:>9.0f} {row.p99:>9.0f} {row.max:>10.0f} {len(row.samples):>7}"


def print_hogs(found: dict[str, object]) -> None:
    print(f"\n1. {found['hogs']} clients pipelining {found['payload_bytes']:,} bytes of "
          f"list --detail each (answer {found['answer_bytes']:,} bytes), never reading")
    print(f"   daemon took {found['sent_bytes_total']:,} bytes of theirs "
          f"(per client {found['sent_bytes_min']:,} to {found['sent_bytes_max']:,}) and "
          f"answered {found['answered']:,} requests (the prober's included)")
    print(f"   daemon RSS: before {found['rss_before_mb']:.0f} MB, peak "
          f"{found['rss_peak_mb']:.0f} MB, while held {found['rss_holding_mb']:.0f} MB, "
          f"after {found['rss_after_mb']:.0f} MB")
    print(f"   {'another client, µs':<38} {'p50':>9} {'p99':>9} {'max':>10} {'n':>7}")
    for when in ("quiet", "loaded"):
        rows = found[when]
        assert isinstance(rows, dict)
        label = "no hogs" if when == "quiet" else "hogs holding"
        print(f"   {'resume, persistent, ' + label:<38} {_lat(rows['resume'])}")
        print(f"   {'ping, fresh connection, ' + label:<38} {_lat(rows['ping'])}")


def print_drip(found: dict[str, object], label: str) -> None:
    ratio = found["ratio"]
    print(f"   {label:<30} {found['line_bytes']:>10,} {found['chunk_bytes']:>6} "
          f"{found['sender_cpu_s']:>9.3f} {found['daemon_cpu_s']:>9.3f} "
          f"{ratio if ratio is None else f'{ratio:.1f}':>7} {found['wall_s']:>7.1f}  "
          f"{found['answer_ok'] if found['answer_ok'] else found['answer_error']}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--hogs", type=int, default=64)
    parser.add_argument("--hog-bytes", type=int, default=128 * 1024)
    parser.add_argument("--stories", type=int, default=5, help="stories in the workspace")
    parser.add_argument("--seconds", type=float, default=5.0, help="per latency window")
    parser.add_argument("--drip-bytes", type=int, default=1 << 20)
    parser.add_argument("--drip-chunk", type=int, default=1024)
    parser.add_argument("--drip-pause", type=int, default=200, metavar="US",
                        help="microseconds asleep after each piece")
    parser.add_argument("--json", metavar="PATH", type=Path)
    args = parser.parse_args(argv)
    venv = ensure_venv()
    print(f"storyd hostile-client benchmark (venv {venv}; load "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())})")
    result: dict[str, object] = {"args": {k: str(v) for k, v in vars(args).items()}}
    with tempfile.TemporaryDirectory(prefix="storyd-bench-hostile-") as tmp:
        scratch = Path(tmp)
        for name in ("runtime", "config"):
            (scratch / name).mkdir(mode=0o700)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("PYTHON") and k != "STORYD_SOCKET"}
        env.update(XDG_RUNTIME_DIR=str(scratch / "runtime"),
                   XDG_CONFIG_HOME=str(scratch / "config"))
        workspace, story_ids = make_workspace(scratch / "ws", args.stories, 5)
        requests = [resume_request(str(workspace), "0049", s) for s in story_ids]
        daemon = Daemon("main", scratch, workspace, env, "mtime")
        daemon.start()
        try:
            result["hogs"] = found = section_hogs(daemon, requests, args)
            print_hogs(found)
        finally:
            daemon.stop()
        result.update(run_drips(scratch, workspace, env, args))
    if args.json:
        write_json(args.json, _plain(result))
    return 0


def run_drips(scratch: Path, workspace: Path, env: dict[str, str],
              args: argparse.Namespace) -> dict[str, object]:
    """Section 2 against a daemon whose max_line_bytes takes the line, then the default."""
    found: dict[str, object] = {}
    big = Daemon("drip", scratch, workspace, env, "mtime")
    config = Path(big.env["XDG_CONFIG_HOME"]) / "storyd"
    config.mkdir(parents=True, exist_ok=True)
    limit = max(2 * args.drip_bytes, 65536)
    (config / "config.toml").write_text(f"[limits]\nmax_line_bytes = {limit}\n")
    big.start()
    try:
        print(f"\n2. one request line drip-fed {args.drip_chunk} bytes at a time")
        print(f"   {'max_line_bytes':<30} {'line':>10} {'chunk':>6} {'sender s':>9} "
              f"{'daemon s':>9} {'ratio':>7} {'wall s':>7}  answer")
        found["drip"] = drip = section_drip(big, args)
        print_drip(drip, f"{limit:,} (accepted)")
    finally:
        big.stop()
    small = Daemon("drip-default", scratch, workspace, env, "mtime")
    small.start()
    try:
        found["drip_default"] = drip = section_drip(small, args)
        print_drip(drip, "65,536 (default; discarded)")
    finally:
        small.stop()
    return found


def _plain(value: object) -> object:
    if isinstance(value, Latency):
        return value.as_dict(raw=False)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
