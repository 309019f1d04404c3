"""The agents' hooks and MCP tools: wall time per call, beside a bare interpreter.

    .venv/bin/python bench/bench_hooks.py --runs 20 [--no-mcp] [--installed VENV/bin]

On a copy of storyd demo's workspace (7 units, git history), each hook runs as the
agents run it: the command `storyd install` writes (bin/storyd-hook, issue 31) through
`sh -c`, with Claude Code's, Cursor's and Gemini CLI's payloads on stdin, beside
`storyd hook EVENT` itself, interleaved with a bare `python -c pass` so load hits all
alike, without a daemon and with one (each command run once untimed first: the first
run keeps config.toml's parse, as every later hook finds it). Then one
`storyd mcp` session (the SDK's stdio client) calls each tool `--runs` times. Medians
and p90, in milliseconds. An editable install's interpreter starts slower (its finder
imports pathlib and re: ~18 ms against ~9 for a wheel's venv), and so does every hook:
`--installed VENV/bin` times another install, with its own python as the bare start.
"""

from __future__ import annotations

import argparse
import os
import random
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


def _payloads(ws: Path) -> dict[str, dict[str, bytes]]:
    """Each agent's payload for each hook (as tests/test_hook_launcher.py sends them)."""
    state = str(ws / "plans/epic-0049/execution-state.json")
    claude = {"session_id": "s", "transcript_path": "/tmp/t.jsonl", "cwd": str(ws)}
    cursor = {"conversation_id": "s", "generation_id": "g", "workspace_roots": [str(ws)],
              "cursor_version": "1.7.2"}
    gemini = {**claude, "timestamp": "2026-11-25T10:30:00.000Z"}
    shaped = {
        "claude": {
            "session-start": {**claude, "hook_event_name": "SessionStart", "source": "startup"},
            "stop": {**claude, "hook_event_name": "Stop", "stop_hook_active": False},
            "post-tool-use": {**claude, "hook_event_name": "PostToolUse", "tool_name": "Edit",
                              "tool_input": {"file_path": state}},
        },
        "cursor": {
            "session-start": {**cursor, "hook_event_name": "sessionStart"},
            "stop": {**cursor, "hook_event_name": "stop", "status": "completed",
                     "loop_count": 0},
            "post-tool-use": {**cursor, "hook_event_name": "afterFileEdit", "file_path": state,
                              "edits": [{"old_string": "a", "new_string": "b"}]},
        },
        "gemini": {
            "session-start": {**gemini, "hook_event_name": "SessionStart", "source": "startup"},
            "stop": {**gemini, "hook_event_name": "AfterAgent", "prompt": "go",
                     "prompt_response": "ok", "stop_hook_active": False},
            "post-tool-use": {**gemini, "hook_event_name": "AfterTool",
                              "tool_name": "replace", "tool_input": {"file_path": state}},
        },
    }
    return {agent: {event: orjson.dumps(p) for event, p in events.items()}
            for agent, events in shaped.items()}


def hook_workspace(root: Path) -> tuple[Path, dict[str, str]]:
    """A copy of storyd demo's workspace under `root`, with a configuration that lets
    hooks run there and an environment of its own homes (no daemon's socket yet)."""
    from storyd.cli.commands.demo import prepare

    ws = root / "ws"
    prepare(str(REPO / "daemon" / "demo"), str(ws))
    (root / "config" / "storyd").mkdir(parents=True)
    (root / "config" / "storyd" / "config.toml").write_text(f"[hooks]\nroots = [{str(root)!r}]\n")
    (root / "run").mkdir(mode=0o700)
    env = dict(os.environ, XDG_CONFIG_HOME=str(root / "config"),
               XDG_RUNTIME_DIR=str(root / "run"), STORYD_SOCKET=str(root / "run" / "storyd.sock"),
               XDG_STATE_HOME=str(root / "state"), XDG_CACHE_HOME=str(root / "cache"))
    env.pop("STORYD_LOG_LEVEL", None)
    return ws, env


