"""Issue 39: every file a repository or another program controls is opened without
blocking, read with a bound, and written without following a link.

Real FIFOs (mkfifo), real links to /dev/zero, real `storyd` processes and a real daemon.
Each child runs under a time bound and an address-space bound (RLIMIT_AS): before these
fixes a FIFO hung the process for ever, and /dev/zero was read until memory ran out.
"""

from __future__ import annotations

import base64
import os
import resource
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from agents_harness import AgentsEnv, demo_workspace, hook_payload
from cli_harness import STORYD
from daemon_harness import DaemonProcess, Line

Spawn = Callable[..., DaemonProcess]
BOUND = 20.0  # seconds: each of these hung for ever (or ran out of memory) before
MEMORY = 1 << 30  # bytes of address space a child may map: /dev/zero read whole fails
SESSION = "0c4b9f0e-39aa-4e1d-9a8e-hostile-opens"
EPIC_STATE = "plans/epic-0049/execution-state.json"


def _bounded() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def run(argv: list[str], env: dict[str, str], data: bytes | None = None,
        cwd: Path | str = "/") -> subprocess.CompletedProcess[bytes]:
    """Run a child within BOUND seconds and MEMORY bytes; a hang fails the test."""
    try:
        return subprocess.run(argv, input=data, env=env, cwd=cwd, capture_output=True,
                              timeout=BOUND, check=False, preexec_fn=_bounded)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(argv)} did not end within {BOUND:g} s")


