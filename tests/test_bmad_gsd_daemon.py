"""BMAD and GSD through a real daemon: the same answers and `next` as --direct, the units
in `status`, session-start's context, and the watcher seeing a companion change in the
formats' own folders (a story file's Status: line, a plan's SUMMARY.md appearing)."""

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

SPRINT = "_bmad-output/implementation-artifacts/sprint-status.yaml"
STORY = "_bmad-output/implementation-artifacts/1-2-form.md"
STATE = ".planning/STATE.md"
SUMMARY = ".planning/phases/02-core/02-02-SUMMARY.md"


def _workspace(root: Path) -> Path:
    files = {
        SPRINT: "generated: 2026-02-24\ndevelopment_status:\n  epic-1: in-progress\n"
                "  1-1-setup: done\n  1-2-form: review\n  1-3-api: ready-for-dev\n",
        STORY: "# Story 1.2: Form\n\nStatus: review\n",
        STATE: "## Current Position\n\nPhase: 2 of 3 (Core)\nPlan: 2 of 2\n"
               "Status: In progress\n",
        ".planning/ROADMAP.md": "- [x] **Phase 1: A**\n- [ ] **Phase 2: Core**\n"
                                "- [ ] **Phase 3: C**\n",
        ".planning/phases/02-core/02-01-PLAN.md": "<tasks></tasks>\n",
        ".planning/phases/02-core/02-01-SUMMARY.md": "# done\n",
        ".planning/phases/02-core/02-02-PLAN.md": "<tasks></tasks>\n",
    }
    for relpath, text in files.items():
        (root / relpath).parent.mkdir(parents=True, exist_ok=True)
        (root / relpath).write_text(text)
    return root


def test_both_formats_via_daemon(spawn_daemon: Spawn, tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    proc = spawn_daemon([ws])
    expect = {SPRINT: ("task-1-2-form", "1-2-form"), STATE: ("task-2-02", "2-02")}
    for relpath, (point, task) in expect.items():
        detail = json.loads(same_via_daemon(proc, ws, "resume", "--state-file", relpath,
                                            "--detail"))
        assert detail["envelope"]["resumePoint"] == point, relpath
        assert (detail["next"] or {}).get("task") == task, relpath
    status = run_storyd_cli("status", "--workspace", str(ws), "--json", env=proc.env)
    assert status.returncode == 0, status.stderr
    listed = status.stdout.decode()
    for name in ('"sprint"', '"project"'):
        assert name in listed, name


def test_the_watcher_sees_companions(spawn_daemon: Spawn, tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    proc = spawn_daemon([ws])
    with EventStream(proc) as events:
        mark = events.mark()
        (ws / STORY).write_text("# Story 1.2: Form\n\nStatus: done\n")
        events.wait(lambda e: e.get("event") == "changed" and e.get("stateFile") == SPRINT,
                    start=mark, timeout=10, message=f"a changed event for {SPRINT}")
        mark = events.mark()
        (ws / SUMMARY).write_text("# done\n")
        events.wait(lambda e: e.get("event") == "changed" and e.get("stateFile") == STATE,
                    start=mark, timeout=10, message=f"a changed event for {STATE}")
    detail = json.loads(same_via_daemon(proc, ws, "resume", "--state-file", STATE, "--detail"))
    # phase 2's plans all have a SUMMARY.md now: complete, so the next is the transition
    assert detail["next"]["task"] == "phase-3" and "transition" in detail["next"]["why"]


def test_session_start_context_lists_them(tmp_path: Path) -> None:
    from agents_harness import AgentsEnv, hook_payload, run_hook

    ws = _workspace(tmp_path / "ws")
    env = AgentsEnv(tmp_path)
    done = run_hook("session-start", hook_payload("SessionStart", ws, source="startup"),
                    env.env)
    assert done.returncode == 0, done.stderr
    text = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
    for line in (f"bmad sprint ({SPRINT}): resume at task-1-2-form",
                 f"gsd project ({STATE}): resume at task-2-02"):
        assert line in text, text
