"""A session's claims in its hooks (issue 45): session-start tells what the session and the
others hold and leaves `STORYD_OWNER=session:<id>` in Claude Code's `$CLAUDE_ENV_FILE`
(a hostile id or file is left alone), and session-end releases the session's claims.
Each hook is the real `storyd hook` (or bin/storyd-hook answered by a real daemon) with
the agent's JSON payload, on storyd demo's workspace."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from agents_harness import AgentsEnv, demo_workspace, hook_payload, run_hook
from cli_harness import BIN, STORYD, lean_pythonpath
from daemon_harness import DaemonProcess
from epic_state_harness import EPIC, STATE, STORY

from storyd.api import claims
from storyd.api.hooks.owner_env import MAX_BYTES, export_owner, owner_line

SESSION = hook_payload("SessionStart", "/")["session_id"]
OWNER_LINE = f"export STORYD_OWNER='session:{SESSION}'\n"
TARGET = ("--epic-id", EPIC, "--story-id", STORY)


def storyd(env: dict[str, str], ws: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([STORYD, *args, "--workspace", str(ws)], env=env,
                          capture_output=True, timeout=60, check=False)  # fmt: skip


def started(ws: Path, env: dict[str, str], **fields: object) -> subprocess.CompletedProcess[bytes]:
    """Claude Code's SessionStart, as `storyd hook session-start` (exit 0 asserted)."""
    payload = hook_payload("SessionStart", ws, source="startup", **fields)
    done = run_hook("session-start", payload, env)
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
    return done


def context(done: subprocess.CompletedProcess[bytes]) -> str:
    return str(orjson.loads(done.stdout)["hookSpecificOutput"]["additionalContext"])


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The demo workspace and the hooks' environment (claims under its XDG_STATE_HOME)."""
    return demo_workspace(tmp_path), AgentsEnv(tmp_path).env


