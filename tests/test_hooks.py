"""`storyd hook session-start|stop|post-tool-use`, run as Claude Code runs them: the real
command, the hook's JSON on stdin, against storyd demo's workspace (git history included),
with no daemon and with a real `storyd serve`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import orjson
import pytest
from agents_harness import AgentsEnv, demo_workspace, hook_payload, run_hook
from cli_harness import STORYD
from daemon_harness import wait_for
from locks_harness import exclusively_locked

IN_FLIGHT = {
    "issue-42-geofencing", "autodev", "fleet-portal", "wf-fleet-portal-001",
    "story-0049-0013", "story-0049-0014",
}  # fmt: skip
EPIC_STATE = "plans/epic-0049/execution-state.json"


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, AgentsEnv]:
    """One demo workspace the read-only tests share, and an env allowing its folder."""
    root = tmp_path_factory.mktemp("hooks")
    return demo_workspace(root), AgentsEnv(root)


@pytest.fixture
def own(tmp_path: Path) -> tuple[Path, AgentsEnv]:
    """A demo workspace of this test's own (it will be changed)."""
    return demo_workspace(tmp_path), AgentsEnv(tmp_path)


def _answer(done: subprocess.CompletedProcess[bytes]) -> dict[str, object]:
    assert done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stderr, done.stderr
    value = orjson.loads(done.stdout)
    assert isinstance(value, dict)
    return value


def _context(done: subprocess.CompletedProcess[bytes]) -> str:
    answer = _answer(done)
    specific = answer["hookSpecificOutput"]
    assert isinstance(specific, dict)
    assert specific["hookEventName"] == "SessionStart"
    text = specific["additionalContext"]
    assert isinstance(text, str)
    return text


# -- session-start --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("source", ["startup", "resume", "compact", "clear"])
def test_session_start_lists_the_units_in_flight(shared: tuple[Path, AgentsEnv],
                                                 source: str) -> None:
    ws, env = shared
    text = _context(run_hook("session-start", hook_payload(
        "SessionStart", ws, source=source, model="claude-sonnet-4-5"), env.env))
    for unit in IN_FLIGHT:
        assert f" {unit} (" in text, unit
    assert "story-0049-0012" not in text  # all done: not in flight
    assert "resume at phase-2-task-4, 3/5 done" in text
    # the warnings a person must know, with the task they concern
    assert "unrecorded-commit/unrecorded TASK-0049-0013-004" in text
    assert "format/output-before-state-update task-002" in text
    assert "and " not in text.splitlines()[-1][:4]  # everything fit: no "and N more"


@pytest.mark.slow
def test_session_start_from_a_subfolder_finds_the_workspace(
        shared: tuple[Path, AgentsEnv]) -> None:
    ws, env = shared
    text = _context(run_hook("session-start", hook_payload(
        "SessionStart", ws / "plans" / "epic-0049", source="startup"), env.env))
    assert f"in flight in {ws}." in text


def test_a_source_package_named_like_a_format_root_is_not_a_workspace(
        own: tuple[Path, AgentsEnv]) -> None:
    """`src/tasks/` (a Python package) and an empty `src/specs/` are named like Task
    Master's and spec-kit's roots but hold no state file: the climb goes on to the
    workspace (before: `src` was taken, and the hook said nothing)."""
    ws, env = own
    (ws / "src" / "tasks").mkdir(parents=True)
    (ws / "src" / "tasks" / "__init__.py").write_text("")
    (ws / "src" / "tasks" / "tasks.py").write_text("def run(): pass\n")
    (ws / "src" / "specs").mkdir()
    text = _context(run_hook("session-start", hook_payload(
        "SessionStart", ws / "src", source="startup"), env.env))
    assert f"in flight in {ws}." in text


