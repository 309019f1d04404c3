"""OpenSpec, Backlog.md and Codex ExecPlans on the real files (../shared/corpus/realworld4,
and realworld3's codex-execplan; read at run time, skipped when absent): every file reads
to units or a clear refusal, never a traceback, and what CONVENTIONS.md says the real
files show holds in storyd's answers."""

from __future__ import annotations

from pathlib import Path

import pytest
import realworld3
import realworld4
from corpus_checks import answers_agree, torn_and_garbled
from realworld4 import entries, lay_out, lay_out_commit, need_corpus

from storyd.core.errors import DataError, StorydError
from storyd.core.formats import adapter_for
from storyd.core.formats.base import Source
from storyd.core.model import DONE, Unit
from storyd.detectors.mentions import named_ids

CONFIG = "backlog/config.yml"


def _openspec(repo: str, commit: str, part: str, ws: Path) -> Unit:
    need_corpus()
    [entry] = [e for e in entries("openspec") if e["repo"] == repo
               and str(e["commit"]).startswith(commit) and part in str(e["path"])
               and str(e["path"]).endswith("tasks.md")]
    relpath = lay_out(entry, ws)
    [unit] = adapter_for(relpath).load(Source(str(ws)), relpath)
    return unit


def _backlog(repo: str, ws: Path) -> Unit:
    need_corpus()
    [config] = [e for e in entries("backlog-md") if e["repo"] == repo
                and str(e["path"]) == CONFIG]
    lay_out_commit(config, ws)
    [unit] = adapter_for(CONFIG).load(Source(str(ws)), CONFIG)
    return unit


@pytest.mark.slow
def test_every_openspec_file_reads(tmp_path: Path) -> None:
    need_corpus()
    files = entries("openspec")
    assert len(files) == 59, "the premise: CONVENTIONS.md's 59 files"
    read = 0
    for index, entry in enumerate(files):
        ws = tmp_path / str(index)
        relpath = lay_out(entry, ws)
        if relpath.endswith("proposal.md"):  # a companion, not a state file
            assert not adapter_for(relpath.replace("proposal.md", "tasks.md")).matches(relpath)
            continue
        [unit] = adapter_for(relpath).load(Source(str(ws)), relpath)
        done = sum(1 for t in unit.tasks if t.bucket == DONE)
        assert (done, len(unit.tasks) - done) == (entry["checked"], entry["unchecked"]), relpath
        answers_agree(ws, relpath, str(entry["file"]))
        read += 1
    assert read == 58


@pytest.mark.slow
def test_every_backlog_reads(tmp_path: Path) -> None:
    need_corpus()
    configs = [e for e in entries("backlog-md") if str(e["path"]) == CONFIG]
    assert len(configs) == 7
    for index, config in enumerate(configs):
        ws = tmp_path / str(index)
        lay_out_commit(config, ws)
        [unit] = adapter_for(CONFIG).load(Source(str(ws)), CONFIG)
        tasks = [e for e in entries("backlog-md") if e["repo"] == config["repo"]
                 and "id" in e]
        assert {t.id for t in unit.tasks} == {str(e["id"]) for e in tasks}, config["repo"]
        for task in unit.tasks:  # the manifest's status, as written
            [row] = [e for e in tasks if e["id"] == task.id]
            assert task.status == row["status"]
        answers_agree(ws, CONFIG, str(config["repo"]))


@pytest.mark.slow
def test_every_execplan_reads_or_is_refused(tmp_path: Path) -> None:
    realworld3.need_corpus()
    outcomes: dict[str, int] = {"units": 0, "refused": 0, "elsewhere": 0}
    for index, entry in enumerate(realworld3.entries("codex-execplan")):
        ws = tmp_path / str(index)
        relpath = realworld3.lay_out(entry, ws)
        try:
            adapter = adapter_for(relpath)
        except StorydError:  # apps/<app>/docs/execution/, docs/generated/: not plan folders
            outcomes["elsewhere"] += 1
            continue
        try:
            [unit] = adapter.load(Source(str(ws)), relpath)
        except DataError as exc:  # timekeeper's local EP- template: no Progress section
            assert "not an ExecPlan" in exc.message and "timekeeper" in str(entry["repo"])
            outcomes["refused"] += 1
            continue
        assert unit.tasks, relpath
        answers_agree(ws, relpath, str(entry["file"]))
        outcomes["units"] += 1
    assert outcomes == {"units": 14, "refused": 1, "elsewhere": 2}


