"""bin/storyd-hook: the daemon's `hook` op answers every agent's hooks with the bytes and
the exit code `storyd hook` gives, and with no daemon, a stopped one, one of another
version, no nc/socat, or a payload of megabytes, the launcher runs `storyd hook` itself.

Each comparison runs the in-process hook and the launcher on the same session records
(copied back between the two: a hook updates them), with the daemon up. A shadow
`storyd` package on PYTHONPATH proves which ones started no Python: it fails loudly.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from agents_harness import AgentsEnv, demo_workspace, hook_payload, run_hook
from cli_harness import BIN
from daemon_harness import DaemonProcess

LAUNCHER = str(BIN / "storyd-hook")
REPO = Path(__file__).resolve().parents[1]
EPIC_STATE = "plans/epic-0049/execution-state.json"
SESSION = "5f0c1a2e-0b7e-4a51-9d63-0c2f0d1e8a11"


def launch(event: str, payload: bytes | dict[str, object], env: dict[str, str],
           *args: str) -> subprocess.CompletedProcess[bytes]:
    """The launcher as an agent runs it: the payload on stdin, through `sh -c`."""
    data = orjson.dumps(payload) if isinstance(payload, dict) else payload
    return subprocess.run([LAUNCHER, event, *args], input=data, env=env, cwd="/",
                          capture_output=True, timeout=60, check=False)  # fmt: skip


def no_python(env: dict[str, str], root: Path) -> dict[str, str]:
    """`env` where any Python storyd started fails: exit 97 and SHADOW on stderr."""
    shadow = root / "shadow" / "storyd"
    shadow.mkdir(parents=True, exist_ok=True)
    (shadow / "__init__.py").write_text("import sys\nsys.stderr.write('SHADOW\\n')\nsys.exit(97)\n")
    (shadow / "cli").mkdir(exist_ok=True)
    (shadow / "cli" / "__init__.py").write_text("")
    return dict(env, PYTHONPATH=str(root / "shadow"))


def _agent_payload(agent: str, event: str, ws: Path,
                   state: Path) -> tuple[dict[str, object], tuple[str, ...]]:
    """Each agent's own payload for each event (as tests/test_hook_agents.py sends them)."""
    flag: tuple[str, ...] = ("--agent", agent) if agent in ("codex",) else ()
    if agent == "cursor":
        base = {"conversation_id": SESSION, "generation_id": "g", "workspace_roots": [str(ws)],
                "cursor_version": "1.7.2"}
        shaped = {"session-start": {"hook_event_name": "sessionStart"},
                  "stop": {"hook_event_name": "stop", "status": "completed", "loop_count": 0},
                  "post-tool-use": {"hook_event_name": "afterFileEdit", "file_path": str(state),
                                    "edits": [{"old_string": "a\nb", "new_string": "c"}]}}
        return {**base, **shaped[event]}, flag
    if agent == "gemini":
        base = {"session_id": SESSION, "transcript_path": "/tmp/t.json", "cwd": str(ws),
                "timestamp": "2026-11-25T10:30:00.000Z"}
        shaped = {"session-start": {"hook_event_name": "SessionStart", "source": "startup"},
                  "stop": {"hook_event_name": "AfterAgent", "prompt": "go\nnow",
                           "prompt_response": "ok", "stop_hook_active": False},
                  "post-tool-use": {"hook_event_name": "AfterTool", "tool_name": "write_file",
                                    "tool_input": {"file_path": str(state), "content": "{"},
                                    "tool_response": {"llmContent": ""}}}
        return {**base, **shaped[event]}, flag
    if agent == "vscode":
        base = {"timestamp": "2026-11-25T10:30:00.000Z", "cwd": str(ws), "sessionId": SESSION}
        shaped = {"session-start": {"hookEventName": "SessionStart", "source": "new"},
                  "stop": {"hookEventName": "Stop", "stop_hook_active": False},
                  "post-tool-use": {"hookEventName": "PostToolUse", "tool_name": "editFiles",
                                    "tool_input": {"filePath": str(state)}}}
        return {**base, **shaped[event]}, flag
    names = {"session-start": ("SessionStart", {"source": "startup"}),
             "stop": ("Stop", {"stop_hook_active": False}),
             "post-tool-use": ("PostToolUse", {"tool_name": "Write", "tool_input": {
                 "file_path": str(state), "content": "{\n"}})}
    name, fields = names[event]
    return hook_payload(name, ws, session_id=SESSION, **fields), flag


def _git(ws: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(ws), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                   capture_output=True, timeout=30, check=True)


@pytest.fixture
def up(tmp_path: Path, spawn_daemon: Callable[..., DaemonProcess]
       ) -> tuple[Path, AgentsEnv, DaemonProcess]:
    """The demo workspace, a daemon watching it with the hooks' environment, and a session
    that began before TASK-0049-0013-004's commit and made it (stop blocks)."""
    ws, env = demo_workspace(tmp_path), AgentsEnv(tmp_path)
    _git(ws, "reset", "-q", "HEAD~1")
    daemon = spawn_daemon([ws], start=False)
    daemon.env = env.env
    daemon.start()
    return ws, env, daemon


def _same(event: str, payload: dict[str, object], args: tuple[str, ...], env: AgentsEnv,
          root: Path) -> subprocess.CompletedProcess[bytes]:
    """The in-process hook and the launcher on the same session records: equal; the
    launcher's answer (which started no Python)."""
    state = Path(env.env["XDG_STATE_HOME"])
    saved = root / "saved-state"
    shutil.rmtree(saved, ignore_errors=True)
    if state.exists():
        shutil.copytree(state, saved)
    inproc = run_hook(event, payload, env.env, "/", *args)
    shutil.rmtree(state, ignore_errors=True)
    if saved.exists():
        shutil.copytree(saved, state)
    fast = launch(event, payload, no_python(env.env, root), *args)
    assert b"SHADOW" not in fast.stderr, "the launcher started Python"
    assert (fast.returncode, fast.stdout, fast.stderr) == (
        inproc.returncode, inproc.stdout, inproc.stderr)
    return fast


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["claude", "codex", "cursor", "vscode", "gemini"])
def test_the_op_answers_every_event_as_the_in_process_hook(
        up: tuple[Path, AgentsEnv, DaemonProcess], tmp_path: Path, agent: str) -> None:
    ws, env, _ = up
    state = ws / EPIC_STATE
    start, args = _agent_payload(agent, "session-start", ws, state)
    assert _same("session-start", start, args, env, tmp_path).stdout  # context given
    run_hook("session-start", start, env.env, "/", *args)  # the session's record
    _git(ws, "add", "work")
    _git(ws, "commit", "-q", "-m", "TASK-0049-0013-004: work landed in this session")
    stop, args = _agent_payload(agent, "stop", ws, state)
    held = _same("stop", stop, args, env, tmp_path)
    assert b"TASK-0049-0013-004" in held.stdout and str(BIN / "storyd").encode() in held.stdout
    state.write_bytes(b'{"epic": "0049", "stories": {"story-0049-0013": ')
    edit, args = _agent_payload(agent, "post-tool-use", ws, state)
    told = _same("post-tool-use", edit, args, env, tmp_path)
    assert b"no longer parses" in told.stdout + told.stderr
    assert told.returncode == (0 if agent in ("cursor", "gemini") else 2)
