"""The Codex ExecPlan format on fixtures written here: the Progress section's steps, their
timestamps, partial steps, the next step, finished folders, and what is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from format_harness import codes, load_one

from storyd.core.errors import DataError
from storyd.core.formats import builtin
from storyd.core.formats.execplan import stamp
from storyd.core.nextstep import next_of

PLAN = ".agent/plans/001-bootstrap.md"
TEXT = """\
# Bootstrap

## Purpose / Big Picture

- [x] a checklist outside Progress

## Progress

- [x] (2025-10-01 13:00Z) Example completed step.
- [x] (2026-01-27 10:44-08:00) With an offset.
- [x] No timestamp.
- [ ] (2026-02-07) Milestone 1 (completed: repo; remaining: deploy).
- [ ] (TBD) Milestone 2.

```md
- [ ] inside a fence: not a step
```

## Surprises & Discoveries

## Decision Log

## Outcomes & Retrospective
"""


def _write(ws: Path, relpath: str, text: str) -> None:
    path = ws / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


class TestProgress:
    """Only the Progress section's boxes are steps."""

    def test_steps_stamps_and_partial(self, tmp_path: Path) -> None:
        _write(tmp_path, PLAN, TEXT)
        unit = load_one(builtin("execplan"), tmp_path, PLAN)
        assert [(t.id, t.status, t.completed_at) for t in unit.tasks] == [
            ("#1", "done", "2025-10-01T13:00Z"), ("#2", "done", "2026-01-27T10:44-08:00"),
            ("#3", "done", None), ("#4", "partial", None), ("#5", "open", None)]
        assert codes(unit) == ["checklist-outside-progress", "unstamped-step"]
        assert unit.resume_point == "task-#4"
        nxt = next_of(unit)
        assert nxt is not None and nxt["status"] == "partial" and nxt["line"] == 12

    def test_fresh_start_all_done_and_living_sections(self, tmp_path: Path) -> None:
        _write(tmp_path, PLAN, "# P\n## Progress\n- [ ] (TBD) a\n- [ ] b\n")
        unit = load_one(builtin("execplan"), tmp_path, PLAN)
        assert unit.resume_point == "fresh-start" and next_of(unit)["task"] == "#1"  # type: ignore[index]
        assert codes(unit) == ["missing-living-section"]
        _write(tmp_path, PLAN, "# P\n## Progress\n- [x] (2026-02-07) a\n")
        assert load_one(builtin("execplan"), tmp_path, PLAN).resume_point == "all-done"

    def test_a_finished_folder_is_not_in_flight(self, tmp_path: Path) -> None:
        relpath = "docs/exec-plans/done/plan.md"
        _write(tmp_path, relpath, "# P\n## Progress\n- [x] (2026-02-07) a\n- [ ] b\n")
        unit = load_one(builtin("execplan"), tmp_path, relpath)
        assert unit.resume_point == "all-done" and next_of(unit) is None
        assert "archived-with-open-tasks" in codes(unit)

    def test_the_guide_is_labelled(self, tmp_path: Path) -> None:
        _write(tmp_path, ".agent/PLANS.md", "# ExecPlans\n")
        _write(tmp_path, PLAN, TEXT)
        assert load_one(builtin("execplan"), tmp_path, PLAN).labels["guide"] == ".agent/PLANS.md"

    def test_a_plan_without_progress_is_refused(self, tmp_path: Path) -> None:
        _write(tmp_path, "docs/plans/design.md", "# Design\n\n- [ ] Step 1\n")
        with pytest.raises(DataError, match="not an ExecPlan: it has no `## Progress`"):
            load_one(builtin("execplan"), tmp_path, "docs/plans/design.md")

    @pytest.mark.parametrize(("relpath", "ok"), [
        (".agent/plans/a.md", True), (".agent/execplans/a.md", True), ("plans/a.md", True),
        ("docs/plans/a.md", True), ("docs/exec-plans/active/a.md", True),
        ("docs/exec-plans/a.md", True), (".agent/PLANS.md", False), ("PLANS.md", False),
        ("plans/README.md", False), ("plans/a.txt", False), ("plans/epic-1/a.md", False),
        ("docs/exec-plans/_tpl/a.md", False)])  # fmt: skip
    def test_which_paths_are_plans(self, relpath: str, ok: bool) -> None:
        assert builtin("execplan").matches(relpath) is ok

    @pytest.mark.parametrize(("text", "when"), [
        ("(2025-12-30 23:25Z) x", "2025-12-30T23:25Z"), ("(2026-02-07) x", "2026-02-07"),
        ("(TBD) x", None), ("(pending) x", None), ("no stamp", None), ("(see #3) x", None)])
    def test_stamps(self, text: str, when: str | None) -> None:
        assert stamp(text)[0] == when
