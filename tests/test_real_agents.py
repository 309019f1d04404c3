"""The agents themselves: Claude Code, Codex CLI and Gemini CLI, installed from npm at
pinned versions, run non-interactively in storyd demo's workspace with `storyd install
--AGENT --project` done, against a scripted model on 127.0.0.1 (tests/mock_models.py).
Each test asserts on what reached the model: storyd's session-start context, its
warning after a Write, an Edit or a shell command that broke a state file, a stop held
for lag the session made (and not for older lag), with the daemon up and down.

Slow (an agent's start is 1-3 s) and skipped, with npm's reason, where npm or its
registry cannot be reached; .ci/run installs the packages before pytest starts.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from agents_real_harness import AGENTS, Installs, Ran, Session, no_python
from daemon_harness import DaemonProcess
from mock_models import Call, Say

pytestmark = pytest.mark.slow  # (the version checks are quick, but marked with the rest)

EPIC_STATE = "plans/epic-0049/execution-state.json"
BROKEN = '{"epic": "0049", "stories": {"story-0049-0013":'
TITLE = '"title": "Internal skills carve-out",'


@pytest.fixture(scope="session")
def installs() -> Installs:
    """The agents' packages, installed once per machine (and cached across runs)."""
    return Installs()


def _session(name: str, installs: Installs, tmp_path: Path) -> Session:
    return Session(name, installs.program(name), tmp_path)


# -- each agent's tools: the calls its model makes ---------------------------------------

NAMES = ["claude", "codex", "gemini"]


def _patch(*lines: str) -> str:
    return "\n".join(["*** Begin Patch", *lines, "*** End Patch", ""])


def _write(name: str, path: Path, content: str) -> list[Call]:
    """Write the whole file (Claude Code writes over a file only after reading it)."""
    if name == "claude":
        return [Call("Read", {"file_path": str(path)}),
                Call("Write", {"file_path": str(path), "content": content})]  # fmt: skip
    if name == "codex":  # apply_patch, Codex's one file tool (Add File writes over)
        added = [f"+{line}" for line in content.splitlines()]
        return [Call("apply_patch", _patch(f"*** Add File: {path}", *added))]
    return [Call("write_file", {"file_path": str(path), "content": content})]


def _edit(name: str, path: Path, old: str, new: str) -> list[Call]:
    """Replace one line's text in the file."""
    if name == "claude":
        edit = {"file_path": str(path), "old_string": old, "new_string": new}
        return [Call("Read", {"file_path": str(path)}), Call("Edit", edit)]
    if name == "codex":
        return [Call("apply_patch", _patch(f"*** Update File: {path}", "@@", f"-  {old}",
                                           f"+  {new}"))]  # fmt: skip
    return [Call("replace", {"file_path": str(path), "old_string": old, "new_string": new,
                             "instruction": "update the title"})]  # fmt: skip


def _shell(name: str, command: str) -> list[Call]:
    """Run a shell command in the workspace."""
    if name == "claude":
        return [Call("Bash", {"command": command, "description": "update the state"})]
    if name == "codex":
        return [Call("exec_command", {"cmd": command})]
    return [Call("run_shell_command", {"command": command, "description": "update the state"})]


def _after_each_call(ran: Ran) -> list[str]:
    """What the model was told on each turn after the first (each holds one more tool
    result)."""
    return [turn.text() for turn in ran.model.turns()[1:]]


# -- session start ------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_the_units_in_flight_reach_the_model_at_session_start(
        name: str, installs: Installs, tmp_path: Path) -> None:  # fmt: skip
    session = _session(name, installs, tmp_path)
    ran = session.run([Say("Nothing to do.")])
    first = ran.model.turns()[0].text()
    assert f"storyd: 6 unit(s) in flight in {session.ws}" in first
    assert f"- epic story-0049-0013 ({EPIC_STATE}): resume at phase-2-task-4, 3/5 done" in first
    assert len(ran.model.turns()) == 1  # the demo's lag predates the session: no stop held


# -- after a tool -------------------------------------------------------------------------


def _told_it_broke(ran: Ran) -> None:
    told = _after_each_call(ran)[-1]
    lines = [line for line in told.splitlines() if EPIC_STATE in line and "storyd" in line]
    assert any("no longer parses" in line for line in lines), told[-3000:]


@pytest.mark.parametrize("name", NAMES)
def test_a_write_that_breaks_a_state_file_is_told_to_the_model(
        name: str, installs: Installs, tmp_path: Path) -> None:  # fmt: skip
    session = _session(name, installs, tmp_path)
    state = session.ws / EPIC_STATE
    ran = session.run([*_write(name, state, BROKEN), Say("Written.")])
    assert state.read_text().rstrip("\n") == BROKEN  # apply_patch ends it with a newline
    _told_it_broke(ran)


@pytest.mark.parametrize("name", NAMES)
def test_an_edit_that_breaks_a_state_file_is_told_to_the_model(
        name: str, installs: Installs, tmp_path: Path) -> None:  # fmt: skip
    session = _session(name, installs, tmp_path)
    state = session.ws / EPIC_STATE
    ran = session.run([*_edit(name, state, TITLE, TITLE + ","), Say("Edited.")])
    assert TITLE + "," in state.read_text()
    _told_it_broke(ran)


@pytest.mark.parametrize("name", NAMES)
def test_a_shell_command_that_breaks_a_state_file_is_told_to_the_model(
        name: str, installs: Installs, tmp_path: Path) -> None:  # fmt: skip
    ran = _break_by_shell(name, installs, tmp_path, "true")
    assert "no longer parses" in _after_each_call(ran)[-1]  # (the helper says where)


