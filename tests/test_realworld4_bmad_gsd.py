"""BMAD-METHOD and GSD on the real files (../shared/corpus/realworld4, read at run time,
skipped when absent): every file reads to a unit or a clear refusal, never a traceback,
and what CONVENTIONS.md sections 2 and 3 say the real files show holds in storyd's
answers: the two ledgers, the producers' own words, the commits that name their ids."""

from __future__ import annotations

from pathlib import Path

import pytest
import realworld4
from corpus_checks import answers_agree, torn_and_garbled
from realworld4 import entries, lay_out, lay_out_commit, need_corpus

from storyd.core.errors import DataError
from storyd.core.formats import adapter_for, builtin
from storyd.core.formats.base import Source
from storyd.core.formats.bmad import story_status
from storyd.core.model import Unit
from storyd.detectors.mentions import named_ids

STATE = ".planning/STATE.md"


def _unit(convention: str, repo: str, commit: str, ws: Path, part: str = "") -> Unit:
    """The unit of a saved state file, with every file of its repository and commit."""
    need_corpus()
    suffix = "sprint-status.yaml" if convention == "bmad" else "STATE.md"
    [entry] = [e for e in entries(convention) if e["repo"] == repo
               and str(e["commit"]).startswith(commit) and str(e["path"]).endswith(suffix)
               and part in str(e["path"])]
    lay_out_commit(entry, ws)
    relpath = str(entry["path"])
    [unit] = adapter_for(relpath).load(Source(str(ws)), relpath)
    return unit


@pytest.mark.slow
@pytest.mark.parametrize(("convention", "suffix", "count"), [
    ("bmad", "sprint-status.yaml", 25), ("gsd", STATE, 31)])
def test_every_state_file_reads(tmp_path: Path, convention: str, suffix: str,
                                count: int) -> None:
    """Each saved state file with its commit's companions: a unit, an answer."""
    need_corpus()
    states = [e for e in entries(convention) if str(e["path"]).endswith(suffix)]
    assert len(states) == count, "the premise: the corpus files (45 bmad, 63 gsd)"
    for index, entry in enumerate(states):
        ws = tmp_path / str(index)
        lay_out_commit(entry, ws)
        relpath = str(entry["path"])
        [unit] = adapter_for(relpath).load(Source(str(ws)), relpath)
        label = str(entry["file"])
        assert unit.format == convention, label
        if convention == "bmad":
            counts: dict[str, int] = {}
            for task in unit.tasks:
                counts[task.status.lower()] = counts.get(task.status.lower(), 0) + 1
            assert counts == entry["status_counts"], label
        answers_agree(ws, relpath, label)


def test_every_story_file_has_the_status_the_manifest_read(tmp_path: Path) -> None:
    need_corpus()
    stories = [e for e in entries("bmad") if str(e["path"]).endswith(".md")]
    assert len(stories) == 20  # CONVENTIONS.md says 24 + 21; the files are 25 + 20
    for entry in stories:
        text = (realworld4.CORPUS / str(entry["file"])).read_text(encoding="utf-8")
        got = story_status(text)
        assert got is not None and got[0] == str(entry["status"]).strip().lower().split()[0], (
            entry["file"])


def test_every_companion_alone_is_no_state_file(tmp_path: Path) -> None:
    """ROADMAP.md, PLAN.md, HANDOFF.json and story files are companions: they map to
    their state file, and none is taken for one."""
    need_corpus()
    for entry in [*entries("bmad"), *entries("gsd")]:
        relpath = str(entry["path"])
        if relpath.endswith(("sprint-status.yaml", "STATE.md")):
            continue
        name = str(entry["convention"])
        assert not builtin(name).matches(relpath), relpath
        assert builtin(name).owner(relpath) is not None, relpath


class TestBmadLedgers:
    """CONVENTIONS.md: story file and sprint-status disagree at the same commit."""

    @pytest.mark.parametrize(("repo", "commit", "story", "severity", "words"), [
        ("AdamMomen/etch", "a1aac4ae", "3-12-source-picker-thumbnail-previews", "warning",
         "'done' in docs/sprint-artifacts/sprint-status.yaml but 'drafted'"),
        ("1987-Dmytro/Mail-Agent", "481b7f32", "4-8-end-to-end-onboarding-testing-and-polish",
         "warning", "'in-progress' in docs/sprint-status.yaml but 'review'"),
        ("DrJLabs/codex-completions-api", "131cd6f8", "1-1-add-app-server-feature-flag-scaffold",
         "info", "one stage under two words"),
    ])
    def test_the_three_disagreements(self, tmp_path: Path, repo: str, commit: str, story: str,
                                     severity: str, words: str) -> None:
        unit = _unit("bmad", repo, commit, tmp_path)
        [found] = [f for f in unit.findings if f.code == "status-disagrees"]
        assert found.task == story and found.severity == severity and words in found.message

    def test_project_invented_statuses_and_keys(self, tmp_path: Path) -> None:
        klip = _unit("bmad", "LINSUISHENG034/KlipNote", "a3d28816", tmp_path / "k")
        odd = sorted({f.message.split("'")[1] for f in klip.findings
                      if f.code == "unknown-status"})
        assert odd == ["cancelled", "moved-to-epic-4", "todo"]
        assert klip.resume_point == "blocked"
        etch = _unit("bmad", "AdamMomen/etch", "d864025c", tmp_path / "e")
        [key] = [f for f in etch.findings if f.code == "unrecognized-key"]
        assert "spike-wgpu-overlay-architecture: done" in key.message

    def test_all_done_and_several_epics_in_progress(self, tmp_path: Path) -> None:
        todo = _unit("bmad", "AlessioScarfone/bmad-todo-app", "811dc899", tmp_path / "t")
        assert todo.resume_point == "all-done" and todo.labels["progress"] == "18/18 (100%)"
        discord = _unit("bmad", "AidenWoodside/discord_clone", "e526117d", tmp_path / "d")
        assert discord.labels["epics"].count("in-progress") == 4


