"""spec-kit, Kiro, Task Master and beads through a real daemon: the same answers and
`next` as --direct, the current tag with no --unit, the units in `status`, and the
watcher seeing a ticked box in the formats' own folders."""

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

SPEC = "specs/001-login/tasks.md"
KIRO = ".kiro/specs/cart/tasks.md"
TM = ".taskmaster/tasks/tasks.json"
BEADS = ".beads/issues.jsonl"


def _workspace(root: Path) -> Path:
    files = {
        SPEC: "## Phase 1\n\n- [X] T001 Setup\n- [ ] T002 [P] Login form\n",
        KIRO: "# Implementation Plan\n\n- [-] 1. Cart\n  - [x] 1.1 Model\n  - [ ]* 1.2 Tests\n"
              "  - [ ] 1.3 View\n",
        TM: json.dumps({
            "master": {"tasks": [{"id": 1, "status": "done", "dependencies": []}]},
            "feature-x": {"tasks": [
                {"id": 1, "status": "done", "dependencies": []},
                {"id": 2, "status": "pending", "dependencies": [1], "priority": "high"},
            ]},
        }),
        ".taskmaster/state.json": json.dumps({"currentTag": "feature-x"}),
        BEADS: "\n".join(json.dumps(i) for i in (
            {"id": "bd-1", "status": "closed", "priority": 1},
            {"id": "bd-2", "status": "open", "priority": 1, "dependencies": [
                {"issue_id": "bd-2", "depends_on_id": "bd-3", "type": "blocks"}]},
            {"id": "bd-3", "status": "open", "priority": 2},
        )) + "\n",
    }
    for relpath, text in files.items():
        (root / relpath).parent.mkdir(parents=True, exist_ok=True)
        (root / relpath).write_text(text)
    return root


def test_the_four_formats_via_daemon(spawn_daemon: Spawn, tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    proc = spawn_daemon([ws])
    expect = {SPEC: ("task-T002", "T002"), KIRO: ("task-1.3", "1.3"),
              TM: ("task-2", "2"), BEADS: ("task-bd-3", "bd-3")}
    for relpath, (point, task) in expect.items():
        detail = json.loads(same_via_daemon(proc, ws, "resume", "--state-file", relpath,
                                            "--detail"))
        assert detail["envelope"]["resumePoint"] == point, relpath
        assert detail["next"]["task"] == task, relpath
    detail = json.loads(same_via_daemon(proc, ws, "resume", "--state-file", TM, "--detail"))
    assert detail["next"]["tag"] == "feature-x"
    assert detail["next"]["dependencies"] == ["1"]
    for _ in range(2):  # a read, then the cache: the socket's `resume` op carries `next` too
        answer = proc.request({"op": "resume", "workspace": str(ws.resolve()), "stateFile": TM})
        assert answer["next"] == detail["next"], answer
    assert answer["source"] == "cache"
    master = same_via_daemon(proc, ws, "resume", "--state-file", TM, "--unit", "master")
    assert json.loads(master)["resumePoint"] == "all-done"
    status = run_storyd_cli("status", "--workspace", str(ws), "--json", env=proc.env)
    assert status.returncode == 0, status.stderr
    listed = status.stdout.decode()
    for name in ("001-login", "cart", "feature-x", "master", "issues"):
        assert f'"{name}"' in listed, name


def test_the_watcher_sees_a_ticked_box(spawn_daemon: Spawn, tmp_path: Path) -> None:
    """A `changed` event for each format's unit, with no query asking (the watcher)."""
    ws = _workspace(tmp_path / "ws")
    proc = spawn_daemon([ws])
    edits = {
        SPEC: ("- [ ] T002", "- [X] T002"),
        KIRO: ("- [ ] 1.3", "- [x] 1.3"),
        BEADS: ('"id": "bd-3", "status": "open"', '"id": "bd-3", "status": "closed"'),
        TM: ('"status": "pending"', '"status": "done"'),
    }
    with EventStream(proc) as events:
        for relpath, (old, new) in edits.items():
            mark = events.mark()
            path = ws / relpath
            text = path.read_text()
            assert old in text
            path.write_text(text.replace(old, new))
            events.wait(lambda e, r=relpath: e.get("event") == "changed"
                        and e.get("stateFile") == r, start=mark, timeout=10,
                        message=f"a changed event for {relpath}")


def test_session_start_context_lists_the_four_formats(tmp_path: Path) -> None:
    """Claude Code's SessionStart hook: each unit with its resume point (issue 30)."""
    from agents_harness import AgentsEnv, hook_payload, run_hook

    ws = _workspace(tmp_path / "ws")
    env = AgentsEnv(tmp_path)
    done = run_hook("session-start", hook_payload("SessionStart", ws, source="startup"),
                    env.env)
    assert done.returncode == 0, done.stderr
    text = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
    for line in ("spec-kit 001-login (specs/001-login/tasks.md): resume at task-T002",
                 "kiro cart (.kiro/specs/cart/tasks.md): resume at task-1.3",
                 "task-master feature-x (.taskmaster/tasks/tasks.json): resume at task-2",
                 "beads issues (.beads/issues.jsonl): resume at task-bd-3"):
        assert line in text, text
