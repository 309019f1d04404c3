"""Issue 45's claim latency: one grant (or renewal) through each door, on one machine.

    python bench/bench_claims.py [--rounds 300] [--cli-rounds 30] [--contenders 0]

    direct   storyd.api.claims.claim in-process, one connection kept (what a hook or
             `storyd reconcile` pays once its imports are done)
    daemon   the socket's `claim` op on a persistent connection (the MCP tools' path
             when they ask the daemon, and any orchestrator's)
    cli      `storyd claim --json` as a script runs it: process start-up included
    fleet    not measured: the JetStream bucket is not built yet (docs/claims.md)

Each round claims a new unit (a grant: one BEGIN IMMEDIATE transaction under the lock
file). With --contenders N, N more processes claim other units in a loop meanwhile.
Prints one table: p50, p90, p99 and max in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from socket_client import Connection, wait_for_ping  # noqa: E402

STORYD = str(Path(sys.executable).parent / "storyd")
_CONTEND = (
    "import sys, itertools\n"
    "from storyd.api import claims\n"
    "from storyd.api.claims_store import connect\n"
    "conn = connect(busy=30.0)\n"
    "for n in itertools.count():\n"
    "    claims.claim(claims.Place(sys.argv[1], 'state.json', f'x{sys.argv[2]}-{n}'),"
    " 'noise', 60.0, conn=conn)\n"
)


def _row(name: str, samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    cells = [ms[min(len(ms) - 1, max(0, round(q * len(ms)) - 1))] for q in (0.5, 0.9, 0.99)]
    cells.append(ms[-1])
    return f"| {name:<6} | {len(ms):>5} | " + " | ".join(f"{c:7.3f}" for c in cells) + " |"


def direct(ws: str, rounds: int) -> list[float]:
    """In-process grants on one kept connection."""
    from storyd.api import claims
    from storyd.api.claims_store import connect

    conn = connect()
    out = []
    for n in range(rounds):
        start = time.perf_counter()
        claims.claim(claims.Place(ws, "state.json", f"d{n}"), "bench", 60.0, conn=conn)
        out.append(time.perf_counter() - start)
    conn.close()
    return out


def daemon(ws: str, rounds: int, env: dict[str, str], root: Path) -> list[float]:
    """The `claim` op on one persistent connection to a real daemon."""
    sock = str(root / "storyd.sock")
    proc = subprocess.Popen([STORYD, "serve", "--socket", sock], env=env,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_for_ping(sock, 30.0, lambda: proc.poll() is None)
        (Path(ws) / "state.json").write_text("{}")
        line = Connection(sock)
        out = []
        for n in range(rounds):
            request = {"op": "claim", "workspace": ws, "stateFile": "state.json",
                       "unit": f"s{n}", "owner": "bench"}  # fmt: skip
            start = time.perf_counter()
            answer = line.ask(request)
            out.append(time.perf_counter() - start)
            assert answer.get("ok"), answer
        line.close()
        return out
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def cli(ws: str, rounds: int, env: dict[str, str]) -> list[float]:
    """`storyd claim --json`, a process each."""
    out = []
    for n in range(rounds):
        argv = [STORYD, "claim", "--workspace", ws, "--state-file", "state.json", "--unit",
                f"c{n}", "--owner", "bench", "--json"]  # fmt: skip
        start = time.perf_counter()
        subprocess.run(argv, env=env, check=True, capture_output=True)
        out.append(time.perf_counter() - start)
    return out


def main() -> int:
    """Measure and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--cli-rounds", type=int, default=30)
    parser.add_argument("--contenders", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ws = root / "ws"
        ws.mkdir()
        env = {**os.environ, "STORYD_CLAIMS": str(root / "claims.sqlite3"),
               "XDG_CONFIG_HOME": str(root / "config"), "XDG_STATE_HOME": str(root / "state"),
               "STORYD_LOG_LEVEL": "warning"}  # fmt: skip
        os.environ.update(env)
        noise = [subprocess.Popen([sys.executable, "-c", _CONTEND, str(ws), str(i)], env=env)
                 for i in range(args.contenders)]  # fmt: skip
        try:
            rows = [("direct", direct(str(ws), args.rounds)),
                    ("daemon", daemon(str(ws), args.rounds, env, root)),
                    ("cli", cli(str(ws), args.cli_rounds, env))]  # fmt: skip
        finally:
            for proc in noise:
                proc.kill()
                proc.wait()
    print(f"claim latency, ms ({args.contenders} contending processes)\n")
    print("| door   | n     | p50     | p90     | p99     | max     |")
    print("|--------|-------|---------|---------|---------|---------|")
    for name, samples in rows:
        print(_row(name, samples))
    print("| fleet  | -     | not built yet (docs/claims.md)                |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
