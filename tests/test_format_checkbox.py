"""The spec-kit and Kiro formats (markdown checkbox task lists), on fixtures written here.

Each rule of docs/formats.md's sections: which lines are tasks, done marks, the next
task, findings, the active feature, excluded folders, and the envelope.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import orjson
from format_harness import codes, direct_envelope, load_one

from storyd.core.formats import adapter_for, builtin
from storyd.core.formats.base import Source

SPEC = "specs/003-login/tasks.md"
KIRO = ".kiro/specs/checkout/tasks.md"

SPEC_TEXT = """\
# Tasks: Login

## Format: `[ID] [P?] [Story] Description`

- **[P]**: Can run in parallel
- **[Story]**: Which user story
- [P] tasks = different files, no dependencies
- [Story] label maps task to user story
- [spec.md](./spec.md)

## Phase 1: Setup

- [X] T001 [P] Create project structure
 - [x] T002 Configure linting in `ruff.toml`
  - [X] T002a nested sub-task
- [X] T003 ~~Bootstrap locally~~ — no longer applicable

## Phase 2: Foundational

- [ ] T004 [US1] Add the login form in
  `src/login.tsx`, continued on this line
- [ ] T-XIAO-1 Flash the board
- [ ] T004 a repeated id

```
- [ ] T999 inside a code fence
```

## Acceptance

- [ ] PR reviewed by a second developer
"""


def _write(ws: Path, relpath: str, text: str) -> Path:
    path = ws / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_spec_kit_tasks_are_id_lines_with_space_or_x(tmp_path: Path) -> None:
    _write(tmp_path, SPEC, SPEC_TEXT)
    unit = load_one(builtin("spec-kit"), tmp_path, SPEC)
    assert [t.id for t in unit.tasks] == ["T001", "T002", "T002a", "T003", "T004", "T-XIAO-1"]
    assert [t.done for t in unit.tasks] == [True, True, True, True, False, False]
    assert unit.key == "003-login"
    assert unit.resume_point == "task-T004"
    assert unit.next == {"task": "T004", "why": unit.next["why"], "line": 20,  # type: ignore[index]
                         "phase": "Phase 2: Foundational", "parallel": False}
    assert codes(unit) == ["duplicate-task-id", "ticked-not-done"]
    assert unit.labels["progress"] == "4/6 (66%)"


def test_spec_kit_envelope_and_fresh_start_and_all_done(tmp_path: Path) -> None:
    _write(tmp_path, SPEC, "- [ ] T001 a\n- [ ] T002 b\n")
    env = direct_envelope(tmp_path, SPEC)
    assert env["resumePoint"] == "fresh-start"
    assert env["tasksPending"] == ["T001", "T002"]
    _write(tmp_path, SPEC, "- [x] T001 a\n- [X] T002 b\n")
    env = direct_envelope(tmp_path, SPEC)
    assert env["resumePoint"] == "all-done"
    assert env["tasksCompleted"] == [{"id": "T001", "commitSha": None},
                                     {"id": "T002", "commitSha": None}]
    assert load_one(builtin("spec-kit"), tmp_path, SPEC).next is None


def test_spec_kit_active_feature_from_feature_json_then_branch(tmp_path: Path) -> None:
    _write(tmp_path, SPEC, "- [ ] T001 a\n")
    _write(tmp_path, "specs/004-other/tasks.md", "- [ ] T001 a\n")
    adapter = builtin("spec-kit")
    assert "active" not in load_one(adapter, tmp_path, SPEC).labels
    subprocess.run(["git", "init", "-q", "-b", "004-other", str(tmp_path)], check=True)
    assert load_one(adapter, tmp_path, "specs/004-other/tasks.md").labels["active"] == (
        "branch 004-other")
    assert "active" not in load_one(adapter, tmp_path, SPEC).labels
    _write(tmp_path, ".specify/feature.json", '{"feature_directory": "specs/003-login"}')
    assert load_one(adapter, tmp_path, SPEC).labels["active"] == ".specify/feature.json"
    assert "active" not in load_one(adapter, tmp_path, "specs/004-other/tasks.md").labels


def test_spec_kit_active_feature_falls_back_to_the_newest_with_open_tasks(tmp_path: Path) -> None:
    adapter = builtin("spec-kit")
    _write(tmp_path, "specs/001-a/tasks.md", "- [ ] T001 a\n")
    _write(tmp_path, "specs/002-b/tasks.md", "- [ ] T001 a\n")
    _write(tmp_path, "specs/010-c/tasks.md", "- [x] T001 a\n")
    assert "active" not in load_one(adapter, tmp_path, "specs/001-a/tasks.md").labels
    assert load_one(adapter, tmp_path, "specs/002-b/tasks.md").labels["active"] == (
        "the newest feature folder with open tasks")
    assert "active" not in load_one(adapter, tmp_path, "specs/010-c/tasks.md").labels
    _write(tmp_path, "specs/010-c/tasks.md", "- [x] T001 a\n- [ ] T002 b\n")
    assert "active" not in load_one(adapter, tmp_path, "specs/002-b/tasks.md").labels
    assert "active" in load_one(adapter, tmp_path, "specs/010-c/tasks.md").labels


def test_spec_kit_paths() -> None:
    adapter = builtin("spec-kit")
    assert adapter.matches("specs/001-x/tasks.md")
    assert not adapter.matches("specs/tasks.md")
    assert not adapter.matches("specs/001-x/plan.md")
    assert not adapter.matches("docs/specs/001-x/tasks.md")
    assert adapter_for("specs/001-x/tasks.md") is adapter


KIRO_TEXT = """\
# Implementation Plan

