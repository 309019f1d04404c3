"""The newer formats through a real daemon, one workspace per family: spec-kit, Kiro, Task
Master and beads; OpenSpec, Backlog.md and Codex ExecPlans; BMAD and GSD. For each: the
same answers and `next` as --direct, the units in `status`, session-start's context, and
the watcher seeing a change in the formats' own folders (a ticked box, a Backlog.md task
file or a BMAD story file for its state file, a GSD plan's SUMMARY.md appearing)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_harness import run_storyd_cli
from daemon_harness import DaemonProcess, EventStream
from test_producers_daemon import same_via_daemon

pytestmark = pytest.mark.slow

Spawn = Callable[..., DaemonProcess]

SPEC_KIT = "specs/001-login/tasks.md"
KIRO = ".kiro/specs/cart/tasks.md"
TM = ".taskmaster/tasks/tasks.json"
BEADS = ".beads/issues.jsonl"
SPEC = "openspec/changes/add-login/tasks.md"
ARCHIVED = "openspec/changes/archive/2026-01-31-add-auth/tasks.md"
CONFIG = "backlog/config.yml"
TASK_2 = "backlog/tasks/task-2 - Form.md"
PLAN = ".agent/plans/001-bootstrap.md"
SPRINT = "_bmad-output/implementation-artifacts/sprint-status.yaml"
STORY = "_bmad-output/implementation-artifacts/1-2-form.md"
STATE = ".planning/STATE.md"
SUMMARY = ".planning/phases/02-core/02-02-SUMMARY.md"


@dataclass(frozen=True)
class Edit:
    """A change to one file (`old` None: the file is written whole) and the state file
    whose `changed` event it must bring."""

    relpath: str
    old: str | None
    new: str
    owner: str = ""


@dataclass(frozen=True)
class Family:
    """One workspace of formats and what each door must show of it."""

    files: dict[str, str]
    answers: dict[str, tuple[str, str | None]]  # state file -> (resumePoint, next task)
    listed: tuple[str, ...]  # unit names `status --json` holds
    edits: tuple[Edit, ...]
    context: tuple[str, ...]  # session-start lines

    def lay_out(self, root: Path) -> Path:
        for relpath, text in self.files.items():
            (root / relpath).parent.mkdir(parents=True, exist_ok=True)
            (root / relpath).write_text(text)
        return root


def _backlog_task(ident: str, status: str, deps: str = "[]") -> str:
    return f"---\nid: {ident}\ntitle: {ident}\nstatus: {status}\ndependencies: {deps}\n---\n"


FOUR = Family(
    files={
        SPEC_KIT: "## Phase 1\n\n- [X] T001 Setup\n- [ ] T002 [P] Login form\n",
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
    },
    answers={SPEC_KIT: ("task-T002", "T002"), KIRO: ("task-1.3", "1.3"),
             TM: ("task-2", "2"), BEADS: ("task-bd-3", "bd-3")},
    listed=("001-login", "cart", "feature-x", "master", "issues"),
    edits=(Edit(SPEC_KIT, "- [ ] T002", "- [X] T002"), Edit(KIRO, "- [ ] 1.3", "- [x] 1.3"),
           Edit(BEADS, '"id": "bd-3", "status": "open"', '"id": "bd-3", "status": "closed"'),
           Edit(TM, '"status": "pending"', '"status": "done"')),
    context=("spec-kit 001-login (specs/001-login/tasks.md): resume at task-T002",
             "kiro cart (.kiro/specs/cart/tasks.md): resume at task-1.3",
             "task-master feature-x (.taskmaster/tasks/tasks.json): resume at task-2",
             "beads issues (.beads/issues.jsonl): resume at task-bd-3"),
)

MARKDOWN = Family(
    files={
        SPEC: "## 1. Setup\n\n- [x] 1.1 Module\n- [ ] 1.2 Form\n",
        ARCHIVED: "- [x] 1.1 a\n- [ ] 1.2 b\n",
        CONFIG: 'statuses: ["To Do", "In Progress", "Done"]\ndefault_status: "To Do"\n',
        "backlog/tasks/task-1 - Setup.md": _backlog_task("task-1", "Done"),
        TASK_2: _backlog_task("task-2", "To Do", "[task-1]"),
        "backlog/tasks/task-3 - Api.md": _backlog_task("task-3", "To Do", "[task-2]"),
        PLAN: "# P\n\n## Progress\n\n- [x] (2026-02-07 10:00Z) Repo\n- [ ] Deploy\n",
    },
    answers={SPEC: ("task-1.2", "1.2"), CONFIG: ("task-task-2", "task-2"),
             PLAN: ("task-#2", "#2"), ARCHIVED: ("all-done", None)},
    listed=("add-login", "add-auth", "backlog", "001-bootstrap"),
    edits=(Edit(SPEC, "- [ ] 1.2", "- [x] 1.2"),
           Edit(TASK_2, "status: To Do", "status: Done", owner=CONFIG),
           Edit(PLAN, "- [ ] Deploy", "- [x] (2026-02-08 09:00Z) Deploy")),
    context=(f"openspec add-login ({SPEC}): resume at task-1.2",
             f"backlog-md backlog ({CONFIG}): resume at task-task-2",
             f"execplan 001-bootstrap ({PLAN}): resume at task-#2"),
)

BMAD_GSD = Family(
    files={
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
    },
    answers={SPRINT: ("task-1-2-form", "1-2-form"), STATE: ("task-2-02", "2-02")},
    listed=("sprint", "project"),
    edits=(Edit(STORY, None, "# Story 1.2: Form\n\nStatus: done\n", owner=SPRINT),
           Edit(SUMMARY, None, "# done\n", owner=STATE)),
    context=(f"bmad sprint ({SPRINT}): resume at task-1-2-form",
             f"gsd project ({STATE}): resume at task-2-02"),
)

FAMILIES = {"spec-kit, kiro, task-master, beads": FOUR,
            "openspec, backlog-md, execplan": MARKDOWN, "bmad, gsd": BMAD_GSD}
each_family = pytest.mark.parametrize("family", FAMILIES.values(), ids=FAMILIES.keys())


@each_family
def test_answers_and_status_via_daemon(spawn_daemon: Spawn, tmp_path: Path,
                                       family: Family) -> None:  # fmt: skip
    ws = family.lay_out(tmp_path / "ws")
    proc = spawn_daemon([ws])
    for relpath, (point, task) in family.answers.items():
        detail = json.loads(same_via_daemon(proc, ws, "resume", "--state-file", relpath,
                                            "--detail"))
        assert detail["envelope"]["resumePoint"] == point, relpath
        assert (detail["next"] or {}).get("task") == task, relpath
    status = run_storyd_cli("status", "--workspace", str(ws), "--json", env=proc.env)
    assert status.returncode == 0, status.stderr
    listed = status.stdout.decode()
    for name in family.listed:
        assert f'"{name}"' in listed, name
    if family is FOUR:
        _task_master_tag_and_cache(proc, ws)
    if family is MARKDOWN:
        detail = json.loads(same_via_daemon(proc, ws, "resume", "--state-file", CONFIG,
                                            "--detail"))
        assert detail["next"]["blocked"] == [{"id": "task-3", "waitingFor": ["task-2"]}]


def _task_master_tag_and_cache(proc: DaemonProcess, ws: Path) -> None:
    """The current tag with no --unit; the socket's `resume` op carries `next` too."""
    detail = json.loads(same_via_daemon(proc, ws, "resume", "--state-file", TM, "--detail"))
    assert detail["next"]["tag"] == "feature-x"
    assert detail["next"]["dependencies"] == ["1"]
    for _ in range(2):  # a read, then the cache
        answer = proc.request({"op": "resume", "workspace": str(ws.resolve()), "stateFile": TM})
        assert answer["next"] == detail["next"], answer
    assert answer["source"] == "cache"
    master = same_via_daemon(proc, ws, "resume", "--state-file", TM, "--unit", "master")
    assert json.loads(master)["resumePoint"] == "all-done"