def test_a_folder_whose_root_holds_a_state_file_is_a_workspace(tmp_path: Path) -> None:
    """Without git: the nearest folder whose format root holds a state file of its
    format wins over a nearer root that holds none; with none at all, the nearest root."""
    from storyd.api.hooks.hookio import Trust, explain
    from storyd.config import Config

    trust = Trust(Config())
    project = tmp_path / "project"
    (project / "tasks").mkdir(parents=True)
    (project / "tasks" / "tasks.json").write_text('{"master": {"tasks": []}}')
    (project / "lib" / "tasks").mkdir(parents=True)
    (project / "lib" / "tasks" / "helpers.py").write_text("")
    assert explain(str(project / "lib"), trust) == (str(project.resolve()), "")
    bare = tmp_path / "bare"
    (bare / "specs").mkdir(parents=True)
    (bare / "deep").mkdir()
    assert explain(str(bare / "deep"), trust) == (str(bare.resolve()), "")
    nothing = tmp_path / "nothing" / "here"
    nothing.mkdir(parents=True)
    found, why = explain(str(nothing), trust)
    assert found is None and why.startswith(f"no workspace at or above {nothing.resolve()}")


@pytest.mark.slow
def test_session_start_with_the_daemon_says_the_same(spawn_daemon: object,
                                                     own: tuple[Path, AgentsEnv]) -> None:
    ws, env = own
    payload = hook_payload("SessionStart", ws, source="compact")
    alone = run_hook("session-start", payload, env.env)
    daemon = spawn_daemon()  # type: ignore[operator]
    served = run_hook("session-start", payload, daemon.env)
    assert served.stdout == alone.stdout
    assert str(ws) in [u["workspace"] for u in daemon.units()]  # it asked the daemon


@pytest.mark.slow
def test_session_start_names_a_state_file_that_no_longer_parses(
        spawn_daemon: object, own: tuple[Path, AgentsEnv]) -> None:
    """Issue 42: the context says which state files no longer parse, with the daemon up
    (it serves their last good units, listed as not in flight) and down, the same way."""
    ws, env = own
    payload = hook_payload("SessionStart", ws, source="compact")
    daemon = spawn_daemon([ws])  # type: ignore[operator]
    before = _context(run_hook("session-start", payload, daemon.env))
    assert "story-0049-0013" in before and "UNREADABLE" not in before
    (ws / EPIC_STATE).write_bytes(b'{"epic": "0049", "stories": {"story-0049-0013": ')
    alone = _context(run_hook("session-start", payload, env.env))

    def broken_seen() -> str | None:
        text = _context(run_hook("session-start", payload, daemon.env))
        return text if "UNREADABLE" in text else None

    served = wait_for(broken_seen, 10.0, "the daemon to see the break")
    for text in (alone, served):
        broken = [line for line in text.splitlines() if line.startswith("UNREADABLE ")]
        assert len(broken) == 1 and broken[0].startswith(f"UNREADABLE {EPIC_STATE}: "), text
        assert "story-0049-0013 (" not in text  # no unit of the broken file offered
        assert "1 state file(s) no longer parse" in text.splitlines()[0]
        assert "issue-42-geofencing (" in text  # the other files' units still are


@pytest.mark.slow
def test_session_start_keeps_to_its_budget(tmp_path: Path) -> None:
    ws = demo_workspace(tmp_path)
    env = AgentsEnv(tmp_path, f"roots = [{str(tmp_path)!r}]\ncontext_chars = 700\n")
    text = _context(run_hook("session-start", hook_payload("SessionStart", ws,
                                                           source="startup"), env.env))
    assert len(text) <= 700
    last = text.splitlines()[-1]
    assert last.startswith("and ") and f" more (full list: {STORYD} status --in-flight" in last
    shown = sum(1 for line in text.splitlines() if line.startswith("- "))
    assert 0 < shown < len(IN_FLIGHT)
    assert f"and {len(IN_FLIGHT) - shown} more" in last