def _break_by_shell(name: str, installs: Installs, tmp_path: Path, then: str) -> Ran:
    """The agent's shell breaks the epic's state file, then runs `then`; storyd told it."""
    session = _session(name, installs, tmp_path)
    ran = session.run([*_shell(name, f"printf '%s' '{BROKEN}' > {EPIC_STATE}; {then}"),
                       Say("Done.")])  # fmt: skip
    assert (session.ws / EPIC_STATE).read_text() == BROKEN
    _told_it_broke(ran)
    return ran


@pytest.mark.parametrize("name", [
    "claude", "codex", "gemini",
])  # fmt: skip
def test_a_failing_shell_command_that_breaks_a_state_file_is_told_to_the_model(
        name: str, installs: Installs, tmp_path: Path) -> None:  # fmt: skip
    ran = _break_by_shell(name, installs, tmp_path, "exit 3")
    assert "no longer parses" in _after_each_call(ran)[-1]  # told though the command failed


@pytest.mark.parametrize("name", [
    "claude", "codex", "gemini",
])  # fmt: skip
def test_the_tools_own_output_reaches_the_model_beside_the_warning(
        name: str, installs: Installs, tmp_path: Path) -> None:  # fmt: skip
    ran = _break_by_shell(name, installs, tmp_path, "printf 'the-tool-said-%s\\n' 42")
    assert "the-tool-said-42" in _after_each_call(ran)[-1]  # the output, not the command


@pytest.mark.parametrize("name", NAMES)
def test_a_tool_that_leaves_the_state_files_alone_adds_nothing(
        name: str, installs: Installs, tmp_path: Path) -> None:  # fmt: skip
    session = _session(name, installs, tmp_path)
    ran = session.run([*_shell(name, "echo hello > notes.txt"), Say("Done.")])
    assert "no longer parses" not in "\n".join(_after_each_call(ran))


# -- stop: the session's own lag, with the daemon up and down ------------------------------


COMMIT = "git add work && git commit -q -m 'TASK-0049-0013-004: work landed in this session'"


def _before_the_last_commit(session: Session) -> None:
    """The demo as it was before TASK-0049-0013-004's commit (its work uncommitted)."""
    session.git("reset", "-q", "HEAD~1")


def _held_once(ran: Ran, sha: str) -> str:
    """The stop was held once, with the reason the model got; its second stop was not."""
    turns = ran.model.turns()
    reason = turns[-1].text()
    assert f"commit {sha}" in reason and "task TASK-0049-0013-004" in reason, reason[-3000:]
    assert "reconcile --apply --workspace" in reason
    assert all(f"commit {sha}" not in turn.text() for turn in turns[:-1])
    return reason


@pytest.mark.parametrize("name", NAMES)
def test_a_stop_is_held_for_a_commit_the_session_made(
        name: str, installs: Installs, tmp_path: Path) -> None:  # fmt: skip
    session = _session(name, installs, tmp_path)
    _before_the_last_commit(session)
    ran = session.run([*_shell(name, COMMIT), Say("Committed."), Say("Still done.")])
    reason = _held_once(ran, session.git("rev-parse", "HEAD"))
    assert "TASK-0049-0013-004" in reason


@pytest.mark.parametrize("name", NAMES)
def test_a_stop_is_not_held_for_lag_older_than_the_session(
        name: str, installs: Installs, tmp_path: Path) -> None:  # fmt: skip
    """The demo lags git in three state files, all before the session began; the
    session runs a tool and stops: one answer after the tool, none after the stop."""
    session = _session(name, installs, tmp_path)
    ran = session.run([*_shell(name, "git status --short"), Say("Looked.")])
    assert len(ran.model.turns()) == 2
    assert "reconcile --apply" not in ran.model.told()


@pytest.mark.parametrize("name", NAMES)
def test_with_the_daemon_up_it_answers_every_hook(
        name: str, installs: Installs, tmp_path: Path,
        spawn_daemon: Callable[..., DaemonProcess]) -> None:  # fmt: skip
    """The same session, its hooks answered by the daemon's `hook` op through
    storyd-hook: any Python storyd that started would fail (no_python). The session
    breaks the state file (told), mends it, and its stop is held for its commit; a stop
    while the file was broken holds nothing built on its last good version (issue 40)."""
    session = _session(name, installs, tmp_path)
    _before_the_last_commit(session)
    daemon = spawn_daemon([session.ws], start=False)
    daemon.env = session.env  # the hook op answers only a hook of its own HOME
    daemon.start()
    state = session.ws / EPIC_STATE
    whole = state.read_text()
    script = [*_shell(name, COMMIT), *_write(name, state, BROKEN)]
    script += [*_rewrite(name, state, whole), Say("Done."), Say("Done.")]
    ran = session.run(script, env=no_python(session.env, tmp_path))
    assert "SHADOW" not in ran.done.stderr
    assert f"storyd: 6 unit(s) in flight in {session.ws}" in ran.model.turns()[0].text()
    assert any("no longer parses" in line and EPIC_STATE in line
               for line in ran.model.told().splitlines())
    _held_once(ran, session.git("rev-parse", "HEAD"))
    assert daemon.running()


def _rewrite(name: str, path: Path, content: str) -> list[Call]:
    """Write the file again after the agent's own write (no second Read for Claude)."""
    calls = _write(name, path, content)
    return calls[1:] if name == "claude" else calls


@pytest.mark.parametrize("doc", ["docs/agents.md", ".ci/run"])
def test_the_pinned_versions_are_the_ones_named(doc: str) -> None:
    """docs/agents.md's table and .ci/run's prefetch name the versions the tests run."""
    text = (Path(__file__).resolve().parents[1] / doc).read_text()
    for agent in AGENTS.values():
        assert f"{agent.package}@{agent.version}" in text, agent
