#!/usr/bin/env python3
"""Time `storyd top` (issue 34): frame time with 1,000 units, event-to-screen latency,
idle CPU.

    .venv/bin/python bench/bench_top.py [--quick] [--units N] [--idle SECONDS]

Runs from the project's venv with the tui extra (it imports storyd.tui, unlike the
stdlib-only benches: the live view is an in-process Textual app). A private daemon
(`storyd serve`, its own socket and state) watches a git workspace whose one epic
holds N stories (N units). Rows:

  plain frame        `storyd.api.topview.frame` for N units (the --once text)
  table fill         N rows into an empty DataTable (the first frame, a new filter)
  reload, unchanged  the live view's reload when nothing changed: N rows compared,
                     none touched (storyd.tui.table)
  page down          one PageDown through N rows, to the next frame
  event to screen    a write to the state file -> the row shows the new progress
                     (the daemon's event, the view's re-read, the redraw: the one
                     file's units get their new age, story 1 its progress too)
  idle CPU           `storyd top` in tmux (a real terminal) with nothing changing:
                     CPU seconds per wall second over --idle seconds (60 by default)

Medians over the samples; the load average is printed beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

BIN = Path(sys.executable).parent
STORYD = str(BIN / "storyd")
EPIC = "0049"


def _stories(n: int, done_first: int = 0) -> bytes:
    stories = {}
    for i in range(1, n + 1):
        sid = f"story-{EPIC}-{i:04d}"
        stories[sid] = {"tasks": {f"TASK-{EPIC}-{i:04d}-{t:03d}": {
            "status": "DONE" if (i == 1 and t <= done_first) else "PENDING"} for t in (1, 2, 3)}}
    return orjson.dumps({"epic": EPIC, "stories": stories})


def _write(ws: Path, data: bytes) -> None:
    path = ws / "plans" / f"epic-{EPIC}" / "execution-state.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("config", "state", "runtime"):
        (root / name).mkdir(mode=0o700, exist_ok=True)
    env.update(XDG_CONFIG_HOME=str(root / "config"), XDG_STATE_HOME=str(root / "state"),
               XDG_RUNTIME_DIR=str(root / "runtime"), STORYD_SOCKET=str(root / "storyd.sock"),
               PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}")  # fmt: skip
    env.pop("NO_COLOR", None)
    return env


def _daemon(root: Path, ws: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([STORYD, "serve", "--workspace", str(ws)], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=open(root / "daemon.log", "ab"))  # noqa: SIM115
    deadline = time.monotonic() + 30
    while subprocess.run([STORYD, "ping"], env=env, capture_output=True, check=False).returncode:
        if time.monotonic() > deadline:
            raise SystemExit("the daemon did not answer in 30 s")
        time.sleep(0.1)
    return proc


async def _pilot(ws: Path, env: dict[str, str], n: int, samples: int) -> dict[str, list[float]]:
    from textual.widgets import DataTable

    from storyd.tui.app import TopApp

    os.environ.update(env)
    app = TopApp([str(ws)])
    out: dict[str, list[float]] = {
        "table fill": [], "reload, unchanged": [], "page down": [], "event to screen": []}

    async def until(check: object, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():  # type: ignore[operator]
            if time.monotonic() > deadline:
                rows = app.query_one(DataTable).row_count
                raise SystemExit(f"timed out: {rows} rows on screen, link {app.link}")
            await pilot.pause(0.002)

    async with app.run_test(size=(120, 40)) as pilot:
        await until(lambda: app.query_one(DataTable).row_count == n and app.link == "live")
        for _ in range(samples):
            app.sync.drawn.clear()  # forget what is drawn: the next show fills it all
            t = time.perf_counter()
            app.show(app.rows, app.source)
            await pilot.pause()
            out["table fill"].append(time.perf_counter() - t)
        for _ in range(samples):
            t = time.perf_counter()
            app.show(app.rows, app.source)
            await pilot.pause()
            out["reload, unchanged"].append(time.perf_counter() - t)
        for _ in range(samples):
            t = time.perf_counter()
            await pilot.press("pagedown")
            out["page down"].append(time.perf_counter() - t)
        for k in range(samples):
            done = 1 + k % 3
            want = f"{done}/3"
            app.query_one(DataTable).move_cursor(row=0)

            def shows(want: str = want) -> bool:
                return any(str(r.unit.get("unit")).endswith("0001") and r.progress().endswith(want)
                           for r in app.shown)  # fmt: skip

            if shows():
                continue
            t = time.perf_counter()
            _write(ws, _stories(n, done))
            await until(shows)
            out["event to screen"].append(time.perf_counter() - t)
        await pilot.press("q")
    return out


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _idle(root: Path, ws: Path, env: dict[str, str], seconds: float) -> float | None:
    if shutil.which("tmux") is None:
        return None
    sock = str(root / "tmux.sock")
    pidfile = root / "top.pid"
    tenv = {**env, "TERM": "xterm-256color"}
    cmd = f"echo $$ > {pidfile}; exec {STORYD} top --workspace {ws}"
    subprocess.run(["tmux", "-S", sock, "new-session", "-d", "-x", "120", "-y", "40", cmd],
                   env=tenv, check=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while b"live" not in subprocess.run(["tmux", "-S", sock, "capture-pane", "-p"],
                                            env=tenv, capture_output=True, check=False).stdout:
            if time.monotonic() > deadline:
                raise SystemExit("storyd top did not come up in tmux")
            time.sleep(0.2)
        pid = int(pidfile.read_text())
        time.sleep(2)  # the first frame's work settles
        before, t = _cpu_seconds(pid), time.monotonic()
        time.sleep(seconds)
        return (_cpu_seconds(pid) - before) / (time.monotonic() - t)
    finally:
        subprocess.run(["tmux", "-S", sock, "kill-server"], env=tenv, check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples, 10 s idle")
    parser.add_argument("--units", type=int, default=1000)
    parser.add_argument("--idle", type=float, default=None)
    args = parser.parse_args()
    samples = 5 if args.quick else 20
    idle = args.idle if args.idle is not None else (10.0 if args.quick else 60.0)
    from storyd.api.topview import frame
    from storyd.api.units import units as read_units

    with tempfile.TemporaryDirectory(prefix="bench-top-") as tmp:
        root = Path(tmp)
        ws = root / "ws"
        ws.mkdir()
        subprocess.run(["git", "init", "-q", str(ws)], check=True)
        subprocess.run(["git", "-C", str(ws), "-c", "user.name=b", "-c", "user.email=b@b",
                        "commit", "-q", "--allow-empty", "-m", "base"], check=True)  # fmt: skip
        _write(ws, _stories(args.units))
        env = _env(root)
        daemon = _daemon(root, ws, env)
        try:
            os.environ.update(env)
            found = read_units([str(ws)]).units
            plain = []
            for _ in range(samples):
                t = time.perf_counter()
                frame(found, width=120, height=40)
                plain.append(time.perf_counter() - t)
            rows = {"plain frame": plain, **asyncio.run(_pilot(ws, env, args.units, samples))}
            cpu = _idle(root, ws, env, idle)
        finally:
            daemon.terminate()
            daemon.wait(10)
    load = os.getloadavg()
    print(f"storyd top, {args.units} units (load average {load[0]:.2f} {load[1]:.2f})")
    for name, got in rows.items():
        if got:
            print(f"  {name:<17} median {1000 * statistics.median(got):8.1f} ms  "
                  f"max {1000 * max(got):8.1f} ms  ({len(got)} samples)")
    if cpu is None:
        print("  idle CPU         skipped: tmux is not installed")
    else:
        print(f"  idle CPU         {100 * cpu:.2f}% of one core over {idle:g} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