def test_session_start_is_silent_when_nothing_is_in_flight(tmp_path: Path) -> None:
    ws = tmp_path / "done"
    (ws / "plans" / "epic-0001").mkdir(parents=True)
    (ws / EPIC_STATE.replace("0049", "0001")).write_bytes(orjson.dumps({"stories": {
        "story-0001-0001": {"tasks": {"TASK-1": {"status": "DONE", "commitSha": "a" * 40}}}}}))
    env = AgentsEnv(tmp_path)
    done = run_hook("session-start", hook_payload("SessionStart", ws, source="startup"),
                    env.env)
    assert (done.returncode, done.stdout) == (0, b"")


def test_session_start_says_which_finished_stories_not_to_run_again(tmp_path: Path) -> None:
    """A story whose own record says merged while its tasks are not all DONE: in flight by
    its tasks, and the context carries the info finding that it must not be re-run."""
    ws = tmp_path / "ws"
    (ws / "plans" / "epic-0007").mkdir(parents=True)
    (ws / "plans/epic-0007/execution-state.json").write_bytes(orjson.dumps({"stories": {
        "story-0007-0001": {"status": "MERGED", "tasks": {
            "TASK-0007-0001-001": {"status": "PENDING"}}},
        "story-0007-0002": {"tasks": {"TASK-0007-0002-001": {"status": "PENDING"}}}}}))
    env = AgentsEnv(tmp_path)
    text = _context(run_hook("session-start", hook_payload("SessionStart", ws,
                                                           source="startup"), env.env))
    assert "info format/story-finished: story-0007-0001 is finished" in text
    assert "do not re-execute this story" in text
    assert text.count("story-finished") == 1


# -- bad input: exit 0, no output, no traceback ---------------------------------------------

BAD_STDIN: dict[str, bytes | None] = {
    "no stdin": None,
    "empty": b"",
    "invalid JSON": b'{"cwd": ',
    "not an object": b"[1, 2]",
    "binary": b"\xff\xfe\x00garbage",
    "cwd missing": orjson.dumps({"session_id": "s", "hook_event_name": "Stop"}),
    "cwd not a string": orjson.dumps({"cwd": 42, "stop_hook_active": False}),
    "cwd does not exist": orjson.dumps({"cwd": "/nonexistent/folder", "source": "startup"}),
    "cwd outside the roots": orjson.dumps({"cwd": "/", "source": "startup"}),
    "cwd with a NUL": orjson.dumps({"cwd": "/tmp\u0000x"}),
    "tool_input not an object": orjson.dumps({"cwd": "/", "tool_input": "x"}),
    "file_path outside the roots": orjson.dumps(
        {"cwd": "/", "tool_input": {"file_path": "/etc/passwd"}}),
}


@pytest.mark.parametrize("event", ["session-start", "stop", "post-tool-use"])
@pytest.mark.parametrize("label", list(BAD_STDIN))
def test_bad_input_exits_0_silently(shared: tuple[Path, AgentsEnv], event: str,
                                    label: str) -> None:
    _, env = shared
    done = run_hook(event, BAD_STDIN[label], env.env)
    assert (done.returncode, done.stdout) == (0, b""), done.stderr
    assert b"Traceback" not in done.stderr


@pytest.mark.slow
def test_a_workspace_outside_the_roots_is_not_read(tmp_path: Path) -> None:
    """The demo workspace itself, with roots elsewhere: nothing about it comes out."""
    ws = demo_workspace(tmp_path / "outside")
    (tmp_path / "elsewhere").mkdir()
    env = AgentsEnv(tmp_path, f"roots = [{str(tmp_path / 'elsewhere')!r}]\n")
    for event, payload in (
        ("session-start", hook_payload("SessionStart", ws, source="startup")),
        ("stop", hook_payload("Stop", ws, stop_hook_active=False)),
    ):
        done = run_hook(event, payload, env.env)
        assert (done.returncode, done.stdout) == (0, b""), done.stderr


@pytest.mark.parametrize("event", ["session-start", "stop", "post-tool-use"])
def test_a_broken_configuration_never_blocks(own: tuple[Path, AgentsEnv], event: str) -> None:
    ws, env = own
    env.config("roots = 5\n")
    payload = hook_payload("Stop", ws, stop_hook_active=False,
                           tool_input={"file_path": str(ws / EPIC_STATE)})
    done = run_hook(event, payload, env.env)
    assert (done.returncode, done.stdout) == (0, b""), done.stderr