class TestGsdLedgers:
    """CONVENTIONS.md: STATE.md against ROADMAP.md, counters, front matter."""

    def test_state_on_a_phase_roadmap_ticks(self, tmp_path: Path) -> None:
        unit = _unit("gsd", "BectorVoom/cintx", "f2294c2d", tmp_path)
        [found] = [f for f in unit.findings if f.code == "state-roadmap-disagree"]
        assert "phase 3 is current (Ready for Verification)" in found.message
        assert "ticks phase 3 done" in found.message

    def test_counters_past_their_totals(self, tmp_path: Path) -> None:
        for commit in ("16bcce9a", "c8d32136"):
            unit = _unit("gsd", "0xmaxbu/video-script", commit, tmp_path / commit)
            assert "progress-counters" in [f.code for f in unit.findings], commit

    def test_front_matter_that_is_not_yaml(self, tmp_path: Path) -> None:
        unit = _unit("gsd", "arlegotin/agent-badge", "a2e9c0d4", tmp_path)
        assert "front-matter-unreadable" in [f.code for f in unit.findings]

    def test_a_handoff_is_followed_first(self, tmp_path: Path) -> None:
        unit = _unit("gsd", "0xmaxbu/video-script", "c8d32136", tmp_path)
        assert unit.next is not None and "HANDOFF.json" in str(unit.next["why"])
        assert unit.next["plan"] == "GAP-01" and unit.next["task"] == "phase-14"

    def test_a_table_position_and_archived_milestones(self, tmp_path: Path) -> None:
        eidiya = _unit("gsd", "ashrid/eidiya", "0411e51b", tmp_path / "e")
        assert eidiya.resume_point == "fresh-start" and eidiya.labels["phases"] == "0/5"
        beth = _unit("gsd", "Beth-Allan/cross-stitch-tracker", "db54c861", tmp_path / "b")
        assert beth.labels["archivedPhases"] == "7" and beth.next is not None
        assert beth.next["task"] == "phase-9"


@pytest.mark.slow
@pytest.mark.parametrize("convention", ["bmad", "gsd"])
def test_real_commit_messages_name_the_ids(convention: str) -> None:
    """Every repository's git log names ids the way CONVENTIONS.md counts them."""
    need_corpus()
    known = ({f"{e}-{s}-x" for e in range(1, 40) for s in range(1, 20)} if convention == "bmad"
             else {f"phase-{n}" for n in range(1, 200)} | {
                 f"{p}-{n:02d}" for p in range(1, 200) for n in range(0, 20)})
    repos: dict[str, dict[str, object]] = {}
    for entry in entries(convention):
        repos.setdefault(str(entry["repo"]), entry)
    for repo, entry in repos.items():
        rows = realworld4.gitlog(entry)
        named = sum(1 for _, s, b in rows if named_ids(convention, f"{s}\n{b}", known))
        wanted = int(str(entry["gitlog_commits_naming_task_ids"]))
        if wanted and repo != "Alberto-Codes/docvet":  # docvet names PR numbers only
            assert named > 0, (repo, named, wanted)
        assert named <= len(rows)


@pytest.mark.slow
def test_torn_and_garbled_real_files_never_give_a_traceback(tmp_path: Path) -> None:
    """Each state file and companion cut at five places and garbled: units or a clear
    DataError naming the state file, never another exception."""
    need_corpus()
    outcomes = {"units": 0, "refused": 0}
    picks = [*entries("bmad"), *entries("gsd")][::2]
    for index, entry in enumerate(picks):
        ws = tmp_path / str(index)
        relpath = lay_out(entry, ws)
        state = next(p for p in lay_out_commit(entry, ws)
                     if p.endswith(("sprint-status.yaml", "STATE.md")))
        for kind, count in torn_and_garbled(ws, relpath, state, b":").items():
            outcomes[kind] += count
    assert outcomes["units"] > 0 and outcomes["refused"] > 0


def test_other_conventions_real_files_are_refused_as_lookalikes(tmp_path: Path) -> None:
    """A real OpenSpec tasks.md or Backlog.md task file at STATE.md's path, and a real
    Backlog.md config.yml at sprint-status.yaml's: one-line refusals naming the file."""
    need_corpus()
    spec = next(e for e in entries("openspec") if str(e["path"]).endswith("tasks.md"))
    task = next(e for e in entries("backlog-md") if "id" in e)
    config = next(e for e in entries("backlog-md") if str(e["path"]).endswith("config.yml"))
    sprint = "_bmad-output/implementation-artifacts/sprint-status.yaml"
    for entry, relpath in ((spec, STATE), (task, STATE), (config, sprint)):
        path = tmp_path / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes((realworld4.CORPUS / str(entry["file"])).read_bytes())
        with pytest.raises(DataError) as got:
            adapter_for(relpath).load(Source(str(tmp_path)), relpath)
        assert relpath in got.value.message and "\n" not in got.value.message
