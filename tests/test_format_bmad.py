"""The BMAD-METHOD format on fixtures written here: which keys are stories, the next
story by sprint_plan.py's order, the epics, the two ledgers (sprint-status.yaml and a
story file's `Status:` line), lookalikes refused, and commits that name a story."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_harness import Run
from format_harness import codes, direct_envelope, load_one
from git_harness import GitRepo

from storyd.core.errors import DataError
from storyd.core.formats import adapter_for, builtin
from storyd.core.formats.base import Source
from storyd.core.formats.bmad import story_number, story_status
from storyd.core.nextstep import next_of

STATE = "_bmad-output/implementation-artifacts/sprint-status.yaml"
HEADER = """\
# generated: 2026-02-24
# STATUS DEFINITIONS:
#   - backlog: Story only exists in epic file

generated: 2026-02-24
project: todo
tracking_system: file-system
story_location: _bmad-output/implementation-artifacts

development_status:
"""


def _sprint(ws: Path, lines: str, relpath: str = STATE) -> str:
    path = ws / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + lines, encoding="utf-8")
    return relpath


def _story(ws: Path, relpath: str, status: str, title: str = "Story 1.1: A") -> None:
    path = ws / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# {title}\n\nStatus: {status}\n\n## Story\n\nStatus: not this one\n",
                    encoding="utf-8")


class TestStories:
    """Story keys are tasks in file order; epics and retrospectives are not."""

    def test_keys_statuses_and_labels(self, tmp_path: Path) -> None:
        _sprint(tmp_path, "  epic-1: in-progress\n  1-1-login: done\n  1-2a-split-story: review\n"
                "  1-3-logout: drafted  # v6\n  epic-1-retrospective: optional\n\n"
                "  epic-2: backlog\n  2-1-x: backlog\n  spike-wgpu: done\n")
        unit = load_one(builtin("bmad"), tmp_path, STATE)
        assert [(t.id, t.status, t.done) for t in unit.tasks] == [
            ("1-1-login", "done", True), ("1-2a-split-story", "review", False),
            ("1-3-logout", "drafted", False), ("2-1-x", "backlog", False)]
        assert unit.tasks[1].extra["story"] == "1.2a"
        assert codes(unit) == ["unrecognized-key"]
        assert "spike-wgpu: done" in unit.findings[0].message
        assert unit.labels["progress"] == "1/4 (25%)" and unit.labels["epics"] == (
            "1:in-progress, 2:backlog")

    @pytest.mark.parametrize(("statuses", "task", "word"), [
        (("backlog", "ready-for-dev", "review", "in-progress"), "1-4-d", "resumed first"),
        (("backlog", "ready-for-dev", "review", "done"), "1-3-c", "code review"),
        (("done", "backlog", "drafted", "ready-for-dev"), "1-3-c", "dev-story"),
        (("done", "backlog", "backlog", "done"), "1-2-b", "create-story"),
    ])
    def test_next_follows_sprint_plans_order(self, tmp_path: Path, statuses: tuple[str, ...],
                                             task: str, word: str) -> None:
        keys = ["1-1-a", "1-2-b", "1-3-c", "1-4-d"]
        _sprint(tmp_path, "".join(f"  {k}: {s}\n" for k, s in zip(keys, statuses, strict=True)))
        unit = load_one(builtin("bmad"), tmp_path, STATE)
        got = next_of(unit)
        assert got is not None and got["task"] == task and word in str(got["why"])
        assert unit.resume_point == f"task-{task}"

    def test_fresh_start_all_done_and_no_pick(self, tmp_path: Path) -> None:
        _sprint(tmp_path, "  1-1-a: backlog\n  1-2-b: backlog\n")
        assert direct_envelope(tmp_path, STATE)["resumePoint"] == "fresh-start"
        _sprint(tmp_path, "  epic-1: done\n  1-1-a: done\n  epic-1-retrospective: optional\n")
        unit = load_one(builtin("bmad"), tmp_path, STATE)
        assert unit.resume_point == "all-done" and next_of(unit) is None
        assert unit.labels["openRetrospectives"] == "epic-1"
        _sprint(tmp_path, "  1-1-a: done\n  1-2-b: cancelled\n")
        unit = load_one(builtin("bmad"), tmp_path, STATE)
        assert unit.resume_point == "blocked"
        assert codes(unit) == ["no-next-story", "unknown-status"]

    def test_epic_findings(self, tmp_path: Path) -> None:
        _sprint(tmp_path, "  epic-1: done\n  1-1-a: review\n  epic-2: backlog\n"
                "  2-1-a: in-progress\n  epic-3: in_progress\n  3-1-a: backlog\n")
        unit = load_one(builtin("bmad"), tmp_path, STATE)
        assert codes(unit) == ["epic-done-with-open-stories", "epic-not-started"]

    @pytest.mark.parametrize(("key", "number"), [
        ("3-12-source-picker", "3.12"), ("2-9a-multi", "2.9a"), ("01-02-x", "1.2"),
        ("epic-1", None), ("1-2", None), ("spike-1-2-x", None), ("1-2A-x", None)])
    def test_story_numbers(self, key: str, number: str | None) -> None:
        assert story_number(key) == number


class TestTwoLedgers:
    """A story file's Status: line against sprint-status.yaml: a finding naming both."""

    def test_story_file_behind_and_ahead(self, tmp_path: Path) -> None:
        _sprint(tmp_path, "  3-12-picker: done\n  4-8-polish: in-progress\n  4-9-x: review\n")
        here = "_bmad-output/implementation-artifacts"
        _story(tmp_path, f"{here}/3-12-picker.md", "drafted")
        _story(tmp_path, f"{here}/story-4-8-polish.md", "review")  # Mail-Agent's naming
        _story(tmp_path, f"{here}/4-9-x.md", "review")
        unit = load_one(builtin("bmad"), tmp_path, STATE)
        found = {f.task: f for f in unit.findings if f.code == "status-disagrees"}
        assert set(found) == {"3-12-picker", "4-8-polish"}
        behind, ahead = found["3-12-picker"], found["4-8-polish"]
        assert "'done' in " + STATE in behind.message and "'drafted' in" in behind.message
        assert "behind it" in behind.message and "storyd takes 'done'" in behind.message
        assert "ahead of it" in ahead.message and behind.severity == "warning"
        assert ahead.evidence == {"sprintStatus": "in-progress", "storyStatus": "review",
                                  "storyFile": f"{here}/story-4-8-polish.md"}
        # the producer's ledger decides: 4-8 is resumed (in-progress), not reviewed
        assert next_of(unit)["task"] == "4-8-polish"  # type: ignore[index]

    def test_one_stage_under_two_words_is_info(self, tmp_path: Path) -> None:
        _sprint(tmp_path, "  1-1-a: ready-for-dev\n", "docs/sprint-status.yaml")
        _story(tmp_path, "docs/stories/1-1-a.md", "drafted")  # story_location docs/stories
        [unit] = adapter_for("docs/sprint-status.yaml").load(Source(str(tmp_path)),
                                                             "docs/sprint-status.yaml")
        [note] = unit.findings
        assert note.code == "status-disagrees" and note.severity == "info"

    def test_status_lines(self) -> None:
        assert story_status("# Story 1.1: A\n\nStatus: Done  \n") == ("done", 3)
        assert story_status("# S\n\n**Status:** review\n") == ("review", 3)
        assert story_status("# S\n\n## Story\nStatus: done\n") is None
        assert story_status("# S\n\nStatus:\n") is None

    def test_a_story_file_edit_reaches_the_sprint(self, tmp_path: Path) -> None:
        adapter = builtin("bmad")
        here = "_bmad-output/implementation-artifacts"
        assert adapter.owner(f"{here}/1-1-a.md") == STATE
        assert adapter.owner("docs/stories/1-1-a.md") == "docs/sprint-status.yaml"
        assert adapter.owner("docs/sprint-artifacts/stories/4-7-x.md") == (
            "docs/sprint-artifacts/sprint-status.yaml")
        assert adapter.owner("src/1-1-a.md") is None


