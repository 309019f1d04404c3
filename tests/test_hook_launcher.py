"""bin/storyd-hook: the daemon's `hook` op answers every agent's hooks with the bytes and
the exit code `storyd hook` gives, and with no daemon, a stopped one, one of another
version, no nc/socat, or a payload of megabytes, the launcher runs `storyd hook` itself.

Each comparison runs the in-process hook and the launcher on the same session records
(copied back between the two: a hook updates them), with the daemon up. A shadow
`storyd` package on PYTHONPATH proves which ones started no Python: it fails loudly.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from agents_harness import AgentsEnv, demo_workspace, hook_payload, no_python, run_hook
from cli_harness import BIN, path_without
from daemon_harness import DaemonProcess, wait_for

import storyd

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


def _seen_by(daemon: DaemonProcess, ws: Path, text: bytes) -> None:
    """Wait until the daemon's findings for `ws` mention `text`."""

    def seen() -> bool:
        done = subprocess.run([str(BIN / "storyd"), "check", "--workspace", str(ws)],
                              env=daemon.env, capture_output=True, timeout=30, check=False)
        return text in done.stdout

    wait_for(seen, 20, f"the daemon to see {text!r}")


def _restored(env: AgentsEnv, root: Path) -> Callable[[], None]:
    """Put the session records back as they are now (a hook updates them). Only the
    records' folder: a daemon sharing the state home keeps its own files there (its
    history database), and may make the folder again at any moment."""
    records = Path(env.env["XDG_STATE_HOME"]) / "storyd" / "sessions"
    saved = root / "records-now"
    shutil.rmtree(saved, ignore_errors=True)
    if records.exists():
        shutil.copytree(records, saved)

    def restore() -> None:
        shutil.rmtree(records, ignore_errors=True)
        if saved.exists():
            shutil.copytree(saved, records, dirs_exist_ok=True)

    return restore


def _same(event: str, payload: dict[str, object], args: tuple[str, ...], env: AgentsEnv,
          root: Path) -> subprocess.CompletedProcess[bytes]:
    """The in-process hook and the launcher on the same session records: equal; the
    launcher's answer (which started no Python)."""
    restore = _restored(env, root)
    inproc = run_hook(event, payload, env.env, "/", *args)
    restore()
    fast = launch(event, payload, no_python(env.env, root), *args)
    assert b"SHADOW" not in fast.stderr, "the launcher started Python"
    assert (fast.returncode, fast.stdout, fast.stderr) == (
        inproc.returncode, inproc.stdout, inproc.stderr)
    return fast


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["claude", "codex", "cursor", "vscode", "gemini"])
def test_the_op_answers_every_event_as_the_in_process_hook(
        up: tuple[Path, AgentsEnv, DaemonProcess], tmp_path: Path, agent: str) -> None:
    ws, env, daemon = up
    state = ws / EPIC_STATE
    start, args = _agent_payload(agent, "session-start", ws, state)
    assert _same("session-start", start, args, env, tmp_path).stdout  # context given
    run_hook("session-start", start, env.env, "/", *args)  # the session's record
    _git(ws, "add", "work")
    _git(ws, "commit", "-q", "-m", "TASK-0049-0013-004: work landed in this session")
    _seen_by(daemon, ws, b"in this session")  # the list op syncs state files, not refs
    stop, args = _agent_payload(agent, "stop", ws, state)
    held = _same("stop", stop, args, env, tmp_path)
    assert b"TASK-0049-0013-004" in held.stdout and str(BIN / "storyd").encode() in held.stdout
    state.write_bytes(b'{"epic": "0049", "stories": {"story-0049-0013": ')
    edit, args = _agent_payload(agent, "post-tool-use", ws, state)
    told = _same("post-tool-use", edit, args, env, tmp_path)
    assert b"no longer parses" in told.stdout + told.stderr
    assert told.returncode == (2 if agent == "claude" else 0)  # the others: additionalContext


# -- with no daemon, or one that cannot answer: `storyd hook` itself ---------------------------


