"""`storyd hook` through every agent's own payload, answered in its own shape, and after
the writes agents really make (a shell pipeline, not the Write tool).

The payload shapes come from each agent's hook reference:

- Claude Code: https://code.claude.com/docs/en/hooks (`cwd`, `session_id`,
  `hook_event_name`, `tool_name: Bash` with `tool_input.command`, `permission_mode`;
  PostToolUseFailure, "Runs after tool calls fail", with `tool_use_id`, `error` and
  `is_interrupt` instead of `tool_response`, answered with
  `hookSpecificOutput.additionalContext`, "provided along with the error message").
- Codex CLI: https://developers.openai.com/codex/hooks (Claude Code's shape, with
  `turn_id`, `model` and `tool_use_id`; PostToolUse's exit 2 puts stderr in place of the
  tool's output, `hookSpecificOutput.additionalContext` with exit 0 adds to it;
  PermissionRequest, before Codex asks for an approval, with `tool_name` and `tool_input`).
- Cursor: https://cursor.com/docs/agent/hooks (`conversation_id`, `workspace_roots`,
  camelCase `hook_event_name`; `afterFileEdit` with a top-level `file_path`;
  `afterShellExecution` with `command`; `stop` with `status` and `loop_count`; answers
  `additional_context` and `followup_message`).
- VS Code Copilot: https://code.visualstudio.com/docs/agents/reference/hooks-reference
  (`hookEventName`, `sessionId`, `timestamp`, SessionStart `source: new`, a tool's
  `tool_input.filePath`; answers as Claude Code's).
- Gemini CLI: https://geminicli.com/docs/hooks/reference (`AfterTool` with
  `run_shell_command`, `AfterAgent` with `stop_hook_active`, an ISO `timestamp`; answers
  `hookSpecificOutput.additionalContext` and `{"decision": "deny", "reason"}`).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import orjson
import pytest
from agents_harness import AgentsEnv, demo_workspace, home_env, hook_payload, run_hook, run_storyd

SESSION = "9ecf22fa-edf8-4332-ae85-b6d5456eda64"
EPIC_STATE = "plans/epic-0049/execution-state.json"
EXECUTION = "memory/state/execution.json"
SESSION_STATE = "agent-output/fleet-portal/00-session-state.json"


def _git(ws: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(ws), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.strip()


def _sh(ws: Path, script: str) -> None:
    """What an agent's Bash tool runs: a real shell pipeline in the workspace."""
    subprocess.run(["/bin/sh", "-c", script], cwd=ws, check=True, timeout=30)


def _json(done: subprocess.CompletedProcess[bytes]) -> dict[str, object]:
    assert done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stderr, done.stderr
    value = orjson.loads(done.stdout)
    assert isinstance(value, dict)
    return value


def _silent(done: subprocess.CompletedProcess[bytes]) -> None:
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b""), done


def _bash(ws: Path, command: str) -> dict[str, object]:
    return hook_payload("PostToolUse", ws, tool_name="Bash", permission_mode="default",
                        tool_input={"command": command, "description": "update state"},
                        tool_response={"stdout": "", "stderr": "", "interrupted": False})


def _cursor(event: str, ws: Path, **fields: object) -> dict[str, object]:
    payload: dict[str, object] = {
        "conversation_id": SESSION, "generation_id": "gen-1", "hook_event_name": event,
        "workspace_roots": [str(ws)], "cursor_version": "1.7.2",
    }  # fmt: skip
    payload.update(fields)
    return payload


def _vscode(event: str, ws: Path, **fields: object) -> dict[str, object]:
    payload: dict[str, object] = {
        "timestamp": "2026-11-25T10:30:00.000Z", "cwd": str(ws), "sessionId": SESSION,
        "hookEventName": event, "transcript_path": "/tmp/t.json",
    }  # fmt: skip
    payload.update(fields)
    return payload


def _gemini(event: str, ws: Path, **fields: object) -> dict[str, object]:
    payload: dict[str, object] = {
        "session_id": SESSION, "transcript_path": "/tmp/t.json", "cwd": str(ws),
        "hook_event_name": event, "timestamp": "2026-11-25T10:30:00.000Z",
    }  # fmt: skip
    payload.update(fields)
    return payload