class TestRefused:
    """A lookalike sprint-status.yaml is refused with one line naming it."""

    @pytest.mark.parametrize(("text", "why"), [
        ("project: x\nstories:\n  - a\n", "no `development_status:`"),
        ("development_status:\n  1-1-a: done\n    deeper: x\n", "line 3"),
        ("development_status:\n  1-1-a: done\n  1-1-a: review\n", "given twice"),
        ("development_status: [a]\n", "no `development_status:`"),
    ])
    def test_lookalikes(self, tmp_path: Path, text: str, why: str) -> None:
        (tmp_path / STATE).parent.mkdir(parents=True)
        (tmp_path / STATE).write_text(text)
        with pytest.raises(DataError) as got:
            builtin("bmad").load(Source(str(tmp_path)), STATE)
        assert STATE in got.value.message and why in got.value.message

    def test_other_sprint_status_paths_are_not_claimed(self) -> None:
        adapter = builtin("bmad")
        assert adapter.matches("docs/sprint-artifacts/sprint-status.yaml")
        assert not adapter.matches("sprint-status.yaml")
        assert not adapter.matches("src/docs/sprint-status.yaml")


@pytest.mark.slow
def test_a_commit_naming_an_open_story(tmp_path: Path, run_storyd: Run) -> None:
    """task-named: `Complete Story 1.2` while 1-2 is not done is a claim; `(story 1-3)`
    a mention; a story that is done is never a finding."""
    repo = GitRepo(tmp_path / "ws").init()
    repo.commit("docs: sprint", {STATE: HEADER + "  1-1-a: done\n  1-2-b: review\n"
                                               "  1-3-c: backlog\n"})
    claim = repo.commit("feat: Complete Story 1.2 - B", {"src/a.py": "a\n"})
    repo.commit("wip: started on 1-3-c", {"src/b.py": "b\n"})
    repo.commit("feat: story 1.1 polish", {"src/c.py": "c\n"})
    done = run_storyd("resume", "--state-file", STATE, "--detail", "--direct", cwd=repo.path)
    assert done.returncode == 0, done.stderr
    found = sorted((f["code"], f["task"]) for f in json.loads(done.stdout)["findings"]
                   if f["detector"] == "task-named")
    assert found == [("claimed-in-commit", "1-2-b"), ("named-in-commit", "1-3-c")]
    assert claim in done.stdout.decode()