@each_family
def test_the_watcher_sees_each_change(spawn_daemon: Spawn, tmp_path: Path,
                                      family: Family) -> None:  # fmt: skip
    """A `changed` event for each edit's state file, with no query asking (the watcher)."""
    ws = family.lay_out(tmp_path / "ws")
    proc = spawn_daemon([ws])
    with EventStream(proc) as events:
        for edit in family.edits:
            mark = events.mark()
            path = ws / edit.relpath
            if edit.old is None:
                path.write_text(edit.new)
            else:
                text = path.read_text()
                assert edit.old in text
                path.write_text(text.replace(edit.old, edit.new))
            state = edit.owner or edit.relpath
            events.wait(lambda e, r=state: e.get("event") == "changed"
                        and e.get("stateFile") == r, start=mark, timeout=10,
                        message=f"a changed event for {state}")
    if family is BMAD_GSD:
        detail = json.loads(same_via_daemon(proc, ws, "resume", "--state-file", STATE,
                                            "--detail"))
        # phase 2's plans all have a SUMMARY.md now: complete, so the next is the transition
        assert detail["next"]["task"] == "phase-3" and "transition" in detail["next"]["why"]


@each_family
def test_session_start_context_lists_them(tmp_path: Path, family: Family) -> None:
    """Claude Code's SessionStart hook: each unit with its resume point (issue 30)."""
    from agents_harness import AgentsEnv, hook_payload, run_hook

    ws = family.lay_out(tmp_path / "ws")
    env = AgentsEnv(tmp_path)
    done = run_hook("session-start", hook_payload("SessionStart", ws, source="startup"),
                    env.env)
    assert done.returncode == 0, done.stderr
    text = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
    for line in family.context:
        assert line in text, text
    if family is MARKDOWN:
        assert "add-auth" not in text  # archived: not in flight