@pytest.fixture
def own(tmp_path: Path) -> tuple[Path, AgentsEnv]:
    return demo_workspace(tmp_path), AgentsEnv(tmp_path)


def _begin(ws: Path, env: AgentsEnv) -> None:
    done = run_hook("session-start", hook_payload("SessionStart", ws, source="startup"),
                    env.env)
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr


def _land(ws: Path) -> None:
    """Before the session: TASK-0049-0013-004's work not committed yet (_commit does)."""
    _git(ws, "reset", "-q", "HEAD~1")


def _commit(ws: Path) -> str:
    _git(ws, "add", "work")
    _git(ws, "commit", "-q", "-m", "TASK-0049-0013-004: work landed in this session")
    return _git(ws, "rev-parse", "HEAD")


# -- the writes agents really make: post-tool-use after Bash ---------------------------------


@pytest.mark.slow
def test_a_state_file_broken_by_a_shell_pipeline_is_reported_after_bash(
        own: tuple[Path, AgentsEnv]) -> None:
    ws, env = own
    _begin(ws, env)
    quiet = run_hook("post-tool-use", _bash(ws, "git status"), env.env)
    _silent(quiet)  # a command that touched no state file
    _sh(ws, f"printf '{{\"epic\": \"0049\", \"stories\": ' > {EPIC_STATE}.tmp && "
            f"mv {EPIC_STATE}.tmp {EPIC_STATE}")
    done = run_hook("post-tool-use", _bash(ws, "jq ... | mv"), env.env)
    assert done.returncode == 2 and done.stdout == b""
    lines = done.stderr.decode().splitlines()
    assert lines == [line for line in lines if line.startswith(f"storyd: {EPIC_STATE} ")]
    assert len(lines) == 1 and "no longer parses" in lines[0], lines
    again = run_hook("post-tool-use", _bash(ws, "ls"), env.env)
    _silent(again)  # told once: the record holds this check now


@pytest.mark.slow
def test_a_broken_companion_execution_json_is_reported(own: tuple[Path, AgentsEnv]) -> None:
    """memory/state/execution.json is read with phase.json: a torn write shows."""
    ws, env = own
    _begin(ws, env)
    _sh(ws, f"printf '{{\"tasks\": [' > {EXECUTION}")
    done = run_hook("post-tool-use", _bash(ws, "echo > execution.json"), env.env)
    assert done.returncode == 2, done.stderr
    text = done.stderr.decode()
    assert "storyd: memory/state/phase.json " in text and "invalid-execution" in text


@pytest.mark.slow
def test_a_session_file_that_fell_back_to_its_bak_is_reported(
        own: tuple[Path, AgentsEnv]) -> None:
    ws, env = own
    state = ws / SESSION_STATE
    _sh(ws, f"cp {SESSION_STATE} {SESSION_STATE}.bak")
    _begin(ws, env)
    _sh(ws, f": > {SESSION_STATE}")  # emptied by a redirect gone wrong
    assert state.stat().st_size == 0
    done = run_hook("post-tool-use", _bash(ws, ": > state"), env.env)
    assert done.returncode == 2, done.stderr
    assert "restored-from-backup" in done.stderr.decode()


@pytest.mark.slow
def test_units_lost_by_a_pipeline_are_reported(own: tuple[Path, AgentsEnv]) -> None:
    ws, env = own
    _begin(ws, env)
    _sh(ws, f"printf '{{\"epic\": \"0049\", \"stories\": {{}}}}' > {EPIC_STATE}")
    done = run_hook("post-tool-use", _bash(ws, "jq '.stories = {}'"), env.env)
    assert done.returncode == 2
    assert "holds 0 unit(s), 3 at the last check: units lost" in done.stderr.decode()


# -- each agent's payload, each agent's answer -----------------------------------------------


