"""The GSD (get-shit-done) format on fixtures written here: STATE.md's position, phases
and plans (a plan is done by its SUMMARY.md), resume-project's order for the next task,
archived milestones, the two ledgers (STATE.md and ROADMAP.md), lookalikes refused, and
commits that name a phase or a plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_harness import Run
from format_harness import codes, direct_envelope, load_one
from git_harness import GitRepo

from storyd.core.errors import DataError
from storyd.core.formats import builtin
from storyd.core.formats.base import Source
from storyd.core.formats.gsd import normal_state_status, phase_number, plan_id, position
from storyd.core.nextstep import next_of

STATE = ".planning/STATE.md"
ROADMAP = ".planning/ROADMAP.md"
FRONT = """\
---
gsd_state_version: 1.0
milestone: v1.0
status: executing
stopped_at: Completed 02-01-PLAN.md
progress:
  total_phases: 3
  completed_phases: 1
  total_plans: 4
  completed_plans: {done}
---
"""
BODY = """\
# Project State

## Current Position

Phase: {phase} of 3 (Core)
Plan: 1 of 2 in current phase
Status: {status}
Last activity: 2026-03-28 — did things

## Session Continuity

Last session: 2026-03-28
Stopped at: Completed 02-01-PLAN.md
Resume file: `None`
"""
ROADMAP_TEXT = """\
# Roadmap

<details>
<summary>v0.9 (shipped)</summary>

- [x] **Phase 0.5: Spike** - done long ago
</details>

## Phases

