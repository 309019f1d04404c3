"""Issue 45's claim latency: one grant (or renewal) through each door, on one machine.

    python bench/bench_claims.py [--rounds 300] [--cli-rounds 30] [--contenders 0]

    direct   storyd.api.claims.claim in-process, one connection kept (what a hook or
             `storyd reconcile` pays once its imports are done)
    daemon   the socket's `claim` op on a persistent connection (the MCP tools' path
             when they ask the daemon, and any orchestrator's)
    cli      `storyd claim --json` as a script runs it: process start-up included
    fleet    the same three doors on a fleet unit (a workspace with a git remote, [fleet]
             configured): the JetStream bucket on a local `nats-server -js`, file
             storage (needs nats-server on PATH and nats-py; skipped, and said, without)

Each round claims a new unit (a grant: one BEGIN IMMEDIATE transaction under the lock
file; on the fleet, read + compare-and-swap + the server's stamp: 3 round trips). With
--contenders N, N more processes claim other units in a loop meanwhile (local units).
Prints one table: p50, p90, p99 and max in milliseconds.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_fleet import Server  # noqa: E402
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
    return f"| {name:<12} | {len(ms):>5} | " + " | ".join(f"{c:7.3f}" for c in cells) + " |"


def direct(ws: str, rounds: int) -> list[float]:
    """In-process grants on one kept connection (on the fleet: the bucket's one)."""
    from storyd.api import claims
    from storyd.api.claims_store import connect

    conn = connect()
    claims.listing(ws)  # the fleet's connection made before the clock starts
    out = []
    for n in range(rounds):
        start = time.perf_counter()
        claims.claim(claims.Place(ws, "state.json", f"d{n}"), "bench", 60.0, conn=conn)
        out.append(time.perf_counter() - start)
    conn.close()
    return out


def daemon(ws: str, rounds: int, env: dict[str, str], root: Path) -> list[float]:
    """The `claim` op on one persistent connection to a real daemon."""
    sock = str(root / f"storyd-{os.path.basename(ws)}.sock")
    proc = subprocess.Popen([STORYD, "serve", "--socket", sock], env=env,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_for_ping(sock, 30.0, lambda: proc.poll() is None)
        (Path(ws) / "state.json").write_text("{}")
        line = Connection(sock)
        line.ask({"op": "claims", "workspace": ws})  # the daemon's fleet connection made
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


def _remote_workspace(path: Path) -> str:
    """A workspace whose units are fleet units: a git repository with a remote."""
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run(["git", "-C", str(path), "remote", "add", "origin",
                    "https://example.com/bench/claims.git"], check=True)  # fmt: skip
    (path / "state.json").write_text("{}")
    return str(path)


def fleet(root: Path, env: dict[str, str], rounds: int, cli_rounds: int,
          ) -> list[tuple[str, list[float]]]:  # fmt: skip
    """The three doors on a fleet unit, against a local nats-server."""
    missing = [what for what, ok in (("nats-server", shutil.which("nats-server")),
                                     ("nats-py", importlib.util.find_spec("nats"))) if not ok]
    if missing:
        print(f"fleet rows skipped: needs {' and '.join(missing)}")
        return []
    server = Server(root)
    server.start()
    try:
        config = root / "config-fleet"
        (config / "storyd").mkdir(parents=True)
        (config / "storyd" / "config.toml").write_text(
            f'[notify]\ndesktop = false\n\n[fleet]\nurl = "{server.url}"\nmachine = "bench"\n')
        fleet_env = {**env, "XDG_CONFIG_HOME": str(config)}
        os.environ.update(fleet_env)
        ws = _remote_workspace(root / "fleet-ws")
        return [("fleet direct", direct(ws, rounds)),
                ("fleet daemon", daemon(ws, rounds, fleet_env, root)),
                ("fleet cli", cli(ws, cli_rounds, fleet_env))]  # fmt: skip
    finally:
        os.environ.update(env)
        server.stop()


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
                    ("cli", cli(str(ws), args.cli_rounds, env)),
                    *fleet(root, env, args.rounds, args.cli_rounds)]  # fmt: skip
        finally:
            for proc in noise:
                proc.kill()
                proc.wait()
    print(f"claim latency, ms ({args.contenders} contending processes)\n")
    print("| door         | n     | p50     | p90     | p99     | max     |")
    print("|--------------|-------|---------|---------|---------|---------|")
    for name, samples in rows:
        print(_row(name, samples))
    return 0


if __name__ == "__main__":
    sys.exit(main())