def _both(event: str, payload: bytes | dict[str, object], env: dict[str, str],
          agents: AgentsEnv, root: Path) -> tuple[subprocess.CompletedProcess[bytes], ...]:
    restore = _restored(agents, root)
    data = orjson.dumps(payload) if isinstance(payload, dict) else payload
    inproc = subprocess.run([str(BIN / "storyd"), "hook", event], input=data, env=env, cwd="/",
                            capture_output=True, timeout=60, check=False)  # fmt: skip
    restore()
    return inproc, launch(event, data, env)


def _equal(a: subprocess.CompletedProcess[bytes], b: subprocess.CompletedProcess[bytes]) -> None:
    assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr)


@pytest.fixture
def session(tmp_path: Path) -> tuple[Path, AgentsEnv]:
    """No daemon: the demo workspace and a session that made TASK-0049-0013-004's commit."""
    ws, env = demo_workspace(tmp_path), AgentsEnv(tmp_path)
    _git(ws, "reset", "-q", "HEAD~1")
    start, _ = _agent_payload("claude", "session-start", ws, ws)
    run_hook("session-start", start, env.env)
    _git(ws, "add", "work")
    _git(ws, "commit", "-q", "-m", "TASK-0049-0013-004: work landed in this session")
    return ws, env


@pytest.mark.slow
def test_with_no_daemon_the_launcher_is_the_python_hook(
        session: tuple[Path, AgentsEnv], tmp_path: Path) -> None:
    ws, env = session
    state = ws / EPIC_STATE
    answers = []
    for event in ("session-start", "stop", "post-tool-use"):
        if event == "post-tool-use":
            state.write_bytes(b"{")
        payload, _ = _agent_payload("claude", event, ws, state)
        inproc, fast = _both(event, payload, env.env, env, tmp_path)
        _equal(inproc, fast)
        answers.append(fast)
    assert b"in flight" in answers[0].stdout and b"TASK-0049-0013-004" in answers[1].stdout
    assert answers[2].returncode == 2 and b"no longer parses" in answers[2].stderr


@pytest.mark.slow
def test_with_no_socket_tool_the_launcher_is_the_python_hook(
        up: tuple[Path, AgentsEnv, DaemonProcess], tmp_path: Path) -> None:
    ws, env, _ = up
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "git").symlink_to(shutil.which("git") or "/usr/bin/git")
    path = path_without("socat", [tools])
    path = os.pathsep.join(p for p in path.split(os.pathsep)
                           if not os.path.exists(os.path.join(p, "nc")))
    assert shutil.which("nc", path=path) is None and shutil.which("socat", path=path) is None
    payload, _ = _agent_payload("claude", "session-start", ws, ws)
    inproc, fast = _both("session-start", payload, dict(env.env, PATH=path), env, tmp_path)
    _equal(inproc, fast)
    assert b"in flight" in fast.stdout
    bare = launch("session-start", payload, no_python(dict(env.env, PATH=path), tmp_path))
    assert bare.returncode == 97, "with no nc or socat it must run Python"


@pytest.mark.slow
def test_a_stopped_daemon_costs_the_timeout_then_python_answers(
        up: tuple[Path, AgentsEnv, DaemonProcess], tmp_path: Path) -> None:
    ws, env, daemon = up
    payload, _ = _agent_payload("claude", "session-start", ws, ws)
    answered = launch("session-start", payload, env.env)
    assert daemon.proc is not None
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    try:
        quick = dict(env.env, STORYD_HOOK_TIMEOUT_MS="300")
        bare = launch("session-start", payload, no_python(quick, tmp_path))
        assert bare.returncode == 97, "after the timeout it must run Python"
        began = time.monotonic()
        stopped = launch("session-start", payload, quick)
        took = time.monotonic() - began
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    _equal(answered, stopped)
    assert took < 2.0, f"{took:.2f} s: the Python hook asked the stopped daemon again"


