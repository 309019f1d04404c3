"""task-named: commits naming open tasks of spec-kit, Kiro, Task Master and beads, in each
producer's way; a claim is a warning, a mention a note; on real commit subjects from the
corpus's `_gitlog/` and through `storyd resume --detail` in a real repository."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_harness import Run
from git_harness import GitRepo
from realworld3 import entries, gitlog, need_corpus

from storyd.detectors.mentions import claims_done, named_ids

SPEC_IDS = {f"T{n:03d}" for n in range(1, 40)} | {"T018a"}


def test_spec_kit_ranges_en_dash_lists_and_slashes() -> None:
    found = named_ids("spec-kit", "feat(015): container isolation (T001-T004)", SPEC_IDS)
    assert found == {"T001", "T002", "T003", "T004"}
    found = named_ids("spec-kit", "feat: (T015\u2013T018, T030, T035\u2013T036)", SPEC_IDS)
    assert found == {"T015", "T016", "T017", "T018", "T018a", "T030", "T035", "T036"}
    assert named_ids("spec-kit", "[#264] Mark tasks T007/T008 complete", SPEC_IDS) == {
        "T007", "T008"}
    assert named_ids("spec-kit", "bump ST001 and T0099x", SPEC_IDS) == set()


def test_numbered_tasks_of_task_master_and_kiro() -> None:
    known = {"1", "7", "7.4", "7.5", "13.1", "13.2", "13.3", "17.4", "12", "19"}
    assert named_ids("task-master", "feat: audio ducking (Task 17.4)", known) == {"17.4"}
    assert named_ids("task-master", "wip (tasks 13.2, 13.3)", known) == {"13.2", "13.3"}
    assert named_ids("task-master", "feat: x\n\nTask: 12\nPhase: GREEN", known) == {"12"}
    assert named_ids("kiro", "mark task 19 as complete", known) == {"19"}
    assert named_ids("kiro", "multitask 7 things", known) == set()


def test_beads_ids_as_words() -> None:
    known = {"bd-abc", "agent-island-39w.1", "frankenredis-tjf1", "bd-ab"}
    assert named_ids("beads", "Fix auth validation bug (bd-abc)", known) == {"bd-abc"}
    assert named_ids("beads", "chore(bd): close agent-island-39w.1.", known) == {
        "agent-island-39w.1"}
    assert named_ids("beads", "frankenredis-tjf1: fix expiry", known) == {"frankenredis-tjf1"}
    assert named_ids("beads", "bd sync: 2026-01-28", known) == set()


def test_claims_and_mentions() -> None:
    assert claims_done("feat(015): container isolation (T001-T021)")
    assert claims_done("mark task 19 as complete")
    assert claims_done("closing MCP-iu3, MCP-uxk")
    assert not claims_done("T017 passes in a real browser - T018 does not fire")
    assert not claims_done("defer task 7.5")
    assert not claims_done("Part implementation of task 3.")
    assert not claims_done("Revert \"feat: x (Task 3)\"")


def test_the_corpus_commits_naming_ranges(tmp_path: Path) -> None:
    """autoc 023 ticked nothing while its commits say T004-T021 were done."""
    need_corpus()
    [entry] = [e for e in entries("spec-kit") if e["repo"] == "gcmcnutt/autoc"
               and str(e["commit"]).startswith("d2431cb3")]
    ids = {f"T{n:03d}" for n in range(1, 120)}
    named: set[str] = set()
    for _sha, subject, body in gitlog(entry):
        message = f"{subject}\n{body}"
        if claims_done(message):
            named |= named_ids("spec-kit", message, ids)
    assert {f"T{n:03d}" for n in range(4, 22)} <= named


@pytest.mark.slow
def test_resume_detail_in_a_real_repository(tmp_path: Path, run_storyd: Run) -> None:
    repo = GitRepo(tmp_path / "ws").init()
    tasks = "- [X] T001 Setup\n- [ ] T002 Form\n- [ ] T003 API\n- [ ] T004 Docs\n"
    repo.commit("docs: tasks", {"specs/001-login/tasks.md": tasks})
    first = repo.commit("feat(001): login form and API (T002-T003)", {"src/a.py": "a\n"})
    repo.commit("T004 does not render yet", {"src/b.py": "b\n"})
    done = run_storyd("resume", "--state-file", "specs/001-login/tasks.md", "--detail",
                      "--direct", cwd=repo.path)
    assert done.returncode == 0, done.stderr
    found = [f for f in json.loads(done.stdout)["findings"] if f["detector"] == "task-named"]
    # one commit claiming T002 and T003 is one cause: one line (storyd.core.causes)
    assert [(f["code"], f["task"], f["severity"]) for f in found] == [
        ("claimed-in-commit", None, "warning"), ("named-in-commit", "T004", "info")]
    assert found[0]["evidence"] == {"commit": first, "tip": "main", "count": "2",
                                    "tasks": "T002,T003"}


@pytest.mark.slow
def test_one_finding_per_fact_for_sha_less_formats(tmp_path: Path, run_storyd: Run) -> None:
    """beads: task-named reports the commit, unrecorded-commit does not repeat it; its
    file is sorted by id, so task-order says nothing of a closed issue after an open one.
    Kiro: an optional task left open is never the task others are out of order after."""
    repo = GitRepo(tmp_path / "ws").init()
    issues = '{"id":"proj-abc123","status":"open"}\n{"id":"proj-zz9","status":"closed"}\n'
    kiro = "- [x] 1. A\n  - [x] 1.1 B\n  - [ ]* 1.2 C\n- [ ] 2. D\n"
    repo.commit("init", {".beads/issues.jsonl": issues, ".kiro/specs/x/tasks.md": kiro})
    repo.commit("Fix auth bug (proj-abc123)", {"src/a.py": "a\n"})
    done = run_storyd("resume", "--state-file", ".beads/issues.jsonl", "--detail", "--direct",
                      cwd=repo.path)
    assert done.returncode == 0, done.stderr
    found = [(f["detector"], f["code"]) for f in json.loads(done.stdout)["findings"]]
    assert found == [("task-named", "claimed-in-commit")]
    done = run_storyd("resume", "--state-file", ".kiro/specs/x/tasks.md", "--detail", "--direct",
                      cwd=repo.path)
    assert json.loads(done.stdout)["findings"] == []
    repo.write(".kiro/specs/x/tasks.md", "- [ ] 1. A\n  - [ ] 1.1 B\n- [x] 2. D\n")
    done = run_storyd("resume", "--state-file", ".kiro/specs/x/tasks.md", "--detail", "--direct",
                      cwd=repo.path)
    found = [(f["detector"], f["code"]) for f in json.loads(done.stdout)["findings"]]
    assert found == [("task-order", "out-of-order")]  # required tasks still are checked
