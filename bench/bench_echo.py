"""storyd's cached `resume` round trip against two line-echo servers, interleaved and pinned.

    python bench/bench_echo.py [--stories 22] [--rounds 20] [--per-round 2000]

The echo server (bench/echo/echo_server.c, built here with `cc -O2`) writes each
request line back: the floor for any NDJSON server on a Unix socket. One client (this
process, raw `send`/`recv` on a persistent connection, the request encoded before the
clock starts) sends the same `resume` line to both, alternating rounds of --per-round
round trips, so that drift in the machine's speed hits both alike. The second
yardstick, bench/echo/asyncio_echo.py, is a minimal asyncio Protocol line-echo server
in the same Python: the floor for an NDJSON server on asyncio, as storyd's transport is
(issue 43's target: storyd's cached answer within 1.5x of it). Two placements:
client and server on one CPU (each round trip is two context switches on that CPU),
and on different CPUs (a wake-up across cores). Prints p50 and p99 per server and
placement, and the ratio of storyd's median to each echo server's (issue 18's target:
within 1.5x of C; issue 43's: within 1.5x of asyncio).

Needs cc, and a machine with two or more CPUs for the second placement.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from socket_client import resume_request, wait_for_ping  # noqa: E402
from workloads import make_epic_workspace  # noqa: E402


def build_echo(out: Path) -> Path:
    """Compile the echo server (once per run)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        sys.exit("bench_echo: needs a C compiler (cc)")
    binary = out / "echo_server"
    subprocess.run([cc, "-O2", "-o", str(binary), str(HERE / "echo" / "echo_server.c")],
                   check=True)
    return binary


def connect(path: str, timeout: float = 10.0) -> socket.socket:
    """A persistent connection, retried until the server listens."""
    deadline = time.monotonic() + timeout
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            return sock
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def round_trips(sock: socket.socket, request: bytes, count: int) -> list[int]:
    """`count` round trips of `request`; each one's nanoseconds."""
    send, recv, clock = sock.send, sock.recv, time.perf_counter_ns
    samples = []
    for _ in range(count):
        began = clock()
        send(request)
        data = recv(65536)
        while not data.endswith(b"\n"):
            data += recv(65536)
        samples.append(clock() - began)
    return samples


def quantile(samples: list[int], q: float) -> float:
    """Nearest-rank quantile, in microseconds."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))] / 1000


def pin(pid: int, cpu: int) -> None:
    """Keep a process (and its threads) on one CPU."""
    for task in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(task), {cpu})


def print_rows(placement: str, samples: dict[str, list[int]]) -> None:
    """One table row per server: p50, p99 and storyd's p50 over this server's."""
    mine = quantile(samples["storyd"], 0.5)
    for label, got in samples.items():
        ratio = mine / quantile(got, 0.5)
        target = " (target 1.5x)" if label == "echo (asyncio)" else ""
        cell = f"{ratio:.2f}x{target}" if label != "storyd" else ""
        print(f"| {placement} | {label} | {quantile(got, 0.5):.1f} | "
              f"{quantile(got, 0.99):.1f} | {cell} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stories", type=int, default=22)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--per-round", type=int, default=2000)
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    storyd = Path(sys.executable).parent / "storyd"
    with tempfile.TemporaryDirectory(prefix="storyd-echo-") as tmp:
        root = Path(tmp)
        workspace, ids = make_epic_workspace(root / "ws", args.stories, 5)
        story = ids[len(ids) // 2]
        request = resume_request(str(workspace), "0049", story)
        echo_sock, storyd_sock = str(root / "echo.sock"), str(root / "storyd.sock")
        pyecho_sock = str(root / "pyecho.sock")
        echo = subprocess.Popen([str(build_echo(root)), echo_sock])
        pyecho = subprocess.Popen([sys.executable, str(HERE / "echo" / "asyncio_echo.py"),
                                   pyecho_sock])
        env = {**os.environ, "XDG_CONFIG_HOME": str(root / "config"),
               "STORYD_LOG_LEVEL": "warning"}
        daemon = subprocess.Popen([str(storyd), "serve", "--socket", storyd_sock,
                                   "--workspace", str(workspace)], env=env,
                                  stderr=subprocess.DEVNULL)
        try:
            wait_for_ping(storyd_sock, 30.0, lambda: daemon.poll() is None)
            servers = {"storyd": connect(storyd_sock), "echo (C)": connect(echo_sock),
                       "echo (asyncio)": connect(pyecho_sock)}
            answer = round_trips(servers["storyd"], request, 1)  # the first: a miss
            del answer
            placements = [("one CPU", cpus[0], cpus[0])]
            if len(cpus) > 1:
                placements.append(("two CPUs", cpus[0], cpus[1]))
            print(f"workload: {args.stories} stories x 5 tasks; {args.rounds} rounds x "
                  f"{args.per_round} round trips per server, interleaved; request "
                  f"{len(request)} bytes")
            print("| placement | server | p50 µs | p99 µs | storyd p50 / this p50 |")
            print("|---|---|---:|---:|---:|")
            for name, client_cpu, server_cpu in placements:
                os.sched_setaffinity(0, {client_cpu})
                pin(daemon.pid, server_cpu)
                pin(echo.pid, server_cpu)
                pin(pyecho.pid, server_cpu)
                samples: dict[str, list[int]] = {k: [] for k in servers}
                for sock in servers.values():  # warm both at this placement
                    round_trips(sock, request, 500)
                for _ in range(args.rounds):
                    for label, sock in servers.items():
                        samples[label] += round_trips(sock, request, args.per_round)
                print_rows(name, samples)
            for sock in servers.values():
                sock.close()
        finally:
            os.sched_setaffinity(0, set(cpus))
            daemon.terminate()
            echo.terminate()
            pyecho.terminate()
            daemon.wait(timeout=10)
            echo.wait(timeout=10)
            pyecho.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