@pytest.mark.slow
@pytest.mark.parametrize("size", [3 << 20, 5 << 20])
def test_payloads_of_megabytes_with_newlines(
        up: tuple[Path, AgentsEnv, DaemonProcess], tmp_path: Path, size: int) -> None:
    """A Write of megabytes, pretty-printed (newlines between the tokens and escaped in the
    content): through a file the launcher names; over 4 MiB `storyd hook` ignores it."""
    ws, env, _ = up
    state = ws / EPIC_STATE
    state.write_bytes(b'{"epic": "0049"\n')
    payload, _ = _agent_payload("claude", "post-tool-use", ws, state)
    payload["tool_input"] = {"file_path": str(state), "content": "line\n" * (size // 5)}
    data = orjson.dumps(payload, option=orjson.OPT_INDENT_2)
    assert data.count(b"\n") > 5
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    inproc, _ = _both("post-tool-use", data, env.env, env, tmp_path)
    fast = launch("post-tool-use", data, no_python(dict(env.env, TMPDIR=str(scratch)), tmp_path))
    assert not list(scratch.iterdir()), "the launcher's payload file is removed"
    _equal(inproc, fast)
    if size > 4 << 20:
        assert (fast.returncode, fast.stdout, fast.stderr) == (0, b"", b"")
    else:
        assert fast.returncode == 2 and b"no longer parses" in fast.stderr


@pytest.mark.slow
def test_bad_input_is_the_python_hooks_silence(tmp_path: Path) -> None:
    """Not JSON, not an object, an unknown event or flag: as `storyd hook` (no daemon)."""
    env = AgentsEnv(tmp_path).env
    for event, data, args in [("stop", b"not json", ()), ("stop", b"[1, 2]", ()),
                              ("stop", b"", ()), ("session-start", b"{}", ("--config",))]:
        inproc = subprocess.run([str(BIN / "storyd"), "hook", event, *args], input=data,
                                env=env, capture_output=True, timeout=60, check=False)
        fast = subprocess.run([LAUNCHER, event, *args], input=data, env=env,
                              capture_output=True, timeout=60, check=False)
        _equal(inproc, fast)


def test_the_launcher_is_this_storyds_version_and_installed_as_written() -> None:
    source = (REPO / "bin" / "storyd-hook").read_text()
    assert f"\nversion={storyd.__version__} " in source
    assert Path(LAUNCHER).read_text() == source, "reinstall: pip install -e ."
    done = subprocess.run(["sh", "-n", LAUNCHER], capture_output=True, timeout=10, check=False)
    assert done.returncode == 0, done.stderr


def test_the_default_socket_is_named_without_a_fork_of_id(tmp_path: Path) -> None:
    """With neither STORYD_SOCKET nor XDG_RUNTIME_DIR, the launcher asks the socket
    storyd.core.paths names, /tmp/storyd-UID/storyd.sock, its uid read from /proc by
    the shell itself: an `id` on PATH (it would leave a mark) is never run."""
    from storyd.core.paths import socket_path

    env = {k: v for k, v in AgentsEnv(tmp_path).env.items()
           if k not in ("STORYD_SOCKET", "XDG_RUNTIME_DIR")}  # fmt: skip
    tools = tmp_path / "tools"
    tools.mkdir()
    mark = tmp_path / "id-ran"
    (tools / "id").write_text(f"#!/bin/sh\ntouch {mark}\nexec /usr/bin/id \"$@\"\n")
    (tools / "id").chmod(0o755)
    env["PATH"] = f"{tools}{os.pathsep}{env['PATH']}"
    traced = subprocess.run(["sh", "-x", LAUNCHER, "stop"], input=b"not json", env=env,
                            capture_output=True, timeout=60, check=False)  # fmt: skip
    assert (traced.returncode, traced.stdout) == (0, b"")
    assert f"+ sock={socket_path()}\n".encode() in traced.stderr, traced.stderr[-2000:]
    assert socket_path() == f"/tmp/storyd-{os.getuid()}/storyd.sock"
    assert not mark.exists(), "the launcher forked `id`"
    (tools / "status").write_text("Name: sh\n")  # a /proc without it: `id` after all
    fallback = (REPO / "bin" / "storyd-hook").read_text().replace(
        "/proc/self/status", str(tools / "status"))
    (tools / "storyd-hook").write_text(fallback)
    subprocess.run(["sh", "-x", str(tools / "storyd-hook"), "stop"], input=b"not json",
                   env=env, capture_output=True, timeout=60, check=False)  # fmt: skip
    assert mark.exists(), "no uid found: `id -u` names it"


@contextlib.contextmanager
def _fake_daemon(sock_path: Path, reply: Callable[[bytes], bytes]) -> Iterator[None]:
    """A socket at `sock_path` that answers each connection's first line with
    `reply(line)` (nothing: it just closes), on a thread, until the block ends."""
    import socket
    import threading

    sock_path.parent.mkdir(parents=True, exist_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(sock_path))
    server.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                answer = reply(conn.makefile("rb").readline())
                if answer:
                    conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown(socket.SHUT_RDWR)  # wakes accept()
        thread.join(timeout=5)
        server.close()


@pytest.mark.slow
def test_a_daemon_of_another_version_is_not_believed(session: tuple[Path, AgentsEnv],
                                                     tmp_path: Path) -> None:
    """A socket that answers the hook op as storyd 9.9.9 would (a block it must not pass
    on) and closes every other connection: the launcher runs `storyd hook`, which
    finds no daemon there and reads the workspace itself."""

    ws, env = session
    sock_path = Path(env.env["STORYD_SOCKET"])
    asked: list[bytes] = []

    def reply(line: bytes) -> bytes:
        asked.append(line[:30])
        if b'"op":"hook"' in line:
            return b'{"decision":"block","reason":"old"}\n=0 9.9.9\n'
        return b""

    payload, _ = _agent_payload("claude", "stop", ws, ws)
    data = orjson.dumps(payload)
    with _fake_daemon(sock_path, reply):
        fast = launch("stop", data, env.env)
    assert any(b'"op":"hook"' in a for a in asked), asked
    sock_path.unlink()
    inproc = subprocess.run([str(BIN / "storyd"), "hook", "stop"], input=data, env=env.env,
                            capture_output=True, timeout=60, check=False)  # fmt: skip
    _equal(inproc, fast)
    assert b"TASK-0049-0013-004" in fast.stdout and b"old" not in fast.stdout


def _decoded(frame: bytes) -> tuple[int, bytes, bytes]:
    """What a `resume-cli` frame means (protocol.cli_frame): stdout lines (blank ones
    dropped), `!` stderr lines, the last `=code version` line's code."""
    code, out, err = 70, b"", b""
    for line in frame.split(b"\n"):
        if line.startswith(b"!"):
            err += line[1:] + b"\n"
        elif line.startswith(b"="):
            code = int(line[1:].split(b" ")[0])
        elif line:
            out += line + b"\n"
    return code, out, err


@pytest.mark.slow
def test_every_frame_is_printed_as_it_means(tmp_path: Path) -> None:
    """Whatever a daemon of this version frames (one stdout line, several, none, stderr
    lines, blank lines, a stray `=` line), the launcher prints it and exits with its code
    without Python, whether it takes the short way (stdout and the code line) or reads
    the reply line by line."""

    env = AgentsEnv(tmp_path).env
    v = storyd.__version__.encode()
    frames = [b'{"a": 1}\n', b"one\ntwo\n", b"", b"!bad\n!worse\n", b"one\n\ntwo\n",
              b"out\n!err\n", b"=1 x\nout\n", b"\none\n", b"a \\n b\t\"c\"\n"]  # fmt: skip
    answer: list[bytes] = []
    with _fake_daemon(Path(env["STORYD_SOCKET"]), lambda _line: answer[-1]):
        for body in frames:
            for code in (0, 2):
                answer.append(body + b"=%d " % code + v + b"\n")
                done = launch("stop", b"{}", no_python(env, tmp_path))
                got = (done.returncode, done.stdout, done.stderr)
                assert got == _decoded(answer[-1]), answer[-1]