# -- stop -----------------------------------------------------------------------------------


def _reason(done: subprocess.CompletedProcess[bytes]) -> str:
    answer = _answer(done)
    assert answer["decision"] == "block"
    reason = answer["reason"]
    assert isinstance(reason, str)
    return reason


def _git(ws: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(ws), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.strip()


def _begin(ws: Path, env: AgentsEnv, **fields: object) -> None:
    """The session starts (its record: HEAD and the state files as they are now)."""
    done = run_hook("session-start", hook_payload("SessionStart", ws, source="startup",
                                                  **fields), env.env)
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr


def _before_the_last_commit(ws: Path) -> None:
    """The demo as it was before TASK-0049-0013-004's commit landed (its work uncommitted)."""
    _git(ws, "reset", "-q", "HEAD~1")


def _land_the_commit(ws: Path) -> str:
    """The session commits TASK-0049-0013-004's work: the state file still says pending."""
    _git(ws, "add", "work")
    _git(ws, "commit", "-q", "-m", "TASK-0049-0013-004: work landed in this session")
    return _git(ws, "rev-parse", "HEAD")


@pytest.fixture
def in_session(tmp_path: Path) -> tuple[Path, AgentsEnv, str]:
    """A session began before TASK-0049-0013-004's commit, and made it: (ws, env, sha)."""
    ws, env = demo_workspace(tmp_path), AgentsEnv(tmp_path)
    _before_the_last_commit(ws)
    _begin(ws, env)
    return ws, env, _land_the_commit(ws)


@pytest.mark.slow
@pytest.mark.parametrize("event", ["Stop", "SubagentStop"])
def test_stop_blocks_for_a_commit_the_session_made(in_session: tuple[Path, AgentsEnv, str],
                                                   event: str) -> None:
    ws, env, sha = in_session
    reason = _reason(run_hook("stop", hook_payload(event, ws, stop_hook_active=False), env.env))
    assert "task TASK-0049-0013-004" in reason and f"commit {sha}" in reason
    # the journal's and the checkpoint's lag predate the session: not this session's
    assert "state-not-updated" not in reason and "output-before-state-update" not in reason
    fixes = [line.strip()[len("fix: "):] for line in reason.splitlines()
             if line.strip().startswith("fix: ")]
    assert len(fixes) == 1
    assert fixes[0].startswith(f"{STORYD} reconcile --apply --workspace {ws} ")
    assert "unreachable" not in reason  # not in block_stop_on: a rewrite is no lag


@pytest.mark.slow
@pytest.mark.parametrize("event", ["Stop", "SubagentStop"])
def test_stop_never_blocks_for_lag_older_than_the_session(own: tuple[Path, AgentsEnv],
                                                          event: str) -> None:
    """The demo lags git in three state files, all before the session began."""
    ws, env = own
    _begin(ws, env)
    done = run_hook("stop", hook_payload(event, ws, stop_hook_active=False), env.env)
    assert (done.returncode, done.stdout) == (0, b""), done.stdout


@pytest.mark.slow
def test_stop_without_a_session_start_does_not_guess(own: tuple[Path, AgentsEnv]) -> None:
    """No record of where the session began: its first stop proves nothing and records
    the start; a commit landed after that is the session's."""
    ws, env = own
    _before_the_last_commit(ws)
    payload = hook_payload("Stop", ws, stop_hook_active=False)
    assert run_hook("stop", payload, env.env).stdout == b""
    sha = _land_the_commit(ws)
    assert f"commit {sha}" in _reason(run_hook("stop", payload, env.env))


@pytest.mark.slow
def test_stop_blocks_for_a_state_file_the_session_changed(own: tuple[Path, AgentsEnv]) -> None:
    """The session rewrote the checkpoint (tmp then mv) and left its output unrecorded."""
    ws, env = own
    _begin(ws, env)
    phase = ws / "memory/state/phase.json"
    tmp = phase.with_suffix(".tmp")
    tmp.write_bytes(phase.read_bytes())
    tmp.replace(phase)
    reason = _reason(run_hook("stop", hook_payload("Stop", ws, stop_hook_active=False), env.env))
    assert "task task-002: format/output-before-state-update" in reason
    assert "TASK-0049-0013-004" not in reason  # its commit predates the session


@pytest.mark.slow
@pytest.mark.parametrize("fields", [
    {"permission_mode": "plan"},
    {"hook_event_name": "SubagentStop", "agent_type": "Explore"},
    {"hook_event_name": "SubagentStop", "agent_type": "Plan"},
    {"stop_hook_active": True},
], ids=["plan-mode", "explore-subagent", "plan-subagent", "stop_hook_active"])
def test_stop_never_blocks_in_plan_mode_read_only_subagents_or_twice(
        in_session: tuple[Path, AgentsEnv, str], fields: dict[str, object]) -> None:
    ws, env, _ = in_session
    payload = hook_payload("Stop", ws, stop_hook_active=False)
    payload.update(fields)
    done = run_hook("stop", payload, env.env)
    assert (done.returncode, done.stdout) == (0, b""), done.stdout


@pytest.mark.slow
def test_the_printed_fix_runs_with_a_bare_path_and_ends_the_block(
        in_session: tuple[Path, AgentsEnv, str]) -> None:
    ws, env, _ = in_session
    payload = hook_payload("Stop", ws, stop_hook_active=False)
    reason = _reason(run_hook("stop", payload, env.env))
    bare = dict(env.env, PATH="/usr/bin:/bin")
    fixes = [line.strip()[len("fix: "):] for line in reason.splitlines()
             if line.strip().startswith("fix: ")]
    assert fixes
    for fix in fixes:
        done = subprocess.run(["/bin/sh", "-c", fix], env=bare, capture_output=True,
                              timeout=60, check=False)
        assert done.returncode == 0, done.stderr
    after = run_hook("stop", payload, env.env)
    assert (after.returncode, after.stdout) == (0, b""), after.stdout


@pytest.mark.slow
def test_block_stop_on_is_configurable(in_session: tuple[Path, AgentsEnv, str]) -> None:
    ws, env, _ = in_session
    payload = hook_payload("Stop", ws, stop_hook_active=False)
    env.config('block_stop_on = ["state-not-updated"]\n')
    done = run_hook("stop", payload, env.env)
    assert (done.returncode, done.stdout) == (0, b"")  # the session's lag is an unrecorded
    env.config('block_stop_on = ["unrecorded"]\n')
    assert "TASK-0049-0013-004" in _reason(run_hook("stop", payload, env.env))
    env.config("block_stop_on = []\n")
    done = run_hook("stop", payload, env.env)
    assert (done.returncode, done.stdout) == (0, b"")


@pytest.mark.slow
def test_stop_with_the_daemon_unblocks_once_reconciled(
        spawn_daemon: object, in_session: tuple[Path, AgentsEnv, str]) -> None:
    ws, env, _ = in_session
    daemon = spawn_daemon([ws])  # type: ignore[operator]
    denv = dict(daemon.env, XDG_STATE_HOME=env.env["XDG_STATE_HOME"])
    payload = hook_payload("Stop", ws, stop_hook_active=False)
    assert "TASK-0049-0013-004" in _reason(run_hook("stop", payload, denv))
    done = subprocess.run([STORYD, "reconcile", "--apply", "--workspace", str(ws)],
                          env=denv, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr

    def quiet() -> bool:
        return run_hook("stop", payload, denv).stdout == b""

    wait_for(quiet, 20, "the daemon to see the reconciled state files")


@pytest.mark.slow
def test_stop_without_a_daemon_holds_as_the_daemon_does(
        spawn_daemon: object, in_session: tuple[Path, AgentsEnv, str]) -> None:
    """With no daemon, stop runs only the detectors that declare a code it blocks on (here
    unrecorded-commit and commit-in-history): the same reason, byte for byte, as from the
    daemon's findings, where every detector ran."""
    ws, env, _ = in_session
    env.config(f"roots = [{str(ws.parent)!r}]\n"
               'block_stop_on = ["unrecorded", "unreachable", "state-not-updated"]\n')
    payload = hook_payload("Stop", ws, stop_hook_active=False)
    alone = run_hook("stop", payload, env.env)
    assert "TASK-0049-0013-004" in _reason(alone)
    daemon = spawn_daemon([ws])  # type: ignore[operator]
    denv = dict(daemon.env, XDG_STATE_HOME=env.env["XDG_STATE_HOME"],
                XDG_CONFIG_HOME=env.env["XDG_CONFIG_HOME"])
    served = run_hook("stop", payload, denv)
    assert (served.returncode, served.stdout) == (alone.returncode, alone.stdout)
    assert str(ws) in [u["workspace"] for u in daemon.units()]  # it asked the daemon


# -- post-tool-use --------------------------------------------------------------------------


def _written(ws: Path, path: Path, tool: str = "Write") -> dict[str, object]:
    tool_input: dict[str, object] = {"file_path": str(path)}
    tool_input.update({"content": "..."} if tool == "Write" else
                      {"old_string": "a", "new_string": "b"})
    return hook_payload("PostToolUse", ws, tool_name=tool, tool_input=tool_input,
                        tool_response={"filePath": str(path), "success": True})


@pytest.mark.slow
@pytest.mark.parametrize("tool", ["Write", "Edit", "MultiEdit"])
def test_post_tool_use_reports_a_state_file_that_no_longer_parses(
        own: tuple[Path, AgentsEnv], tool: str) -> None:
    ws, env = own
    state = ws / EPIC_STATE
    state.write_bytes(b'{"epic": "0049", "stories": {"story-0049-0013": ')
    done = run_hook("post-tool-use", _written(ws, state, tool), env.env)
    assert done.returncode == 2
    assert done.stdout == b""
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert EPIC_STATE in lines[0] and "line 1 column" in lines[0]


@pytest.mark.slow
def test_post_tool_use_reports_a_state_file_that_lost_its_units(
        own: tuple[Path, AgentsEnv]) -> None:
    ws, env = own
    state = ws / EPIC_STATE
    state.write_bytes(b'{"epic": "0049", "stories": {}}')
    done = run_hook("post-tool-use", _written(ws, state), env.env)
    assert done.returncode == 2
    assert done.stderr.decode() == (
        f"storyd: {EPIC_STATE} holds no units any more (3 at HEAD): "
        "the edit removed them; restore them\n"
    )


@pytest.mark.slow
def test_post_tool_use_names_a_unit_that_no_longer_parses(own: tuple[Path, AgentsEnv]) -> None:
    ws, env = own
    state = ws / ".claude/plans/issue-42-geofencing/execution-state.json"
    state.write_bytes(b'{"tasks": "not a list"}')
    done = run_hook("post-tool-use", _written(ws, state), env.env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.decode().startswith("storyd: .claude/plans/issue-42-geofencing/")


@pytest.mark.slow
def test_post_tool_use_is_silent_for_good_files_and_other_files(
        own: tuple[Path, AgentsEnv]) -> None:
    ws, env = own
    for path in (ws / EPIC_STATE, ws / "plans/epic-0049/story-0049-0013.md", ws / "README.md",
                 ws / "memory/state/phase.json"):
        done = run_hook("post-tool-use", _written(ws, path), env.env)
        assert (done.returncode, done.stdout, done.stderr) == (0, b"", b""), path
    relative = hook_payload("PostToolUse", ws, tool_name="Write",
                            tool_input={"file_path": EPIC_STATE})
    (ws / EPIC_STATE).write_bytes(b"{")
    assert run_hook("post-tool-use", relative, env.env).returncode == 2  # taken from cwd


def test_post_tool_use_ignores_a_state_file_outside_the_roots(tmp_path: Path) -> None:
    ws = demo_workspace(tmp_path / "outside")
    (tmp_path / "elsewhere").mkdir()
    env = AgentsEnv(tmp_path, f"roots = [{str(tmp_path / 'elsewhere')!r}]\n")
    (ws / EPIC_STATE).write_bytes(b"{")
    done = run_hook("post-tool-use", _written(ws, ws / EPIC_STATE), env.env)
    assert (done.returncode, done.stderr) == (0, b"")


@pytest.mark.slow
def test_post_tool_use_waits_for_no_writer_past_its_bound(own: tuple[Path, AgentsEnv]) -> None:
    """A writer holding flock -x: the hook says nothing rather than guess (exit 0)."""
    ws, env = own
    if shutil.which("flock") is None:
        pytest.skip("needs flock(1)")
    state = ws / EPIC_STATE
    holder = subprocess.Popen(["flock", "-x", str(state), "sleep", "30"])
    try:
        wait_for(lambda: exclusively_locked(state), 10, "the writer's lock")
        state.write_bytes(b"{")
        done = run_hook("post-tool-use", _written(ws, state), env.env)
        assert (done.returncode, done.stderr) == (0, b"")
    finally:
        holder.kill()
        holder.wait(10)


def test_unknown_hook_event_is_a_usage_error(shared: tuple[Path, AgentsEnv]) -> None:
    _, env = shared
    done = run_hook("pre-tool-use", b"{}", env.env)
    assert done.returncode == 64
    assert b"session-start, stop, post-tool-use" in done.stderr


def test_config_check_names_each_hooks_problem(tmp_path: Path) -> None:
    env = AgentsEnv(tmp_path, 'block_stop_on = ["nope"]\ncontext_chars = 5\nroots = 3\nfoo = 1\n')
    done = subprocess.run([STORYD, "config", "check"], env=env.env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 78
    lines = [line.split(": ", 1)[1] for line in done.stdout.splitlines()]
    assert lines == [
        "hooks.block_stop_on: unknown code 'nope' (known: unrecorded, unreachable, "
        "squash-merged, missing, state-not-updated, output-before-state-update, "
        "restored-from-backup, regressed)",
        "hooks.context_chars: 5 is out of range: expected 200 to 10000",
        "hooks.roots: expected an array of paths, got an integer",
        "hooks.foo: unknown key 'foo' (known: block_stop_on, context_chars, roots)",
    ]


def test_a_commit_the_session_began_at_is_not_the_sessions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stop's question "did this commit land after the session began?" answers as git
    does for every pair; a commit and the head the session began at, the same sha, is
    answered without starting git (git says it is its own ancestor)."""
    from git_harness import GitRepo

    from storyd.api.hooks import stop

    repo = GitRepo(tmp_path / "ws").init()
    old = repo.commit("old", {"a.txt": "a\n"})
    new = repo.commit("new", {"b.txt": "b\n"})
    ws = str(repo.path)
    pairs = [(old, new), (new, old), (new, new), (old, old), ("nope", "nope"), (new, "")]
    assert [stop._landed_after(ws, c, h) for c, h in pairs] == [
        False, True, False, False, False, True,
    ]  # fmt: skip
    for commit, head in pairs[:5]:
        done = subprocess.run(["git", "-C", ws, "merge-base", "--is-ancestor", commit, head],
                              capture_output=True, check=False)  # fmt: skip
        assert (done.returncode == 1) == stop._landed_after(ws, commit, head)
    fake = tmp_path / "bin" / "git"  # says "not an ancestor" to all, and counts its runs
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho run >>{tmp_path / 'runs'}\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.parent))
    assert stop._landed_after(ws, new, new) is False
    assert not (tmp_path / "runs").exists()
    assert stop._landed_after(ws, old, new) is True  # the fake was asked
    assert (tmp_path / "runs").read_text() == "run\n"