@pytest.mark.slow
def test_cursor_session_start_stop_and_edits(own: tuple[Path, AgentsEnv]) -> None:
    """Cursor names the folder in workspace_roots (no cwd) and reads its own keys."""
    ws, env = own
    _land(ws)
    start = _json(run_hook("session-start", _cursor("sessionStart", ws), env.env))
    assert set(start) == {"additional_context"}
    assert "fleet-portal" in str(start["additional_context"])
    sha = _commit(ws)
    stop = _json(run_hook("stop", _cursor("stop", ws, status="completed", loop_count=0),
                          env.env))
    assert set(stop) == {"followup_message"} and sha in str(stop["followup_message"])
    again = run_hook("stop", _cursor("stop", ws, status="completed", loop_count=1), env.env)
    _silent(again)  # one follow-up per stop
    (ws / EPIC_STATE).write_bytes(b"{")
    edit = _json(run_hook("post-tool-use", _cursor(
        "afterFileEdit", ws, file_path=str(ws / EPIC_STATE),
        edits=[{"old_string": "a", "new_string": "b"}]), env.env))
    assert str(edit["additional_context"]).startswith(f"storyd: {EPIC_STATE} no longer parses")


@pytest.mark.slow
def test_cursor_after_shell_execution(own: tuple[Path, AgentsEnv]) -> None:
    ws, env = own
    run_hook("session-start", _cursor("sessionStart", ws), env.env)
    _sh(ws, f"printf '[' > {EXECUTION}")
    shell = _cursor("afterShellExecution", ws, command="echo [ > x", cwd=str(ws),
                    output="", duration=12)
    answer = _json(run_hook("post-tool-use", shell, env.env))
    assert "invalid-execution" in str(answer["additional_context"])


@pytest.mark.slow
def test_vscode_session_start_and_file_path(own: tuple[Path, AgentsEnv]) -> None:
    ws, env = own
    start = _json(run_hook("session-start", _vscode("SessionStart", ws, source="new"),
                           env.env))
    specific = start["hookSpecificOutput"]
    assert isinstance(specific, dict) and specific["hookEventName"] == "SessionStart"
    assert "fleet-portal" in str(specific["additionalContext"])
    (ws / EPIC_STATE).write_bytes(b"{")
    edit = _vscode("PostToolUse", ws, tool_name="editFiles", tool_use_id="tool-1",
                   tool_input={"filePath": str(ws / EPIC_STATE)}, tool_response="ok")
    answer = _json(run_hook("post-tool-use", edit, env.env))  # VS Code drops exit 2's stderr
    specific = answer["hookSpecificOutput"]
    assert isinstance(specific, dict) and specific["hookEventName"] == "PostToolUse"
    assert str(specific["additionalContext"]).startswith(f"storyd: {EPIC_STATE} no longer parses")


@pytest.mark.slow
def test_gemini_after_tool_and_after_agent(own: tuple[Path, AgentsEnv]) -> None:
    ws, env = own
    _land(ws)
    start = _json(run_hook("session-start", _gemini("SessionStart", ws, source="startup"),
                           env.env))
    assert "additionalContext" in str(start)
    sha = _commit(ws)
    stop = _json(run_hook("stop", _gemini("AfterAgent", ws, prompt="go", prompt_response="ok",
                                          stop_hook_active=False), env.env))
    assert stop["decision"] == "deny" and sha in str(stop["reason"])
    _silent(run_hook("stop", _gemini("AfterAgent", ws, stop_hook_active=True), env.env))
    _sh(ws, f"printf '{{' > {EPIC_STATE}")
    tool = _gemini("AfterTool", ws, tool_name="run_shell_command",
                   tool_input={"command": "echo { > state"},
                   tool_response={"llmContent": "", "returnDisplay": ""})
    answer = _json(run_hook("post-tool-use", tool, env.env))
    specific = answer["hookSpecificOutput"]
    assert isinstance(specific, dict) and specific["hookEventName"] == "AfterTool"
    assert f"storyd: {EPIC_STATE} no longer parses" in str(specific["additionalContext"])


@pytest.mark.slow
def test_codex_is_claude_codes_shape(own: tuple[Path, AgentsEnv]) -> None:
    ws, env = own
    _land(ws)
    payload = hook_payload("SessionStart", ws, source="startup", model="gpt-5-codex")
    start = _json(run_hook("session-start", payload, env.env, "/", "--agent", "codex"))
    assert "hookSpecificOutput" in start
    sha = _commit(ws)
    stop = _json(run_hook("stop", hook_payload("Stop", ws, stop_hook_active=False), env.env,
                          "/", "--agent", "codex"))
    assert stop["decision"] == "block" and sha in str(stop["reason"])