- [x] **Phase 1: Foundation** - base
- [{two}] **Phase 2: Core** - core
- [ ] **Phase 3: Polish** - polish
"""


def _write(ws: Path, files: dict[str, str]) -> None:
    for relpath, text in files.items():
        path = ws / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _project(ws: Path, *, phase: str = "2", status: str = "In progress", two: str = " ",
             done: int = 3, plans: dict[str, bool] | None = None) -> None:
    files = {STATE: FRONT.format(done=done) + BODY.format(phase=phase, status=status),
             ROADMAP: ROADMAP_TEXT.format(two=two)}
    for plan, summary in (plans or {}).items():
        folder = f".planning/phases/{plan[:2]}-slug"
        files[f"{folder}/{plan}-PLAN.md"] = "---\nphase: x\n---\n<tasks></tasks>\n"
        if summary:
            files[f"{folder}/{plan}-SUMMARY.md"] = "# done\n"
    _write(ws, files)


class TestPhasesAndPlans:
    """Phases from ROADMAP.md, each followed by its plans; SUMMARY.md is done."""

    def test_tasks_and_labels(self, tmp_path: Path) -> None:
        _project(tmp_path, plans={"01-01": True, "02-01": True, "02-02": False})
        unit = load_one(builtin("gsd"), tmp_path, STATE)
        assert [(t.id, t.status) for t in unit.tasks] == [
            ("phase-0.5", "archived"), ("1-01", "complete"), ("phase-1", "complete"),
            ("2-01", "complete"), ("2-02", "planned"), ("phase-2", "current"),
            ("phase-3", "pending")]
        assert unit.labels["phase"] == "2" and unit.labels["status"] == "executing"
        assert unit.labels["archivedPhases"] == "1" and unit.labels["plans"] == "2/3"
        assert unit.labels["resumeFile"] == "None"
        assert codes(unit) == []

    def test_next_is_the_plan_without_a_summary(self, tmp_path: Path) -> None:
        _project(tmp_path, plans={"02-01": True, "02-02": False})
        unit = load_one(builtin("gsd"), tmp_path, STATE)
        got = next_of(unit)
        assert got is not None and got["task"] == "2-02" and "SUMMARY" in str(got["why"])
        assert unit.resume_point == "task-2-02"

    def test_a_handoff_comes_first_and_goes_stale(self, tmp_path: Path) -> None:
        _project(tmp_path, plans={"02-01": True, "02-02": False})
        handoff = {"status": "paused", "phase": "02-core", "plan": "02-01",
                   "next_action": "rerun the tests"}
        _write(tmp_path, {".planning/HANDOFF.json": json.dumps(handoff)})
        got = next_of(load_one(builtin("gsd"), tmp_path, STATE))
        assert got is not None and got["task"] == "2-01" and "HANDOFF" in str(got["why"])
        assert got["nextAction"] == "rerun the tests"
        _write(tmp_path, {".planning/HANDOFF.json": "{not json"})
        unit = load_one(builtin("gsd"), tmp_path, STATE)
        assert "handoff-unreadable" in codes(unit) and next_of(unit)["task"] == "2-02"  # type: ignore[index]

    def test_current_phase_without_plans_is_discussed_or_planned(self, tmp_path: Path) -> None:
        _project(tmp_path, phase="3", status="Ready to plan", two="x",
                 plans={"02-01": True})
        got = next_of(load_one(builtin("gsd"), tmp_path, STATE))
        assert got is not None and got["task"] == "phase-3" and "discuss" in str(got["why"])
        _write(tmp_path, {".planning/phases/03-polish/03-CONTEXT.md": "# ctx\n"})
        got = next_of(load_one(builtin("gsd"), tmp_path, STATE))
        assert got is not None and "/gsd-plan-phase 3" in str(got["why"])

    def test_without_a_roadmap_states_position_gives_the_phases(self, tmp_path: Path) -> None:
        _write(tmp_path, {STATE: BODY.format(phase="2", status="Ready to plan")})
        unit = load_one(builtin("gsd"), tmp_path, STATE)
        assert [(t.id, t.done) for t in unit.tasks] == [
            ("phase-1", True), ("phase-2", False), ("phase-3", False)]
        assert unit.labels["roadmap"] == "absent" and unit.resume_point == "task-phase-2"

    def test_fresh_start_and_between_milestones(self, tmp_path: Path) -> None:
        _write(tmp_path, {STATE: BODY.format(phase="1", status="Ready to plan"),
                          ROADMAP: "- [ ] **Phase 1: A**\n- [ ] **Phase 2: B**\n"})
        assert direct_envelope(tmp_path, STATE)["resumePoint"] == "fresh-start"
        _write(tmp_path, {STATE: "## Current Position\n\nPhase: —\nStatus: Complete\n"})
        (tmp_path / ROADMAP).unlink()
        assert load_one(builtin("gsd"), tmp_path, STATE).resume_point == "all-done"

    def test_a_table_position(self) -> None:
        body = ("## Current Position\n\n| Attribute | Value |\n|---|---|\n"
                "| **Current Phase** | None (roadmap created) |\n| **Status** | Ready to plan |\n")
        assert position(body) == {"Phase": "None (roadmap created)", "Status": "Ready to plan"}

    @pytest.mark.parametrize(("text", "word"), [
        ("Paused at 1/5", "paused"), ("Ready to execute", "executing"),
        ("Ready to plan", "planning"), ("Ready for Verification", "verifying"),
        ("Phase complete", "completed"), ("", "unknown"), ("Between milestones",
                                                           "Between milestones")])
    def test_status_normalized_as_gsd_does(self, text: str, word: str) -> None:
        assert normal_state_status(text) == word

    def test_ids(self) -> None:
        assert phase_number("08 (verification-cleanup) — EXECUTING") == "8"
        assert phase_number("41.1 (ui)") == "41.1" and phase_number("—") is None
        assert plan_id("08-03") == "8-03" and plan_id("41.1-04") == "41.1-04"


class TestTwoLedgers:
    """STATE.md against ROADMAP.md on the current phase: a finding naming both."""

    def test_roadmap_ticks_the_current_phase(self, tmp_path: Path) -> None:
        _project(tmp_path, two="x", status="Ready for Verification")
        unit = load_one(builtin("gsd"), tmp_path, STATE)
        [found] = [f for f in unit.findings if f.code == "state-roadmap-disagree"]
        assert "phase 2 is current" in found.message and "ticks phase 2 done" in found.message
        assert "storyd takes STATE.md's position" in found.message
        assert found.task == "phase-2" and found.evidence == {
            "state": "Ready for Verification", "roadmap": "ticked", "phase": "2"}

    def test_state_says_complete_roadmap_does_not(self, tmp_path: Path) -> None:
        _project(tmp_path, status="Phase complete")
        [found] = [f for f in load_one(builtin("gsd"), tmp_path, STATE).findings
                   if f.code == "state-roadmap-disagree"]
        assert "phase 2 is complete" in found.message and "leaves phase 2 unticked" in (
            found.message)

    def test_agreeing_ledgers_say_nothing(self, tmp_path: Path) -> None:
        _project(tmp_path)
        assert codes(load_one(builtin("gsd"), tmp_path, STATE)) == []

    def test_counters_that_contradict_themselves(self, tmp_path: Path) -> None:
        _project(tmp_path, done=26)
        assert codes(load_one(builtin("gsd"), tmp_path, STATE)) == ["progress-counters"]


class TestRefused:
    """A lookalike STATE.md is refused; front matter outside YAML is a finding."""

    def test_a_lookalike(self, tmp_path: Path) -> None:
        _write(tmp_path, {STATE: "# State of the union\n\nAll good.\n"})
        with pytest.raises(DataError) as got:
            builtin("gsd").load(Source(str(tmp_path)), STATE)
        assert STATE in got.value.message and "not a GSD STATE.md" in got.value.message

    def test_front_matter_that_is_not_yaml(self, tmp_path: Path) -> None:
        text = ("---\ngsd_state_version: 1.0\nlast_activity: 2026-04-11 - quick task: fix\n"
                "---\n" + BODY.format(phase="1", status="Ready to plan"))
        _write(tmp_path, {STATE: text})
        unit = load_one(builtin("gsd"), tmp_path, STATE)
        assert codes(unit) == ["front-matter-unreadable"] and unit.labels["phase"] == "1"

    def test_paths(self) -> None:
        adapter = builtin("gsd")
        assert adapter.matches(STATE) and not adapter.matches("docs/.planning/STATE.md")
        assert adapter.owner(".planning/phases/01-a/01-01-SUMMARY.md") == STATE
        assert adapter.owner(".planning/HANDOFF.json") == STATE
        assert adapter.owner("planning/STATE.md") is None


@pytest.mark.slow
def test_commits_naming_an_open_plan_or_phase(tmp_path: Path, run_storyd: Run) -> None:
    """task-named: `docs(02-02): complete plan` with no 02-02-SUMMARY.md is a claim;
    `phase 3` a mention; the done plan 02-01 never a finding."""
    repo = GitRepo(tmp_path / "ws").init()
    _project(repo.path, plans={"02-01": True, "02-02": False})
    repo.commit("docs: planning", {})
    claim = repo.commit("docs(02-02): complete plan 02-02", {"src/a.py": "a\n"})
    repo.commit("notes on phase 3 scope", {"src/b.py": "b\n"})
    repo.commit("feat(02-01): the first plan", {"src/c.py": "c\n"})
    done = run_storyd("resume", "--state-file", STATE, "--detail", "--direct", cwd=repo.path)
    assert done.returncode == 0, done.stderr
    found = sorted((f["code"], f["task"]) for f in json.loads(done.stdout)["findings"]
                   if f["detector"] == "task-named")
    assert found == [("claimed-in-commit", "2-02"), ("named-in-commit", "phase-3")]
    assert claim in done.stdout.decode()