def bench_hooks(ws: Path, env: dict[str, str], runs: int, label: str, storyd: str = STORYD,
                python: str = sys.executable) -> None:  # fmt: skip
    """Each hook as `storyd install` writes it (bin/storyd-hook by absolute path), run
    through `sh -c` as the agents run it, beside `storyd hook` itself and a bare
    interpreter, all interleaved, in a shuffled order each round (a run right after a
    stop starts about 0.6 ms slower: in one fixed order, every "as installed"
    post-tool-use followed a stop)."""
    from storyd.agents.installs import command

    bare = "bare interpreter (python -c pass)"
    rows: dict[str, list[float]] = {bare: []}
    runs_of: dict[str, tuple[list[str], bytes]] = {}
    for agent, events in _payloads(ws).items():
        for event, data in events.items():
            installed = command(storyd, event, agent)
            assert "storyd-hook" in installed, installed
            runs_of[f"{agent} {event}, as installed"] = (["sh", "-c", installed], data)
            flag = [] if agent == "claude" else ["--agent", agent]
            runs_of[f"{agent} {event}, storyd hook"] = ([storyd, "hook", event, *flag], data)
    runs_of["bad stdin (not JSON), as installed"] = (
        ["sh", "-c", command(storyd, "stop", "claude")], b"not json")
    rows.update({name: [] for name in runs_of})
    for argv, data in runs_of.values():  # untimed: the first run keeps config.toml's parse
        _timed(argv, data, env)
    runs_of[bare] = ([python, "-c", "pass"], b"")
    names = list(runs_of)
    order = random.Random(31)
    for _ in range(runs):  # a new order each round: no row always runs right after a stop
        order.shuffle(names)
        for name in names:
            rows[name].append(_timed(*runs_of[name], env))
    base = statistics.median(rows[bare])
    load = os.getloadavg()
    print(f"\nhooks, {label} ({runs} runs each; load average {load[0]:.2f} {load[1]:.2f})")
    print(f"| {'command':<36} | median ms |   p90 ms | x bare |")
    print(f"| {'-' * 36} | --------- | -------- | ------ |")
    for name, values in rows.items():
        ratio = statistics.median(values) / base
        print(f"| {name:<36} | {_ms(values)} | {ratio:6.2f} |")


def bench_in_process(ws: Path, env: dict[str, str], runs: int) -> None:
    """The hooks' own work: storyd.api.hooks.answer called in this process, imports done,
    the units from the daemon's list (as `storyd hook` reads them)."""
    from storyd.api.hooks import source
    from storyd.api.hooks.answer import answer

    saved = dict(os.environ)
    os.environ.update(env)

    def units(workspace: str) -> list[dict[str, object]]:
        return source.units(workspace, in_flight=True).units

    print(f"\nhooks' own work in one process, daemon running ({runs * 5} calls each)")
    print(f"| {'hook':<14} | median ms |   p90 ms |")
    print(f"| {'-' * 14} | --------- | -------- |")
    try:
        cfg = source.load_config(None)
        for event, data in _payloads(ws)["claude"].items():
            payload = orjson.loads(data)
            times = []
            for _ in range(runs * 5):
                began = time.perf_counter()
                answer(event, payload, None, cfg, units, [STORYD])
                times.append(time.perf_counter() - began)
            print(f"| {event:<14} | {_ms(times)} |")
    finally:
        os.environ.clear()
        os.environ.update(saved)


def bench_mcp(ws: Path, env: dict[str, str], runs: int, label: str,
              storyd: str = STORYD) -> None:  # fmt: skip
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
        params = StdioServerParameters(command=storyd, args=["mcp"], env=env, cwd=str(ws))
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
    parser.add_argument("--no-mcp", action="store_true", help="the hooks only")
    parser.add_argument("--installed", metavar="BIN", help="time the storyd, storyd-hook and "
                        "python of this folder (a venv's bin/: a non-editable install, or "
                        "main's) instead of this interpreter's")
    args = parser.parse_args()
    where = Path(args.installed).resolve() if args.installed else BIN
    storyd, python = str(where / "storyd"), (str(where / "python") if args.installed
                                             else sys.executable)  # fmt: skip
    print(f"timing {storyd} (bare: {python} -c pass)")
    sys.path.insert(0, str(REPO))
    # an installed storyd starts from bytecode (pip compiles it); a checkout whose
    # environment sets PYTHONDONTWRITEBYTECODE would compile every module at every start
    import compileall

    compileall.compile_dir(str(REPO / "daemon"), quiet=1)
    compileall.compile_dir(str(REPO / "detectors"), quiet=1)

    with tempfile.TemporaryDirectory() as tmp:
        ws, env = hook_workspace(Path(tmp))
        sock = Path(env["STORYD_SOCKET"])
        bench_hooks(ws, env, args.runs, "no daemon (direct read, detectors in process)",
                    storyd, python)
        if not args.no_mcp:
            bench_mcp(ws, env, args.runs, "no daemon", storyd)
        daemon = subprocess.Popen([storyd, "serve", "--socket", str(sock), "--workspace",
                                   str(ws)], env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                done = subprocess.run([storyd, "ping"], env=env, capture_output=True,
                                      check=False)
                if done.returncode == 0:
                    break
                time.sleep(0.05)
            time.sleep(1.0)  # let the warm-up and the detectors' pass finish
            bench_hooks(ws, env, args.runs, "daemon running", storyd, python)
            bench_in_process(ws, env, args.runs)
            if not args.no_mcp:
                bench_mcp(ws, env, args.runs, "daemon running", storyd)
        finally:
            daemon.terminate()
            daemon.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