# -- through the hooks `storyd install` wrote, as the agent runs them ------------------------


def _installed(env: dict[str, str], agent: str, event: str) -> str:
    """`storyd install --AGENT` (the user's files), then storyd's command for `event`."""
    assert run_storyd(env, "install", f"--{agent}").returncode == 0
    folder = {"claude": ".claude/settings.json", "codex": ".codex/hooks.json"}[agent]
    groups = orjson.loads((Path(env["HOME"]) / folder).read_bytes())["hooks"][event]
    commands = [h["command"] for g in groups for h in g["hooks"] if "storyd" in h["command"]]
    assert len(commands) == 1, groups
    return str(commands[0])


def _agent_runs(command: str, payload: dict[str, object], env: dict[str, str],
                ws: Path) -> subprocess.CompletedProcess[bytes]:  # fmt: skip
    """The hook's command as the agents run it: `sh -c`, the payload on stdin."""
    return subprocess.run(["/bin/sh", "-c", command], input=orjson.dumps(payload), env=env,
                          cwd=ws, capture_output=True, timeout=60, check=False)  # fmt: skip


@pytest.mark.slow
def test_a_failing_bash_that_broke_a_state_file_is_told_in_post_tool_use_failure(
        tmp_path: Path) -> None:
    """Claude Code runs PostToolUseFailure, not PostToolUse, after a command that exits
    non-zero: the warning comes in that event's answer, not one tool late."""
    ws, env = demo_workspace(tmp_path), home_env(tmp_path)
    command = _installed(env, "claude", "PostToolUseFailure")
    run_hook("session-start", hook_payload("SessionStart", ws, source="startup"), env)
    script = f"printf '{{\"epic\": ' > {EPIC_STATE} && cat missing.json"
    failed = subprocess.run(["/bin/sh", "-c", script], cwd=ws, capture_output=True, timeout=30,
                            check=False)  # fmt: skip
    assert failed.returncode != 0 and (ws / EPIC_STATE).read_bytes() == b'{"epic": '
    payload = hook_payload("PostToolUseFailure", ws, tool_name="Bash", permission_mode="default",
                           tool_input={"command": script, "description": "update state"},
                           tool_use_id="toolu_01ABC123",
                           error="Command exited with non-zero status code 1",
                           is_interrupt=False)  # fmt: skip
    answer = _json(_agent_runs(command, payload, env, ws))
    specific = answer["hookSpecificOutput"]
    assert isinstance(specific, dict) and specific["hookEventName"] == "PostToolUseFailure"
    assert str(specific["additionalContext"]).startswith(f"storyd: {EPIC_STATE} no longer parses")
    _silent(_agent_runs(command, payload, env, ws))  # told once


@pytest.mark.slow
def test_codex_post_tool_use_adds_context_and_keeps_the_output(tmp_path: Path) -> None:
    """Exit 2 would put storyd's words in place of the command's output in Codex: the
    answer is additionalContext with exit 0, nothing on stderr."""
    ws, env = demo_workspace(tmp_path), home_env(tmp_path)
    command = _installed(env, "codex", "PostToolUse")
    start = hook_payload("SessionStart", ws, source="startup", model="gpt-5-codex")
    assert _agent_runs(_installed(env, "codex", "SessionStart"), start, env, ws).returncode == 0
    _sh(ws, f"printf '{{' > {EPIC_STATE}")
    payload = hook_payload("PostToolUse", ws, turn_id="turn-1", model="gpt-5-codex",
                           permission_mode="default", tool_name="Bash",
                           tool_input={"command": f"printf '{{' > {EPIC_STATE}"},
                           tool_response="", tool_use_id="call-1")  # fmt: skip
    done = _agent_runs(command, payload, env, ws)
    assert (done.returncode, done.stderr) == (0, b""), done
    answer = orjson.loads(done.stdout)
    assert set(answer) == {"hookSpecificOutput"}
    assert answer["hookSpecificOutput"]["hookEventName"] == "PostToolUse"
    assert answer["hookSpecificOutput"]["additionalContext"].startswith(
        f"storyd: {EPIC_STATE} no longer parses")


