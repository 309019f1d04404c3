"""`storyd-resume` (the sh fast path): this checkout's script against another revision's.

    .venv/bin/python bench/bench_fast_path.py --runs 40 [--base 467383b]

Both scripts are copied beside a symlink to this venv's `storyd`, then run alternately
on a 22-story workspace: with the daemon up (the happy path: the socket answers) and
with the daemon stopped by SIGSTOP (it accepts the connection and never answers).
The table gives medians and p90 per script and case.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
STORY = "story-0049-0001"


def _workspace(root: Path) -> Path:
    ws = root / "ws"
    state = ws / "plans" / "epic-0049" / "execution-state.json"
    state.parent.mkdir(parents=True)
    stories = {
        f"story-0049-{n:04d}": {"tasks": {f"T{t}": {"status": "PENDING"} for t in range(5)}}
        for n in range(1, 23)
    }
    state.write_bytes(orjson.dumps({"epic": "0049", "stories": stories}))
    return ws


def _install(root: Path, name: str, text: bytes) -> str:
    folder = root / name
    folder.mkdir()
    script = folder / "storyd-resume"
    script.write_bytes(text)
    script.chmod(0o755)
    (folder / "storyd").symlink_to(VENV_BIN / "storyd")
    return str(script)


def _time(script: str, ws: Path, env: dict[str, str]) -> float:
    began = time.perf_counter()
    done = subprocess.run(["sh", script, "--story-id", STORY, "--epic-id", "0049"], cwd=ws,
                          env=env, capture_output=True, check=False)
    took = time.perf_counter() - began
    if done.returncode != 0:
        sys.exit(f"{script} exited {done.returncode}: {done.stderr.decode()}")
    return took * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--stopped-runs", type=int, default=5)
    parser.add_argument("--base", default="467383b")
    args = parser.parse_args()
    old = subprocess.run(["git", "show", f"{args.base}:bin/storyd-resume"], cwd=ROOT,
                         capture_output=True, check=True).stdout
    new = (ROOT / "bin" / "storyd-resume").read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ws = _workspace(root)
        scripts = {args.base: _install(root, "old", old),
                   "this checkout": _install(root, "new", new)}
        sock = root / "s.sock"
        env = {**os.environ, "STORYD_SOCKET": str(sock), "XDG_CONFIG_HOME": str(root / "cfg"),
               "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"}  # 0.2 needs it
        with open(root / "log", "wb") as log:
            daemon = subprocess.Popen([str(VENV_BIN / "storyd"), "serve", "--socket", str(sock),
                                       "--workspace", str(ws)], env=env, stderr=log)
        try:
            deadline = time.monotonic() + 20
            while subprocess.run([str(VENV_BIN / "storyd"), "ping", "--socket", str(sock)],
                                 capture_output=True, env=env, check=False).returncode != 0:
                if time.monotonic() > deadline:
                    sys.exit("the daemon did not answer")
                time.sleep(0.05)
            rows: dict[tuple[str, str], list[float]] = {}
            for _ in range(args.runs):
                for name, script in scripts.items():
                    rows.setdefault((name, "daemon up"), []).append(_time(script, ws, env))
            daemon.send_signal(signal.SIGSTOP)
            try:
                for _ in range(args.stopped_runs):
                    for name, script in scripts.items():
                        rows.setdefault((name, "daemon stopped"), []).append(
                            _time(script, ws, env))
            finally:
                daemon.send_signal(signal.SIGCONT)
        finally:
            daemon.terminate()
            daemon.wait(10)
    print("| script | case | runs | median | p90 |")
    print("| --- | --- | --- | --- | --- |")
    for (name, case), values in rows.items():
        values.sort()
        p90 = values[min(len(values) - 1, int(len(values) * 0.9))]
        print(f"| {name} | {case} | {len(values)} | {statistics.median(values):.2f} ms "
              f"| {p90:.2f} ms |")


if __name__ == "__main__":
    main()