- [x] 1. Set up project
  - [x] 1.1 Create models
    - _Requirements: 1.1_
  - [x] 1.2 Wire the store
  - [ ]* 1.3 Write property tests
- [-] 2. Checkout flow
  - [x] 2.1 Cart summary
  - [ ] 2.10 Tenth step, after 2.9
  - [-] 2.9 Payment form
    - [ ] Implement the card field
  - [ ]* 2.11 Optional e2e test
- [ ] 3. Checkpoint - Verify everything
"""


def test_kiro_subtasks_first_numerically_optional_never_next(tmp_path: Path) -> None:
    _write(tmp_path, KIRO, KIRO_TEXT)
    unit = load_one(builtin("kiro"), tmp_path, KIRO)
    assert [t.id for t in unit.tasks] == [
        "1.1", "1.2", "1.3", "1", "2.1", "2.9", "2.10", "2.11", "2", "3"]
    assert {t.id: t.status for t in unit.tasks}["1.3"] == "optional"
    assert {t.id: t.status for t in unit.tasks}["2.9"] == "in-progress"
    assert unit.resume_point == "task-2.9"
    assert unit.next is not None and unit.next["task"] == "2.9"
    assert unit.labels["optional"] == "2"
    assert codes(unit) == []


def test_kiro_resumes_the_started_task(tmp_path: Path) -> None:
    """`[-]` is Kiro's "Start task": a crash mid-task resumes there, not at an earlier
    open one; a started parent resumes at its first open sub-task."""
    adapter = builtin("kiro")
    _write(tmp_path, KIRO, "- [ ] 1. A\n- [-] 2. B\n  - [x] 2.1 C\n  - [ ] 2.2 D\n")
    assert load_one(adapter, tmp_path, KIRO).resume_point == "task-2.2"
    _write(tmp_path, KIRO, "- [ ] 1. A\n- [ ] 2. B\n  - [-] 2.1 C\n- [-] 3. E\n")
    assert load_one(adapter, tmp_path, KIRO).resume_point == "task-2.1"
    _write(tmp_path, KIRO, "- [ ] 1. A\n- [x] 2. B\n")
    assert load_one(adapter, tmp_path, KIRO).resume_point == "task-1"


def test_kiro_optional_tasks_do_not_hold_back_all_done(tmp_path: Path) -> None:
    _write(tmp_path, KIRO, "- [x] 1. A\n  - [x] 1.1 B\n  - [ ]* 1.2 C\n- [x] 2. D\n")
    unit = load_one(builtin("kiro"), tmp_path, KIRO)
    assert unit.resume_point == "all-done"
    assert unit.next is None
    assert direct_envelope(tmp_path, KIRO)["resumePoint"] == "all-done"


def test_kiro_parent_and_children_disagree(tmp_path: Path) -> None:
    _write(tmp_path, KIRO, "- [x] 1. A\n  - [ ] 1.1 B\n- [ ] 2. C\n  - [x] 2.1 D\n"
                           "- [ ] 2. again\n")
    unit = load_one(builtin("kiro"), tmp_path, KIRO)
    assert codes(unit) == ["children-done-parent-open", "duplicate-task-id",
                           "parent-done-child-open"]
    assert unit.next is not None and unit.next["task"] == "1.1"


def test_kiro_cc_sdd_column_zero_subtasks_and_unnumbered_lists(tmp_path: Path) -> None:
    _write(tmp_path, KIRO, "- [x] 1. 基盤\n- [x] 1.1 (P) モデル\n- [ ] 1.2 (P) API\n")
    unit = load_one(builtin("kiro"), tmp_path, KIRO)
    assert [t.id for t in unit.tasks] == ["1.1", "1.2", "1"]
    assert unit.resume_point == "task-1.2"
    _write(tmp_path, KIRO, "- [x] Define interfaces\n- [ ] Build the manager\n"
                           "  - [ ] a nested step\n")
    unit = load_one(builtin("kiro"), tmp_path, KIRO)
    assert [t.id for t in unit.tasks] == ["#1", "#2"]
    assert codes(unit) == ["unnumbered-tasks"]


def test_kiro_completed_and_template_folders_are_not_specs(tmp_path: Path) -> None:
    adapter = builtin("kiro")
    assert adapter.matches(".kiro/specs/checkout/tasks.md")
    assert not adapter.matches(".kiro/specs/_completed/tasks.md")
    assert not adapter.matches(".kiro/specs/.template/tasks.md")
    assert not adapter.matches(".kiro/specs/spec-template/tasks.md")
    for rel in (KIRO, ".kiro/specs/_completed/old/tasks.md", ".kiro/specs/.template/tasks.md"):
        _write(tmp_path, rel, "- [ ] 1. x\n")
    assert adapter.find(Source(str(tmp_path))) == [KIRO]


def test_checkbox_files_that_are_not_text_or_empty(tmp_path: Path) -> None:
    _write(tmp_path, KIRO, "")
    assert codes(load_one(builtin("kiro"), tmp_path, KIRO)) == ["no-tasks"]
    (tmp_path / SPEC).parent.mkdir(parents=True)
    (tmp_path / SPEC).write_bytes(b"- [ ] T001 \xff\xfe broken bytes\n" * 3)
    unit = load_one(builtin("spec-kit"), tmp_path, SPEC)
    assert [t.id for t in unit.tasks] == ["T001"]
    assert codes(unit) == ["duplicate-task-id", "duplicate-task-id"]
    assert orjson.loads(orjson.dumps(unit.next))["task"] == "T001"
