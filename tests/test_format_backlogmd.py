"""The Backlog.md format on fixtures written here: the config's statuses and terminal
status, task files and their front matter, dependencies and the ready view, board order,
acceptance criteria against Done, and what is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from format_harness import codes, direct_envelope, load_one

from storyd.core.errors import DataError
from storyd.core.formats import builtin
from storyd.core.formats.backlogmd import id_key
from storyd.core.nextstep import next_of

CONFIG = "backlog/config.yml"
DEFAULT = ('project_name: "demo"\ndefault_status: "To Do"\n'
           'statuses: ["To Do", "In Progress", "Done"]\n')


def _task(ws: Path, ident: str, status: str, *, deps: str = "[]", extra: str = "",
          body: str = "", folder: str = "backlog/tasks") -> None:  # fmt: skip
    path = ws / folder / f"{ident} - Title-of-{ident}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\nid: {ident}\ntitle: Title {ident}\nstatus: {status}\nassignee: []\n"
                    f"dependencies: {deps}\n{extra}---\n\n{body}", encoding="utf-8")


def _backlog(ws: Path, config: str = DEFAULT) -> None:
    (ws / "backlog").mkdir(parents=True, exist_ok=True)
    (ws / CONFIG).write_text(config, encoding="utf-8")


def _unit(ws: Path):  # type: ignore[no-untyped-def]
    return load_one(builtin("backlog-md"), ws, CONFIG)


class TestStatuses:
    """Statuses come from the config; the terminal one is its last."""

    def test_done_is_the_last_status(self, tmp_path: Path) -> None:
        _backlog(tmp_path)
        _task(tmp_path, "task-1", "Done")
        _task(tmp_path, "task-2", "In Progress")
        _task(tmp_path, "task-3", "To Do")
        _task(tmp_path, "task-4", "Completed")
        unit = _unit(tmp_path)
        assert [(t.id, t.bucket) for t in unit.tasks if t.bucket == "done"] == [("task-1", "done")]
        assert codes(unit) == ["unknown-status"]
        assert unit.labels["progress"] == "1/4 (25%)" and unit.labels["terminal"] == "Done"

    def test_a_longer_status_list_moves_the_terminal_status(self, tmp_path: Path) -> None:
        _backlog(tmp_path, 'statuses: [To Do, In Progress, Done, Abandoned, Thought Bubbles]\n')
        _task(tmp_path, "task-1", "Done")
        _task(tmp_path, "task-2", "Thought Bubbles")
        unit = _unit(tmp_path)
        assert [t.id for t in unit.tasks if t.done] == ["task-2"]
        assert "terminal-status" in codes(unit)
        assert "'Thought Bubbles'" in next(f.message for f in unit.findings
                                           if f.code == "terminal-status")

    def test_no_statuses_means_the_default_three(self, tmp_path: Path) -> None:
        _backlog(tmp_path, 'project_name: x\n')
        _task(tmp_path, "task-1", "done")
        assert _unit(tmp_path).resume_point == "all-done"


class TestNext:
    """In progress first, then the first ready To-Do in board order; blocked otherwise."""

    def test_in_progress_is_resumed(self, tmp_path: Path) -> None:
        _backlog(tmp_path)
        _task(tmp_path, "task-1", "Done")
        _task(tmp_path, "task-2", "To Do", extra="priority: high\n")
        _task(tmp_path, "task-3", "In Progress")
        unit = _unit(tmp_path)
        assert unit.resume_point == "task-task-3"
        assert next_of(unit)["inProgress"] == ["task-3"]  # type: ignore[index]

    def test_board_order_and_dependencies(self, tmp_path: Path) -> None:
        _backlog(tmp_path)
        _task(tmp_path, "task-1", "Done")
        _task(tmp_path, "task-2", "To Do", extra="priority: low\n")
        _task(tmp_path, "task-3", "To Do", extra="priority: high\n", deps="[task-4]")
        _task(tmp_path, "task-4", "To Do", extra="priority: medium\n")
        _task(tmp_path, "task-10", "To Do", extra="ordinal: 500\n")
        unit = _unit(tmp_path)
        nxt = next_of(unit)
        assert nxt is not None and nxt["task"] == "task-10"  # an ordinal sorts first
        assert nxt["ready"] == ["task-10", "task-4", "task-2"]
        assert nxt["blocked"] == [{"id": "task-3", "waitingFor": ["task-4"]}]
        assert unit.labels["ready"] == "3"
        assert "future-dependency" in codes(unit)

    def test_dependencies_match_as_backlog_md_spells_them(self, tmp_path: Path) -> None:
        _backlog(tmp_path)
        _task(tmp_path, "task-038", "Done")
        _task(tmp_path, "task-039", "To Do", deps="\n  - TASK-038")
        _task(tmp_path, "task-12", "To Do", deps="[task-11]")  # in backlog/completed/
        _task(tmp_path, "task-11", "Done", folder="backlog/completed")
        unit = _unit(tmp_path)
        assert next_of(unit)["ready"] == ["task-12", "task-039"]  # type: ignore[index]
        assert codes(unit) == []

    def test_blocked_when_everything_waits(self, tmp_path: Path) -> None:
        _backlog(tmp_path)
        _task(tmp_path, "task-1", "To Do", deps="[task-2]")
        _task(tmp_path, "task-2", "To Do", deps="[task-1]")
        _task(tmp_path, "task-3", "To Do", deps="[task-99]")
        unit = _unit(tmp_path)
        assert unit.resume_point == "blocked" and unit.next is None
        assert codes(unit) == ["future-dependency", "no-next-task", "unknown-dependency"]

    def test_fresh_start_and_all_done(self, tmp_path: Path) -> None:
        _backlog(tmp_path)
        _task(tmp_path, "task-1", "To Do")
        assert direct_envelope(tmp_path, CONFIG)["resumePoint"] == "fresh-start"
        _task(tmp_path, "task-1", "Done")
        assert direct_envelope(tmp_path, CONFIG) == {
            "resumePoint": "all-done", "tasksCompleted": [{"id": "task-1", "commitSha": None}],
            "tasksPending": [], "lastCommitSha": None, "staleWarnings": []}


class TestFiles:
    """Task files, notes, criteria, and what the reader refuses."""

    def test_done_with_open_criteria_names_both(self, tmp_path: Path) -> None:
        _backlog(tmp_path)
        body = ("## Acceptance Criteria\n<!-- AC:BEGIN -->\n- [x] #1 one\n- [ ] #2 two\n"
                "<!-- AC:END -->\n")
        _task(tmp_path, "task-35", "Done", body=body)
        unit = _unit(tmp_path)
        [found] = unit.findings
        assert found.code == "done-with-open-criteria" and found.task == "task-35"
        assert "1 of 2 acceptance criteria" in found.message
        assert "trusts the status" in found.message
        assert unit.tasks[0].extra["criteria"] == "1/2"

    def test_notes_and_nested_folders(self, tmp_path: Path) -> None:
        _backlog(tmp_path)
        (tmp_path / "backlog/tasks").mkdir(parents=True)
        (tmp_path / "backlog/tasks/readme.md").write_text("# Tasks\n")
        _task(tmp_path, "task-7", "To Do", folder="backlog/tasks/epics/epic-1")
        unit = _unit(tmp_path)
        assert [t.id for t in unit.tasks] == ["task-7"] and codes(unit) == ["not-a-task-file"]

    def test_front_matter_outside_the_subset_is_a_finding(self, tmp_path: Path) -> None:
        _backlog(tmp_path)
        _task(tmp_path, "task-1", "To Do", extra="meta:\n  nested: mapping\n")
        _task(tmp_path, "task-2", "To Do")
        unit = _unit(tmp_path)
        assert [t.id for t in unit.tasks] == ["task-2"]
        [found] = unit.findings
        assert found.code == "front-matter-unreadable" and "line 8" in found.message, found

    def test_duplicate_ids(self, tmp_path: Path) -> None:
        _backlog(tmp_path)
        _task(tmp_path, "task-1", "To Do")
        _task(tmp_path, "task-1", "Done", folder="backlog/tasks/other")
        assert codes(_unit(tmp_path)) == ["duplicate-task-id"]

    def test_a_config_that_is_not_backlog_mds_is_refused(self, tmp_path: Path) -> None:
        _backlog(tmp_path, "name: ci\non: push\n")
        with pytest.raises(DataError, match=r"not a Backlog\.md config"):
            _unit(tmp_path)
        _backlog(tmp_path, "statuses:\n  To Do: 1\n")
        with pytest.raises(DataError, match="line 2: a nested mapping"):
            _unit(tmp_path)

    def test_owner_maps_task_files_to_the_config(self) -> None:
        adapter = builtin("backlog-md")
        assert adapter.owner("backlog/tasks/task-1 - X.md") == CONFIG
        assert adapter.owner("backlog/completed/task-1 - X.md") == CONFIG
        assert adapter.owner("backlog/drafts/draft-1.md") is None
        assert not adapter.matches("backlog/config.yaml")

    @pytest.mark.parametrize(("text", "key"), [
        ("task-038", ("task", (38,))), ("BACK-355.02", ("back", (355, 2))),
        ("task-epic-11.62.8", ("task-epic", (11, 62, 8))), ("42", ("", (42,))),
        ("task-x", None), ("", None)])  # fmt: skip
    def test_id_keys(self, text: str, key: object) -> None:
        assert id_key(text) == key
