"""The link rule on every state-file read (issue 29): a state file, an external epic or
a companion whose links lead out of the workspace is refused, as `storyd resume`
refuses it (64), by the epic view (command and socket op) too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_harness import run_storyd_cli
from daemon_harness import DaemonProcess, daemon_env
from epic_state_harness import write_epic

from storyd.core.errors import UsageError
from storyd.core.formats.base import Source

Spawn = Callable[..., DaemonProcess]
SECRET = "story-0049-0009"


@pytest.fixture
def linked_out(tmp_path: Path) -> Path:
    """A workspace whose epic 0049 state file is a symlink to a file outside it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    write_epic(outside, "0049", tasks={SECRET: {"TASK-0049-0009-001": {"status": "DONE"}}})
    ws = tmp_path / "ws"
    folder = ws / "plans" / "epic-0049"
    folder.mkdir(parents=True)
    os.symlink(outside / "plans" / "epic-0049" / "execution-state.json",
               folder / "execution-state.json")
    return ws


def test_source_read_refuses_a_link_out_of_the_workspace(linked_out: Path) -> None:
    with pytest.raises(UsageError) as refused:
        Source(str(linked_out)).read("plans/epic-0049/execution-state.json")
    assert refused.value.code == 64
    assert "outside the workspace" in refused.value.message


def test_a_link_inside_the_workspace_is_read(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    real = write_epic(ws, "0049", tasks={SECRET: {"T1": {"status": "DONE"}}})
    (ws / "alias.json").symlink_to(real)
    assert json.loads(Source(str(ws)).read("alias.json"))["epic"] == "0049"


@pytest.mark.slow
def test_the_epic_command_refuses_it_as_resume_does(linked_out: Path, tmp_path: Path) -> None:
    env = daemon_env(tmp_path, tmp_path / "run" / "none.sock")
    epic = run_storyd_cli("epic", "--epic-id", "0049", "--direct", "--workspace",
                          str(linked_out), env=env)
    resume = run_storyd_cli("resume", "--direct", "--epic-id", "0049", "--story-id", SECRET,
                            "--workspace", str(linked_out), env=env)
    assert resume.returncode == 64, resume
    assert epic.returncode == 64, epic
    assert SECRET not in epic.stdout.decode() + epic.stderr.decode()
    assert "outside the workspace" in epic.stderr.decode()


@pytest.mark.slow
def test_the_epic_socket_op_refuses_it(linked_out: Path, spawn_daemon: Spawn) -> None:
    daemon = spawn_daemon([linked_out])
    answer = daemon.request({"op": "epic", "workspace": str(linked_out), "epic": "0049"})
    assert answer["ok"] is False, answer
    assert answer["error"]["code"] == 64, answer  # type: ignore[index]
    assert SECRET not in json.dumps(answer)
    daemon.stop()


def test_an_external_epic_linked_out_is_named_never_read(tmp_path: Path) -> None:
    from storyd.api.epicview import epic_view

    ws = tmp_path / "ws"
    write_epic(ws, "0049", stories={"story-0049-0001": {
        "status": "PENDING", "tasks": {},
        "externalDependencies": [{"id": "EPIC-0050", "blocking": True}]}})
    outside = tmp_path / "outside"
    write_epic(outside, "0050", tasks={"story-0050-0001": {"T": {"status": "DONE"}}})
    (ws / "plans" / "epic-0050").mkdir()
    os.symlink(outside / "plans" / "epic-0050" / "execution-state.json",
               ws / "plans" / "epic-0050" / "execution-state.json")
    view = epic_view(str(ws), "0049")
    text = json.dumps(view)
    assert "outside the workspace" in text, text


@pytest.mark.slow
def test_an_epic_over_the_task_cap_is_refused_like_resume(tmp_path: Path) -> None:
    """The view is bounded like every answer: 100,001 tasks are refused (65), not 10+ MB."""
    from storyd.core.pipeline import MAX_UNIT_TASKS

    ws = tmp_path / "ws"
    tasks = {f"TASK-0049-0001-{n:06d}": {"status": "PENDING"} for n in range(MAX_UNIT_TASKS + 1)}
    write_epic(ws, "0049", tasks={"story-0049-0001": tasks})
    env = daemon_env(tmp_path, tmp_path / "run" / "none.sock")
    done = run_storyd_cli("epic", "--epic-id", "0049", "--direct", "--workspace", str(ws),
                          env=env)
    assert done.returncode == 65, done
    assert done.stdout == b""
    assert "100,001 tasks, more than the 100,000" in done.stderr.decode()
