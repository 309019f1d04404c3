"""The agents' hooks and MCP tools: wall time per call, beside a bare interpreter.

    .venv/bin/python bench/bench_hooks.py --runs 20

On a copy of storyd demo's workspace (7 units, git history), each hook runs as Claude
Code runs it (a fresh `storyd hook EVENT` process, its JSON on stdin), interleaved with
a bare `python -c pass` so load hits both alike, without a daemon and with one. Then one
`storyd mcp` session (the SDK's stdio client) calls each tool `--runs` times. Medians
and p90, in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
STORYD = str(BIN / "storyd")


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return f"{statistics.median(values) * 1000:9.1f} | {p90 * 1000:8.1f}"


def _timed(argv: list[str], data: bytes, env: dict[str, str]) -> float:
    began = time.perf_counter()
    subprocess.run(argv, input=data, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - began


def _payloads(ws: Path) -> dict[str, tuple[str, bytes]]:
    common = {"session_id": "s", "transcript_path": "/tmp/t.jsonl", "cwd": str(ws)}
    state = str(ws / "plans/epic-0049/execution-state.json")
    return {
        "session-start": ("session-start", orjson.dumps(
            {**common, "hook_event_name": "SessionStart", "source": "startup"})),
        "stop": ("stop", orjson.dumps(
            {**common, "hook_event_name": "Stop", "stop_hook_active": False})),
        "post-tool-use (state file)": ("post-tool-use", orjson.dumps(
            {**common, "hook_event_name": "PostToolUse", "tool_name": "Edit",
             "tool_input": {"file_path": state}})),
        "post-tool-use (other file)": ("post-tool-use", orjson.dumps(
            {**common, "hook_event_name": "PostToolUse", "tool_name": "Edit",
             "tool_input": {"file_path": str(ws / "README.md")}})),
        "bad stdin (not JSON)": ("stop", b"not json"),
    }


def bench_hooks(ws: Path, env: dict[str, str], runs: int, label: str) -> None:
    bare = [sys.executable, "-c", "pass"]
    rows: dict[str, list[float]] = {"bare interpreter (python -c pass)": []}
    payloads = _payloads(ws)
    for name in payloads:
        rows[name] = []
    for _ in range(runs):
        rows["bare interpreter (python -c pass)"].append(_timed(bare, b"", env))
        for name, (event, data) in payloads.items():
            rows[name].append(_timed([STORYD, "hook", event], data, env))
    base = statistics.median(rows["bare interpreter (python -c pass)"])
    print(f"\nhooks, {label} ({runs} runs each)")
    print(f"| {'command':<36} | median ms |   p90 ms | x bare |")
    print(f"| {'-' * 36} | --------- | -------- | ------ |")
    for name, values in rows.items():
        ratio = statistics.median(values) / base
        print(f"| {name:<36} | {_ms(values)} | {ratio:6.2f} |")


def bench_in_process(ws: Path, env: dict[str, str], runs: int) -> None:
    """The hooks' own work: each hook's function called in this process, imports done."""
    from storyd.api.hooks.post_tool_use import problem
    from storyd.api.hooks.session_start import context
    from storyd.api.hooks.stop import decide

    saved = dict(os.environ)
    os.environ.update(env)
    payload = {"cwd": str(ws), "source": "startup", "stop_hook_active": False,
               "tool_input": {"file_path": str(ws / "plans/epic-0049/execution-state.json")}}
    print(f"\nhooks' own work in one process, daemon running ({runs * 5} calls each)")
    print(f"| {'hook':<14} | median ms |   p90 ms |")
    print(f"| {'-' * 14} | --------- | -------- |")
    try:
        for name, hook in (("session-start", context), ("stop", decide),
                           ("post-tool-use", problem)):
            assert hook(payload, None, None) is not None or name == "post-tool-use"
            times = []
            for _ in range(runs * 5):
                began = time.perf_counter()
                hook(payload, None, None)
                times.append(time.perf_counter() - began)
            print(f"| {name:<14} | {_ms(times)} |")
    finally:
        os.environ.clear()
        os.environ.update(saved)


def bench_mcp(ws: Path, env: dict[str, str], runs: int, label: str) -> None:
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    calls = {
        "resume": {"epic_id": "0049", "story_id": "story-0049-0013"},
        "status": {},
        "epic": {"epic_id": "0049"},
        "check": {},
        "reconcile_preview": {},
    }
    times: dict[str, list[float]] = {name: [] for name in calls}

    async def main() -> float:
        began = time.perf_counter()
        params = StdioServerParameters(command=STORYD, args=["mcp"], env=env, cwd=str(ws))
        with open(os.devnull, "w") as err:
            async with (stdio_client(params, errlog=err) as (read, write),
                        ClientSession(read, write) as client):
                await client.initialize()
                started = time.perf_counter() - began
                for _ in range(runs):
                    for name, arguments in calls.items():
                        t0 = time.perf_counter()
                        await client.call_tool(name, arguments)
                        times[name].append(time.perf_counter() - t0)
        return started

    started = anyio.run(main)
    print(f"\nMCP tools, {label} ({runs} calls each; session start {started * 1000:.0f} ms)")
    print(f"| {'tool':<18} | median ms |   p90 ms |")
    print(f"| {'-' * 18} | --------- | -------- |")
    for name, values in times.items():
        print(f"| {name:<18} | {_ms(values)} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from storyd.cli.commands.demo import prepare

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ws = root / "ws"
        prepare(str(REPO / "daemon" / "demo"), str(ws))
        (root / "config" / "storyd").mkdir(parents=True)
        (root / "config" / "storyd" / "config.toml").write_text(f"[hooks]\nroots = [{tmp!r}]\n")
        (root / "run").mkdir(mode=0o700)
        sock = root / "run" / "storyd.sock"
        env = dict(os.environ, XDG_CONFIG_HOME=str(root / "config"),
                   XDG_RUNTIME_DIR=str(root / "run"), STORYD_SOCKET=str(sock))
        env.pop("STORYD_LOG_LEVEL", None)
        bench_hooks(ws, env, args.runs, "no daemon (direct read, detectors in process)")
        bench_mcp(ws, env, args.runs, "no daemon")
        daemon = subprocess.Popen([STORYD, "serve", "--socket", str(sock), "--workspace",
                                   str(ws)], env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                done = subprocess.run([STORYD, "ping"], env=env, capture_output=True,
                                      check=False)
                if done.returncode == 0:
                    break
                time.sleep(0.05)
            time.sleep(1.0)  # let the warm-up and the detectors' pass finish
            bench_hooks(ws, env, args.runs, "daemon running")
            bench_in_process(ws, env, args.runs)
            bench_mcp(ws, env, args.runs, "daemon running")
        finally:
            daemon.terminate()
            daemon.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
