"""OpenSpec, Backlog.md and Codex ExecPlans through a real daemon: the same answers and
`next` as --direct, the units in `status`, session-start's context, and the watcher
seeing a change in the formats' own folders (a Backlog.md task file, a companion of
backlog/config.yml)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_harness import run_storyd_cli
from daemon_harness import DaemonProcess, EventStream
from test_producers_daemon import same_via_daemon

pytestmark = pytest.mark.slow

Spawn = Callable[..., DaemonProcess]

SPEC = "openspec/changes/add-login/tasks.md"
ARCHIVED = "openspec/changes/archive/2026-01-31-add-auth/tasks.md"
CONFIG = "backlog/config.yml"
TASK_2 = "backlog/tasks/task-2 - Form.md"
PLAN = ".agent/plans/001-bootstrap.md"


def _task(ident: str, status: str, deps: str = "[]") -> str:
    return f"---\nid: {ident}\ntitle: {ident}\nstatus: {status}\ndependencies: {deps}\n---\n"


def _workspace(root: Path) -> Path:
    files = {
        SPEC: "## 1. Setup\n\n- [x] 1.1 Module\n- [ ] 1.2 Form\n",
        ARCHIVED: "- [x] 1.1 a\n- [ ] 1.2 b\n",
        CONFIG: 'statuses: ["To Do", "In Progress", "Done"]\ndefault_status: "To Do"\n',
        "backlog/tasks/task-1 - Setup.md": _task("task-1", "Done"),
        TASK_2: _task("task-2", "To Do", "[task-1]"),
        "backlog/tasks/task-3 - Api.md": _task("task-3", "To Do", "[task-2]"),
        PLAN: "# P\n\n## Progress\n\n- [x] (2026-02-07 10:00Z) Repo\n- [ ] Deploy\n",
    }
    for relpath, text in files.items():
        (root / relpath).parent.mkdir(parents=True, exist_ok=True)
        (root / relpath).write_text(text)
    return root


def test_the_three_formats_via_daemon(spawn_daemon: Spawn, tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    proc = spawn_daemon([ws])
    expect = {SPEC: ("task-1.2", "1.2"), CONFIG: ("task-task-2", "task-2"),
              PLAN: ("task-#2", "#2"), ARCHIVED: ("all-done", None)}
    for relpath, (point, task) in expect.items():
        detail = json.loads(same_via_daemon(proc, ws, "resume", "--state-file", relpath,
                                            "--detail"))
        assert detail["envelope"]["resumePoint"] == point, relpath
        assert (detail["next"] or {}).get("task") == task, relpath
    detail = json.loads(same_via_daemon(proc, ws, "resume", "--state-file", CONFIG, "--detail"))
    assert detail["next"]["blocked"] == [{"id": "task-3", "waitingFor": ["task-2"]}]
    status = run_storyd_cli("status", "--workspace", str(ws), "--json", env=proc.env)
    assert status.returncode == 0, status.stderr
    listed = status.stdout.decode()
    for name in ("add-login", "add-auth", "backlog", "001-bootstrap"):
        assert f'"{name}"' in listed, name


def test_the_watcher_sees_a_task_file_change(spawn_daemon: Spawn, tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    proc = spawn_daemon([ws])
    edits = {SPEC: ("- [ ] 1.2", "- [x] 1.2"), TASK_2: ("status: To Do", "status: Done"),
             PLAN: ("- [ ] Deploy", "- [x] (2026-02-08 09:00Z) Deploy")}
    owners = {TASK_2: CONFIG}
    with EventStream(proc) as events:
        for relpath, (old, new) in edits.items():
            mark = events.mark()
            path = ws / relpath
            text = path.read_text()
            assert old in text
            path.write_text(text.replace(old, new))
            state = owners.get(relpath, relpath)
            events.wait(lambda e, r=state: e.get("event") == "changed"
                        and e.get("stateFile") == r, start=mark, timeout=10,
                        message=f"a changed event for {state}")


def test_session_start_context_lists_them(tmp_path: Path) -> None:
    from agents_harness import AgentsEnv, hook_payload, run_hook

    ws = _workspace(tmp_path / "ws")
    env = AgentsEnv(tmp_path)
    done = run_hook("session-start", hook_payload("SessionStart", ws, source="startup"),
                    env.env)
    assert done.returncode == 0, done.stderr
    text = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
    for line in (f"openspec add-login ({SPEC}): resume at task-1.2",
                 f"backlog-md backlog ({CONFIG}): resume at task-task-2",
                 f"execplan 001-bootstrap ({PLAN}): resume at task-#2"):
        assert line in text, text
    assert "add-auth" not in text  # archived: not in flight