@pytest.mark.slow
class TestSessionStart:
    """What session-start tells the session, and what it leaves in its environment."""

    def test_tells_what_the_session_holds_and_what_others_hold(
        self, setup: tuple[Path, dict[str, str]]
    ) -> None:
        ws, env = setup
        mine = storyd(env, ws, "claim", *TARGET, "--task", "1", "--owner", f"session:{SESSION}")
        theirs = storyd(env, ws, "claim", *TARGET, "--task", "2", "--owner", "alice")
        assert mine.returncode == 0 and theirs.returncode == 0, mine.stderr + theirs.stderr
        text = context(started(ws, env))
        assert "unit(s) in flight" in text  # the claims come after the units, in one answer
        block = text[text.index("storyd claims:") :].splitlines()
        assert block[1].startswith(f"- you hold {STATE} {STORY} task 1 (token 1, ")
        assert block[2].startswith(f"- alice holds {STATE} {STORY} task 2 until ")
        assert block[2].endswith(": leave it to them") and len(block) == 3

    def test_no_claims_database_no_claims_lines_and_none_made(
        self, setup: tuple[Path, dict[str, str]]
    ) -> None:
        ws, env = setup
        assert "storyd claims:" not in context(started(ws, env))
        assert not (Path(env["XDG_STATE_HOME"]) / "storyd" / "claims.sqlite3").exists()

    def test_leaves_the_owner_in_claude_codes_env_file_for_the_agents_storyd_claim(
        self, setup: tuple[Path, dict[str, str]], tmp_path: Path
    ) -> None:
        """The export line, sourced as Claude Code sources it before a Bash tool command,
        makes `storyd claim` (no --owner) claim as the session."""
        ws, env = setup
        env_file = tmp_path / "session-env" / "sessionstart-hook-0.sh"
        env_file.parent.mkdir()
        started(ws, dict(env, CLAUDE_ENV_FILE=str(env_file)))
        assert env_file.read_text() == OWNER_LINE
        assert env_file.stat().st_mode & 0o777 == 0o600
        script = f'. "$1" && exec "$2" claim --workspace "$3" {" ".join(TARGET)} --json'
        env.pop("STORYD_OWNER", None)
        done = subprocess.run(["sh", "-c", script, "sh", str(env_file), STORYD, str(ws)],
                              env=env, capture_output=True, timeout=60, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert orjson.loads(done.stdout)["owner"] == f"session:{SESSION}"

    def test_appends_to_a_line_claude_code_left_unended(
        self, setup: tuple[Path, dict[str, str]], tmp_path: Path
    ) -> None:
        ws, env = setup
        env_file = tmp_path / "env.sh"
        env_file.write_text("export A=1")
        started(ws, dict(env, CLAUDE_ENV_FILE=str(env_file)))
        assert env_file.read_text() == "export A=1\n" + OWNER_LINE

    @pytest.mark.parametrize("session", [
        "x'; touch /tmp/storyd-pwned; '", "a\nexport PATH=/evil", "$(id)", "a b", "é", "x" * 129,
    ])  # fmt: skip
    def test_a_hostile_session_id_writes_nothing(
        self, setup: tuple[Path, dict[str, str]], tmp_path: Path, session: str
    ) -> None:
        ws, env = setup
        env_file = tmp_path / "env.sh"
        started(ws, dict(env, CLAUDE_ENV_FILE=str(env_file)), session_id=session)
        assert not env_file.exists()


class TestOwnerEnv:
    """The env file is Claude Code's: only a regular file of the user's gets one line."""

    @pytest.mark.parametrize("session", ["", None, "a'b", "a;b", "a\0b", "a/b", "x" * 129])
    def test_only_safe_ids_make_a_line(self, session: str | None) -> None:
        assert owner_line(session) is None

    def test_a_uuid_makes_the_quoted_line(self) -> None:
        assert owner_line(str(SESSION)) == OWNER_LINE
        assert owner_line("a.b_C-9") == "export STORYD_OWNER='session:a.b_C-9'\n"

    def test_a_symlink_is_not_followed(self, tmp_path: Path) -> None:
        target = tmp_path / "bashrc"
        target.write_text("keep\n")
        (tmp_path / "env.sh").symlink_to(target)
        assert not export_owner(str(tmp_path / "env.sh"), "s1")
        assert target.read_text() == "keep\n"

    def test_a_fifo_is_never_waited_on(self, tmp_path: Path) -> None:
        fifo = tmp_path / "env.sh"
        os.mkfifo(fifo)
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a writer's open would succeed
        try:
            done = threading.Event()
            result: list[bool] = []
            worker = threading.Thread(target=lambda: (result.append(
                export_owner(str(fifo), "s1")), done.set()))  # fmt: skip
            worker.start()
            assert done.wait(5), "export_owner blocked on a FIFO"
            worker.join()
            assert result == [False]
            assert os.read(reader, 100) == b""  # nothing was written to it
        finally:
            os.close(reader)

    def test_a_folder_a_relative_path_a_hard_link_or_a_huge_file_is_left_alone(
        self, tmp_path: Path
    ) -> None:
        assert not export_owner(str(tmp_path), "s1")
        assert not export_owner("env.sh", "s1")
        assert not export_owner(str(tmp_path / "absent" / "env.sh"), "s1")
        linked = tmp_path / "linked.sh"
        linked.write_text("")
        os.link(linked, tmp_path / "other")
        assert not export_owner(str(linked), "s1")
        huge = tmp_path / "huge.sh"
        huge.write_bytes(b"#" * (MAX_BYTES + 1))
        assert not export_owner(str(huge), "s1")
        assert linked.read_text() == "" and huge.stat().st_size == MAX_BYTES + 1


@pytest.mark.slow
class TestSessionEnd:
    """A session's end gives back everything it claimed, and nothing of the others'."""

    def test_session_end_releases_the_sessions_claims(
        self, setup: tuple[Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        ws, env = setup
        for task in ("1", "2"):
            mine = storyd(env, ws, "claim", *TARGET, "--task", task, "--owner",
                          f"session:{SESSION}")  # fmt: skip
            assert mine.returncode == 0, mine.stderr
        assert storyd(env, ws, "claim", *TARGET, "--task", "3", "--owner", "alice").returncode == 0
        payload = hook_payload("SessionEnd", ws, reason="prompt_input_exit")
        done = run_hook("session-end", payload, env)
        assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
        listed = storyd(env, ws, "claims", "--json").stdout.decode().splitlines()
        owners = [(c["owner"], c["task"]) for c in map(orjson.loads, listed)]
        assert owners == [("alice", "3")]
        monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
        monkeypatch.delenv("STORYD_CLAIMS", raising=False)
        ended = sorted(
            (e["kind"], e["task"], e["detail"])
            for e in claims.log()
            if e["owner"] == f"session:{SESSION}" and e["kind"] != "granted"
        )
        assert ended == [("released", "1", "session ended"), ("released", "2", "session ended")]

    @pytest.mark.parametrize("agent", ["cursor", "gemini"])
    def test_each_agents_session_end_payload(
        self, setup: tuple[Path, dict[str, str]], agent: str
    ) -> None:
        ws, env = setup
        session = "5f0c1a2e-0b7e-4a51-9d63-0c2f0d1e8a11"
        assert storyd(env, ws, "claim", *TARGET, "--owner", f"session:{session}").returncode == 0
        if agent == "cursor":
            payload: dict[str, object] = {
                "conversation_id": session, "workspace_roots": [str(ws)],
                "hook_event_name": "sessionEnd", "cursor_version": "2.0.0"}  # fmt: skip
        else:
            payload = {"session_id": session, "cwd": str(ws), "hook_event_name": "SessionEnd",
                       "timestamp": "2026-11-25T10:30:00.000Z", "reason": "exit"}  # fmt: skip
        done = run_hook("session-end", payload, env, "/", "--agent", agent)
        assert (done.returncode, done.stdout) == (0, b"")
        assert storyd(env, ws, "claims", "--json").stdout == b""

    def test_without_a_claims_database_nothing_is_made_nor_sqlite3_imported(
        self, setup: tuple[Path, dict[str, str]]
    ) -> None:
        """As tests/test_hook_imports.py measures the other hooks: `python -S -X
        importtime` of the launcher bin/storyd."""
        ws, env = setup
        payload = orjson.dumps(hook_payload("SessionEnd", ws, reason="other"))
        launcher = str(Path(__file__).resolve().parents[1] / "bin" / "storyd")
        done = subprocess.run(
            [sys.executable, "-S", "-X", "importtime", launcher, "hook", "session-end"],
            input=payload, cwd="/", env=dict(env, PYTHONPATH=lean_pythonpath()),
            capture_output=True, timeout=60, check=False,
        )  # fmt: skip
        names = {line.rsplit("|", 1)[1].strip() for line in done.stderr.decode().splitlines()
                 if line.startswith("import time:")}  # fmt: skip
        assert (done.returncode, done.stdout) == (0, b"")
        assert "storyd.api.hooks.session_end" in names, "the run did not take the hook's path"
        assert not names & {"sqlite3", "_sqlite3", "storyd.api.claims"}
        assert not (Path(env["XDG_STATE_HOME"]) / "storyd" / "claims.sqlite3").exists()


@pytest.mark.slow
def test_the_daemon_answering_the_launcher_writes_the_env_file(
    tmp_path: Path, spawn_daemon: Callable[..., DaemonProcess]
) -> None:
    """bin/storyd-hook hands $CLAUDE_ENV_FILE to the daemon's `hook` op, which appends the
    line: no Python starts (a shadow `storyd` package that fails would be seen)."""
    ws, agents = demo_workspace(tmp_path), AgentsEnv(tmp_path)
    daemon = spawn_daemon([ws], start=False)
    daemon.env = agents.env
    daemon.start()
    shadow = tmp_path / "shadow" / "storyd"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("import sys\nsys.stderr.write('SHADOW\\n')\nsys.exit(97)\n")
    env_file = tmp_path / "env.sh"
    env = dict(agents.env, PYTHONPATH=str(tmp_path / "shadow"), CLAUDE_ENV_FILE=str(env_file))
    payload = orjson.dumps(hook_payload("SessionStart", ws, source="startup"))

    def launch(env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [str(BIN / "storyd-hook"), "session-start"], input=payload, env=env, cwd="/",
            capture_output=True, timeout=60, check=False,
        )  # fmt: skip

    done = launch(env)
    assert done.returncode == 0 and b"SHADOW" not in done.stderr, done.stderr
    assert b"unit(s) in flight" in done.stdout
    assert env_file.read_text() == OWNER_LINE
    # a path that would break the request's JSON is never sent: Python answers (here the
    # shadow package, which fails), and the daemon wrote nothing
    quoted = tmp_path / 'a"b.sh'
    done = launch(dict(env, CLAUDE_ENV_FILE=str(quoted)))
    assert done.returncode == 97 and b"SHADOW" in done.stderr
    assert not quoted.exists()
