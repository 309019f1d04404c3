"""Issue 34: a session's state and unit, kept by the hooks' records and shown by `storyd
top`. Claude Code's Notification hook (https://code.claude.com/docs/en/hooks#notification)
makes a session `waiting`; stop makes it `stopped`, session-start and post-tool-use
`working`. The hooks run as the agent runs them: `storyd hook EVENT` with its JSON on
stdin, in a real git workspace."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from agents_harness import AgentsEnv, hook_payload, run_hook
from cli_harness import STORYD
from daemon_harness import DaemonProcess
from epic_state_harness import EPIC, epic_relpath, story_id, task_id, write_epic
from git_harness import GitWorkspace

from storyd.api import sessions
from storyd.api.sessionlist import sessions_in_flight
from storyd.api.topview import frame, session_line

STORY = story_id(1)
SESSION = "9ecf22fa-edf8-4332-ae85-b6d5456eda64"  # agents_harness.hook_payload's
# Claude Code's Notification input, as its hooks reference shows it
PERMISSION = {
    "message": "Claude needs your permission to use Bash",
    "title": "Permission needed",
    "notification_type": "permission_prompt",
}


def _workspace(tmp_path: Path) -> Path:
    repo = GitWorkspace(tmp_path / "ws").init()
    repo.commit("base", {"README": "hello\n"})
    tasks = {task_id(STORY, n): {"status": "DONE" if n == 1 else "PENDING"} for n in (1, 2, 3)}
    write_epic(repo.path, EPIC, {STORY: {"tasks": tasks}})
    return repo.path


def _record(env: dict[str, str]) -> dict[str, object]:
    old = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = env["XDG_STATE_HOME"]
    try:
        found = sessions.load(SESSION)
    finally:
        if old is None:
            del os.environ["XDG_STATE_HOME"]
        else:
            os.environ["XDG_STATE_HOME"] = old
    assert found is not None
    return found


def _hook(event: str, name: str, ws: Path, env: dict[str, str], *args: str,
          **fields: object) -> None:  # fmt: skip
    done = run_hook(event, hook_payload(name, ws, **fields), env, ws, *args)
    assert done.returncode == 0, done.stderr
    if event == "notification":
        assert (done.stdout, done.stderr) == (b"", b"")  # nothing the agent would read


@pytest.mark.slow
def test_a_sessions_state_follows_its_hooks_and_top_shows_it(tmp_path: Path) -> None:
    agents = AgentsEnv(tmp_path)
    ws = _workspace(tmp_path)
    env = agents.env
    _hook("session-start", "SessionStart", ws, env, source="startup")
    record = _record(env)
    assert (record["event"], sessions.state(record)) == ("session-start", "working")
    assert record["on"] == [epic_relpath(EPIC), STORY]  # the one unit in flight
    _hook("notification", "Notification", ws, env, **PERMISSION)
    record = _record(env)
    assert sessions.state(record) == "waiting"
    assert record["note"] == "Claude needs your permission to use Bash"
    top = subprocess.run([STORYD, "top", "--once", "--direct", "--workspace", str(ws)],
                         env={**env, "COLUMNS": "120"}, capture_output=True, text=True,
                         timeout=60, check=False)  # fmt: skip
    assert top.returncode == 0, top.stderr
    line = next(x for x in top.stdout.splitlines() if x.startswith("SESSIONS "))
    assert re.fullmatch(f"SESSIONS claude  9ecf22fa  waiting \\d+s on {STORY}: "
                        "Claude needs your permission to use Bash", line), line  # fmt: skip
    # the permission granted, the tool ran: working again; then the turn ends
    _hook("post-tool-use", "PostToolUse", ws, env, tool_name="Bash",
          tool_input={"command": "true"}, tool_response={})  # fmt: skip
    assert sessions.state(_record(env)) == "working"
    _hook("stop", "SubagentStop", ws, env, stop_hook_active=False, agent_type="general-purpose")
    assert sessions.state(_record(env)) == "working"  # a subagent ended, not the session
    _hook("stop", "Stop", ws, env, stop_hook_active=False)
    record = _record(env)
    assert (record["event"], sessions.state(record)) == ("stop", "stopped")
    assert record["on"] == [epic_relpath(EPIC), STORY]  # kept through the events
    _hook("notification", "Notification", ws, env, message="Claude is waiting for your input",
          notification_type="idle_prompt")  # fmt: skip
    assert _record(env)["note"] == "Claude is waiting for your input"


@pytest.mark.slow
def test_auth_success_asks_nothing_and_a_first_notification_makes_the_record(
    tmp_path: Path,
) -> None:
    agents = AgentsEnv(tmp_path)
    ws = _workspace(tmp_path)
    env = agents.env
    _hook("notification", "Notification", ws, env, **PERMISSION)  # met mid-session
    record = _record(env)
    assert (sessions.state(record), record["workspace"], record["agent"]) == (
        "waiting", str(ws), "claude")
    path = Path(env["XDG_STATE_HOME"]) / "storyd" / "sessions"
    (file,) = path.iterdir()
    os.utime(file, (1.0, 1.0))
    _hook("notification", "Notification", ws, env, message="Authenticated",
          notification_type="auth_success")
    assert sessions.state(_record(env)) == "waiting"  # unchanged, only touched
    assert file.stat().st_mtime > 1.0


@pytest.mark.slow
def test_gemini_tool_permission_notification(tmp_path: Path) -> None:
    """Gemini CLI's Notification (https://geminicli.com/docs/hooks/reference):
    `notification_type` ToolPermission."""
    agents = AgentsEnv(tmp_path)
    ws = _workspace(tmp_path)
    _hook("notification", "Notification", ws, agents.env, "--agent", "gemini",
          notification_type="ToolPermission", message="Allow run_shell_command?",
          details={})  # fmt: skip
    record = _record(agents.env)
    assert (record["agent"], sessions.state(record), record["note"]) == (
        "gemini", "waiting", "Allow run_shell_command?")


@pytest.mark.slow
@pytest.mark.parametrize("payload", [
    {"hook_event_name": "Notification"},  # no session, no folder
    {"session_id": "s", "cwd": "/nonexistent/folder", "notification_type": "permission_prompt"},
    {"session_id": 3, "cwd": 4, "message": ["not", "text"]},
])  # fmt: skip
def test_bad_notifications_are_silent(tmp_path: Path, payload: dict[str, object]) -> None:
    agents = AgentsEnv(tmp_path)
    done = run_hook("notification", payload, agents.env, tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    assert not (Path(agents.env["XDG_STATE_HOME"]) / "storyd" / "sessions").exists()


def test_an_old_record_still_loads_and_lists(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A record written before issue 34 (no event, at, note, on): state unknown, listed
    as before; marking it adds the fields."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    old = {"session": "old", "workspace": "/w", "started": 5.0, "agent": None, "head": None,
           "files": {}, "begun": {}}  # fmt: skip
    assert sessions.save(old)
    loaded = sessions.load("old")
    assert loaded is not None and sessions.state(loaded) is None
    (entry,) = sessions_in_flight()
    assert (entry["state"], entry["since"], entry["note"], entry["on"]) == (None, None, None, None)
    assert session_line(entry, float(entry["seen"]), many=False).startswith(
        "agent?  old       started ")  # as before issue 34
    assert sessions.mark(loaded, "stop") is True
    assert sessions.mark(loaded, "stop") is False  # nothing new: touch, do not rewrite
    assert sessions.state(loaded) == "stopped" and isinstance(loaded["at"], float)


def test_a_record_with_bad_fields_lists_without_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    bad = {"session": "bad", "workspace": "/w", "files": {}, "event": ["x"], "at": "noon",
           "note": 3, "on": ["a"]}  # fmt: skip
    assert sessions.save(bad)
    (entry,) = sessions_in_flight()
    assert (entry["state"], entry["since"], entry["note"], entry["on"]) == (None, None, None, None)


def test_the_frame_names_state_unit_and_note() -> None:
    unit = {"workspace": "/w", "stateFile": "plans/x.json", "unit": "story-1", "format": "epic",
            "done": 1, "total": 3, "resumePoint": "t2", "findingList": []}  # fmt: skip
    waiting = {"session": "abcdefghij", "workspace": "/w", "agent": "claude", "seen": 90.0,
               "state": "waiting", "since": 40.0, "note": "Claude needs your permission",
               "on": ["plans/x.json", None]}  # fmt: skip
    working = {**waiting, "session": "k" * 9, "state": "working", "on": None, "seen": 99.0}
    lines = [x for x in frame([unit], sessions=[waiting, working], now=100.0).splitlines()
             if x.startswith("SESSIONS")]  # fmt: skip
    assert lines == [
        "SESSIONS claude  abcdefgh  waiting 1m on story-1: Claude needs your permission",
        "SESSIONS claude  kkkkkkkk  working 1m (hook 1s ago)",
    ]


def test_the_record_is_json_with_the_new_fields(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    record = {"session": "s", "workspace": "/w", "files": {}}
    sessions.mark(record, "notification", note="  two\n lines  " + "x" * 300)
    assert sessions.save(record)
    data = json.loads(Path(sessions.record_path("s")).read_text())
    assert data["event"] == "notification" and len(data["note"]) == 200
    assert data["note"].startswith("two lines x")


@pytest.mark.slow
def test_the_daemon_records_a_notification_through_the_launcher(
    tmp_path: Path, spawn_daemon: Callable[..., DaemonProcess]
) -> None:
    """bin/storyd-hook sends the notification to the daemon's `hook` op: no Python
    starts (a shadowed storyd package would exit 97), the record says waiting."""
    from agents_harness import no_python
    from test_hook_launcher import launch

    agents = AgentsEnv(tmp_path)
    ws = _workspace(tmp_path)
    daemon = spawn_daemon([ws], start=False)
    daemon.env = agents.env
    daemon.start()
    payload = hook_payload("Notification", ws, **PERMISSION)
    done = launch("notification", payload, no_python(agents.env, tmp_path))
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    record = _record(agents.env)
    assert (sessions.state(record), record["note"]) == ("waiting", PERMISSION["message"])