def hook(event: str, ws: Path, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    """`storyd hook EVENT` (no daemon) on the demo workspace, debug lines on stderr."""
    fields: dict[str, object] = {
        "session-start": {"source": "startup"}, "stop": {"stop_hook_active": False},
        "post-tool-use": {"tool_name": "Edit", "tool_input": {"file_path": str(ws / EPIC_STATE)}},
    }[event]  # type: ignore[assignment]
    name = {"session-start": "SessionStart", "stop": "Stop", "post-tool-use": "PostToolUse"}
    payload = hook_payload(name[event], ws, session_id=SESSION, **fields)
    done = run([STORYD, "hook", event], dict(env, STORYD_LOG_LEVEL="debug"), orjson.dumps(payload))
    stderr = done.stderr.decode(errors="replace")
    assert "Traceback" not in stderr and "MemoryError" not in stderr, stderr[-2000:]
    return done


def record_path(env: dict[str, str]) -> Path:
    """Where SESSION's record lives under `env`'s XDG_STATE_HOME (api/sessions.py)."""
    from storyd.core.digest import sha256_hex

    key = sha256_hex(SESSION.encode())[:32]
    return Path(env["XDG_STATE_HOME"]) / "storyd" / "sessions" / f"{key}.json"


def hostile(path: Path, kind: str) -> None:
    """Put a FIFO, or a link to /dev/zero, at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


@pytest.fixture
def agents(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The demo workspace and a private environment (no daemon), its own cache home."""
    ws = demo_workspace(tmp_path)
    env = dict(AgentsEnv(tmp_path).env, XDG_CACHE_HOME=str(tmp_path / "cache"))
    return ws, env


class TestHookOp:
    """The daemon's `hook` op reads the payload file off its event loop, refusing a
    FIFO or a device at once, and answers everyone else meanwhile."""

    @staticmethod
    def _request(daemon: DaemonProcess, file: Path) -> dict[str, object]:
        homes = {n: daemon.env.get(n, "") for n in ("HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME")}
        return {"op": "hook", "event": "session-start", "file": str(file),
                "storyd": STORYD, "env": homes}  # fmt: skip

    @pytest.mark.slow
    @pytest.mark.parametrize("kind", ["fifo", "zero"])
    def test_a_fifo_or_device_payload_file_is_an_error_answered_at_once(
            self, tmp_path: Path, spawn_daemon: Spawn, kind: str) -> None:
        ws = demo_workspace(tmp_path)
        daemon = spawn_daemon([ws])
        payload = tmp_path / "payload"
        hostile(payload, kind)
        asked = Line(daemon.socket, timeout=BOUND)
        try:
            started = time.monotonic()
            asked.send(self._request(daemon, payload))
            # meanwhile another client's query is answered: the loop is not held
            with Line(daemon.socket, timeout=5.0) as other:
                answer = other.request({"op": "resume", "workspace": str(ws), "epic": "0049",
                                        "story": "story-0049-0013"})  # fmt: skip
            assert answer.get("ok") is True, answer
            refused = asked.read()
            took = time.monotonic() - started
        finally:
            asked.close()
        assert refused.get("ok") is False, refused
        error = refused["error"]
        assert isinstance(error, dict) and error["code"] == 75, error
        named = "a FIFO" if kind == "fifo" else "a character device"
        assert f"not a regular file ({named})" in str(error["message"]), error
        assert took < 5.0, f"{took:.2f} s to refuse the payload file"
        assert daemon.running()

    @pytest.mark.slow
    def test_a_regular_payload_file_is_still_answered(
            self, tmp_path: Path, spawn_daemon: Spawn) -> None:
        """The file read on the worker gives the same answer as the payload inline."""
        ws = demo_workspace(tmp_path)
        daemon = spawn_daemon([ws])
        data = orjson.dumps(hook_payload("SessionStart", ws, source="startup",
                                         session_id=SESSION))  # fmt: skip
        payload = tmp_path / "payload"
        payload.write_bytes(data)
        request = self._request(daemon, payload)
        inline = dict(request, payload=base64.b64encode(data).decode())
        del inline["file"]
        with Line(daemon.socket, timeout=BOUND) as line:
            line.send(inline)
            by_value = line.read_raw()
        record_path(daemon.env).unlink()  # the same session starts again
        with Line(daemon.socket, timeout=BOUND) as line:
            line.send(request)
            by_file = line.read_raw()
        assert b"unit(s) in flight" in by_file
        assert by_file.split(b"\n=")[0] == by_value.split(b"\n=")[0]


class TestSessionRecords:
    """A FIFO or a link where a session's record is, or a link for its folder: refused
    at once, never waited on, never written through."""

    @pytest.mark.slow
    @pytest.mark.parametrize("event", ["session-start", "post-tool-use", "stop"])
    @pytest.mark.parametrize("kind", ["fifo", "zero"])
    def test_a_hostile_record_is_unreadable_and_replaced(
            self, agents: tuple[Path, dict[str, str]], event: str, kind: str) -> None:
        ws, env = agents
        record = record_path(env)
        hostile(record, kind)
        started = time.monotonic()
        done = hook(event, ws, env)
        assert done.returncode in (0, 2), done.stderr.decode(errors="replace")
        assert time.monotonic() - started < BOUND
        # the record begun afresh replaced the FIFO or the link (a rename: no link followed)
        assert stat.S_ISREG(record.lstat().st_mode)
        assert orjson.loads(record.read_bytes())["session"] == SESSION

    @pytest.mark.slow
    def test_a_linked_sessions_folder_is_never_written(
            self, agents: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
        ws, env = agents
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        folder = record_path(env).parent
        folder.parent.mkdir(parents=True)
        folder.symlink_to(elsewhere)
        done = hook("session-start", ws, env)
        assert done.returncode == 0
        assert b"unit(s) in flight" in done.stdout  # the hook still answers
        assert list(elsewhere.iterdir()) == []

    def test_a_fifo_at_the_temporary_name_is_not_written_into(
            self, tmp_path: Path) -> None:
        """save() makes its temporary file new (O_EXCL): a FIFO put at that name (this
        process's pid) is removed, not opened for writing (which waits for a reader)."""
        code = (
            "import os, sys\n"
            "from storyd.api import sessions\n"
            "folder = os.path.dirname(sessions.record_path('s'))\n"
            "os.makedirs(folder)\n"
            "os.mkfifo(os.path.join(folder, f'.record-{os.getpid()}.tmp'))\n"
            "saved = sessions.save({'session': 's', 'files': {}})\n"
            "print(saved, sessions.load('s') is not None, sorted(os.listdir(folder)))\n"
        )
        env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
        done = run([sys.executable, "-c", code], env)
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        out = done.stdout.decode().split(" ", 2)
        assert out[:2] == ["True", "True"] and ".record-" not in out[2], done.stdout


class TestConfig:
    """config.toml (or its kept parse) as a FIFO or a link to /dev/zero: one clear
    line, at once, in bounded memory."""

    @pytest.mark.slow
    @pytest.mark.parametrize("kind", ["fifo", "zero"])
    def test_config_check_names_the_file(self, agents: tuple[Path, dict[str, str]],
                                         kind: str) -> None:
        _ws, env = agents
        config = Path(env["XDG_CONFIG_HOME"]) / "storyd" / "config.toml"
        hostile(config, kind)
        done = run([STORYD, "config", "check"], env)
        stderr = (done.stdout + done.stderr).decode(errors="replace")
        assert done.returncode == 78, stderr
        assert "Traceback" not in stderr and "MemoryError" not in stderr, stderr[-2000:]
        named = "a FIFO" if kind == "fifo" else "a character device"
        assert f"cannot read: not a regular file ({named})" in stderr, stderr
        assert len(stderr.strip().splitlines()) == 1, stderr

    @pytest.mark.slow
    @pytest.mark.parametrize("kind", ["fifo", "zero"])
    def test_a_hook_with_a_hostile_config_ends_at_once(
            self, agents: tuple[Path, dict[str, str]], kind: str) -> None:
        ws, env = agents
        hostile(Path(env["XDG_CONFIG_HOME"]) / "storyd" / "config.toml", kind)
        done = hook("session-start", ws, env)
        assert done.returncode == 0
        assert b"not a regular file" in done.stderr, done.stderr  # its debug line says why

    @pytest.mark.slow
    def test_a_fifo_where_the_parse_is_kept_is_passed_over(
            self, agents: tuple[Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch) -> None:
        ws, env = agents
        from storyd.config.parsed import cache_file

        config = Path(env["XDG_CONFIG_HOME"]) / "storyd" / "config.toml"
        monkeypatch.setenv("XDG_CACHE_HOME", env["XDG_CACHE_HOME"])
        kept = Path(cache_file(str(config)))
        hostile(kept, "fifo")
        done = hook("session-start", ws, env)
        assert done.returncode == 0 and b"unit(s) in flight" in done.stdout, done.stderr
        assert stat.S_ISREG(kept.lstat().st_mode)  # parsed again and kept in its place


class TestGitFiles:
    """.git/HEAD or a worktree's `.git` file as a FIFO or a link to /dev/zero: the
    hook and resume end in bounded time and memory."""

    @pytest.mark.slow
    @pytest.mark.parametrize("where", [".git/HEAD", ".git"])
    @pytest.mark.parametrize("kind", ["fifo", "zero"])
    def test_hook_and_resume_end(self, agents: tuple[Path, dict[str, str]], where: str,
                                 kind: str) -> None:
        ws, env = agents
        if where == ".git":  # a linked worktree's `gitdir:` file
            subprocess.run(["rm", "-rf", str(ws / ".git")], check=True)
        hostile(ws / where, kind)
        done = hook("session-start", ws, env)
        assert done.returncode == 0
        resumed = run([STORYD, "resume", "--direct", "--epic-id", "0049", "--story-id",
                       "story-0049-0013"], env, cwd=ws)
        stderr = resumed.stderr.decode(errors="replace")
        assert "Traceback" not in stderr and "MemoryError" not in stderr, stderr[-2000:]
        assert resumed.returncode in (0, 1, 2), stderr


class TestCompanions:
    """A companion file or a flow table as a FIFO: refused at once (no table, a
    finding), never waited on."""

    @pytest.mark.slow
    def test_a_fifo_flow_table_is_no_table(self, agents: tuple[Path, dict[str, str]]) -> None:
        ws, env = agents
        flows = ws / ".claude" / "skills" / "autodev" / "flows"
        for flow in ("greenfield", "existing-code", "meta-repo"):
            hostile(flows / f"{flow}.md", "fifo")
        done = run([STORYD, "status", "--direct", "--workspace", str(ws)], env, cwd=ws)
        stderr = done.stderr.decode(errors="replace")
        assert "Traceback" not in stderr, stderr[-2000:]

    def test_find_flow_table_never_opens_a_fifo_even_if_swapped_in(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """The check and the read are one (read_regular): a regular file swapped for a
        FIFO between a stat and an open used to block the read for ever."""
        from storyd.core.formats import flowtable
        from storyd.core.formats.base import Source

        table = tmp_path / ".claude" / "skills" / "autodev" / "flows" / "greenfield.md"
        table.parent.mkdir(parents=True)
        os.mkfifo(table)
        real_isfile = os.path.isfile
        monkeypatch.setattr(os.path, "isfile", lambda p: p == str(table) or real_isfile(p))
        found: list[object] = []
        reader = threading.Thread(target=lambda: found.append(
            flowtable.find_flow_table(Source(str(tmp_path)), "greenfield")), daemon=True)
        reader.start()
        reader.join(5.0)
        if reader.is_alive():  # free the blocked open(2): a writer at last
            os.close(os.open(table, os.O_WRONLY | os.O_NONBLOCK))
            reader.join(5.0)
            pytest.fail("find_flow_table waited on a FIFO")
        assert found == [None]


class TestHistoryDatabase:
    """`storyd history` on a history database that is a FIFO or a link to a device:
    one line at once (SQLite's read-only open of a FIFO waited for a writer for ever)."""

    @pytest.mark.slow
    @pytest.mark.parametrize("kind", ["fifo", "zero"])
    def test_history_names_the_file(self, agents: tuple[Path, dict[str, str]], tmp_path: Path,
                                    kind: str) -> None:
        ws, env = agents
        database = tmp_path / "history.sqlite3"
        hostile(database, kind)
        done = run([STORYD, "history", "--epic-id", "0049", "--story-id", "story-0049-0013",
                    "--workspace", str(ws)], dict(env, STORYD_HISTORY=str(database)), cwd=ws)
        stderr = (done.stdout + done.stderr).decode(errors="replace")
        assert done.returncode == 78, stderr
        named = "a FIFO" if kind == "fifo" else "a character device"
        assert stderr.strip() == (f"storyd history: cannot read history database {database}: "
                                  f"not a regular file ({named})"), stderr

    def test_the_writer_moves_a_fifo_aside(self, tmp_path: Path) -> None:
        """The daemon's read-write open is refused by SQLite (no wait): moved aside as
        corrupt, and a new database begun."""
        from storyd.api.history_db import open_writer

        database = tmp_path / "history.sqlite3"
        os.mkfifo(database)
        writer = open_writer(str(database))
        try:
            assert writer.moved is not None and stat.S_ISFIFO(os.lstat(writer.moved).st_mode)
            assert stat.S_ISREG(database.lstat().st_mode)
        finally:
            writer.close()