class TestTwoLedgers:
    """OpenSpec's archive against tasks.md, on the real changes."""

    def test_archived_with_open_tasks(self, tmp_path: Path) -> None:
        unit = _openspec("Daoming-Chen/Kinex", "048cdbee", "archive", tmp_path)
        assert unit.labels["progress"] == "0/212 (0%)" and unit.resume_point == "all-done"
        [found] = [f for f in unit.findings if f.code == "archived-with-open-tasks"]
        assert "212 of 212 tasks open" in found.message and "trusts the archive" in found.message

    def test_done_but_not_archived(self, tmp_path: Path) -> None:
        unit = _openspec("Codagent-AI/agent-validator", "33f88fa0", "add-auto-fix-pr", tmp_path)
        assert [f.code for f in unit.findings] == ["done-not-archived"]
        other = _openspec("Codagent-AI/agent-validator", "0406cbdf", "add-auto-fix-pr",
                          tmp_path / "b")  # the merge: 55/62, in flight at its 56th box
        assert other.resume_point == "task-#46" and other.labels["progress"] == "55/62 (88%)"

    def test_an_undated_archive_and_a_year_named_active_change(self, tmp_path: Path) -> None:
        unit = _openspec("AuroraWebSoftware/FlexyField", "2e00666b", "archive", tmp_path)
        assert unit.labels["archived"] == "undated" and unit.key == "add-ui-hints-support"
        unit = _openspec("129s/NeoSHUSchedulingHelper", "a4b75d0e", "dockview", tmp_path / "b")
        assert "archived" not in unit.labels and unit.resume_point == "fresh-start"


class TestBacklogs:
    """What CONVENTIONS.md says of the real backlogs."""

    def test_done_with_no_criteria_checked(self, tmp_path: Path) -> None:
        unit = _backlog("Callumk7/game_master_core", tmp_path)
        [found] = [f for f in unit.findings if f.task == "task-035"]
        assert found.code == "done-with-open-criteria" and "13 of 13" in found.message

    def test_a_config_extended_after_done(self, tmp_path: Path) -> None:
        unit = _backlog("ANUcybernetics/panic", tmp_path)
        assert unit.labels["terminal"] == "Thought Bubbles"
        assert "terminal-status" in [f.code for f in unit.findings]

    def test_statuses_outside_the_config(self, tmp_path: Path) -> None:
        unit = _backlog("CRJFisher/ariadne", tmp_path)
        unknown = sorted(t.status for t in unit.tasks if not t.known)
        assert "In-Progress" in unknown

    def test_the_ready_view(self, tmp_path: Path) -> None:
        unit = _backlog("8agana/surreal-mind", tmp_path)
        assert unit.next is not None and unit.next["task"] == "task-12"  # high, ready
        # task-16 waits on task-25 (Done in the repository, not saved in the corpus) and
        # task-17 (Done, saved): only the unsaved one keeps it from the ready view
        assert {"id": "task-16", "waitingFor": ["task-25"]} in unit.next["blocked"]

    def test_the_producers_own_readme_is_a_note(self, tmp_path: Path) -> None:
        unit = _backlog("MrLesk/Backlog.md", tmp_path)
        assert "not-a-task-file" in [f.code for f in unit.findings]


def test_real_commit_subjects_name_backlog_ids(tmp_path: Path) -> None:
    """`BACK-569 - ...`, `docs(task-10): ...`, `cancel NAS-18, progress NAS-19`."""
    need_corpus()
    assert named_ids("backlog-md", "BACK-569 - Run launcher fixtures", {"back-569"}) == {
        "back-569"}
    assert named_ids("backlog-md", "docs(task-10): notes", {"TASK-010"}) == {"TASK-010"}
    named = named_ids("backlog-md", "Update backlog: cancel NAS-18, progress NAS-19",
                      {"NAS-18", "NAS-19", "NAS-1"})
    assert named == {"NAS-18", "NAS-19"}
    [config] = [e for e in entries("backlog-md") if e["repo"] == "DanielRamosAcosta/nas"
                and str(e["path"]) == CONFIG]
    subjects = [f"{s}\n{b}" for _, s, b in realworld4.gitlog(config)]
    ids = {f"NAS-{n}" for n in range(1, 40)}
    assert set().union(*(named_ids("backlog-md", m, ids) for m in subjects))


@pytest.mark.slow
def test_torn_and_garbled_real_files_never_give_a_traceback(tmp_path: Path) -> None:
    """Each format's real files cut at five places and with bytes garbled: units or a
    clear DataError, never another exception."""
    need_corpus()
    picks = [(realworld4, e) for e in entries("openspec")[:12]
             if str(e["path"]).endswith("tasks.md")]
    picks += [(realworld4, e) for e in entries("backlog-md") if "id" in e][:12]
    picks += [(realworld3, e) for e in realworld3.entries("codex-execplan")
              if str(e["path"]).startswith(".agent/")]
    outcomes = {"units": 0, "refused": 0}
    for index, (corpus, entry) in enumerate(picks):
        ws = tmp_path / str(index)
        relpath = corpus.lay_out(entry, ws)
        if relpath.startswith("backlog/"):
            (ws / CONFIG).write_text("statuses: [To Do, In Progress, Done]\n")
        state = CONFIG if relpath.startswith("backlog/") else relpath
        for kind, count in torn_and_garbled(ws, relpath, state, b"[").items():
            outcomes[kind] += count
    assert outcomes["units"] > 0