@pytest.mark.slow
def test_codex_permission_request_marks_the_session_waiting(tmp_path: Path) -> None:
    ws, env = demo_workspace(tmp_path), home_env(tmp_path)
    command = _installed(env, "codex", "PermissionRequest")
    payload = hook_payload("PermissionRequest", ws, turn_id="turn-1", model="gpt-5-codex",
                           permission_mode="default", tool_name="Bash",
                           tool_input={"command": "rm -rf build"})  # fmt: skip
    _silent(_agent_runs(command, payload, env, ws))  # no verdict: Codex asks the user
    folder = Path(env["XDG_STATE_HOME"]) / "storyd" / "sessions"
    record = orjson.loads(next(folder.iterdir()).read_bytes())
    assert (record["event"], record["note"]) == ("notification", "permission to use Bash")


def test_an_unknown_agent_is_a_usage_error(own: tuple[Path, AgentsEnv]) -> None:
    ws, env = own
    done = run_hook("stop", hook_payload("Stop", ws), env.env, "/", "--agent", "windsurf")
    assert done.returncode == 64 and b"claude, codex, cursor, vscode, gemini" in done.stderr


# -- anywhere the user owns ------------------------------------------------------------------


@pytest.mark.slow
def test_a_workspace_outside_home_gets_every_hook(tmp_path: Path) -> None:
    """No [hooks] roots and a home folder elsewhere (a dev container's /workspaces)."""
    ws = demo_workspace(tmp_path)
    env = AgentsEnv(tmp_path, "")
    home = tmp_path / "home"
    home.mkdir()
    env.env["HOME"] = str(home)
    assert not str(ws).startswith(str(home))
    _land(ws)
    start = _json(run_hook("session-start", hook_payload("SessionStart", ws, source="startup"),
                           env.env))
    assert "fleet-portal" in str(start)
    sha = _commit(ws)
    stop = _json(run_hook("stop", hook_payload("Stop", ws, stop_hook_active=False), env.env))
    assert sha in str(stop["reason"])
    _sh(ws, f"printf '{{' > {EPIC_STATE}")
    done = run_hook("post-tool-use", _bash(ws, "echo"), env.env)
    assert done.returncode == 2 and EPIC_STATE in done.stderr.decode()


@pytest.mark.slow
def test_roots_still_restricts_when_set(tmp_path: Path) -> None:
    ws = demo_workspace(tmp_path / "outside")
    (tmp_path / "elsewhere").mkdir()
    payload = hook_payload("SessionStart", ws, source="startup")
    env = AgentsEnv(tmp_path, f"roots = [{str(tmp_path / 'elsewhere')!r}]\n")
    _silent(run_hook("session-start", payload, env.env))
    # the same workspace, no roots set: the hook speaks, so the silence above is the rule's
    free = AgentsEnv(tmp_path / "free", "")
    spoke = run_hook("session-start", payload, free.env)
    assert spoke.returncode == 0 and spoke.stdout != b"", spoke


def test_the_session_records_are_private_and_bounded(own: tuple[Path, AgentsEnv]) -> None:
    ws, env = own
    run_hook("post-tool-use", _bash(ws, "true"), env.env)
    folder = Path(env.env["XDG_STATE_HOME"]) / "storyd" / "sessions"
    records = list(folder.iterdir())
    assert len(records) == 1
    assert records[0].stat().st_mode & 0o777 == 0o600
    assert os.stat(folder).st_mode & 0o777 == 0o700
    assert records[0].stat().st_size < 64 * 1024


@pytest.mark.slow
def test_a_state_folder_it_cannot_write_never_silences_a_report(
        own: tuple[Path, AgentsEnv]) -> None:
    """$XDG_STATE_HOME unusable (a file where the folder should be): no record is kept,
    and the broken state file is still reported."""
    ws, env = own
    blocked = env.root / "not-a-folder"
    blocked.write_text("")
    env.env["XDG_STATE_HOME"] = str(blocked)
    _begin(ws, env)
    _sh(ws, f"printf '{{' > {EPIC_STATE}")
    done = run_hook("post-tool-use", _bash(ws, "echo"), env.env)
    assert done.returncode == 2 and EPIC_STATE in done.stderr.decode(), done.stderr
