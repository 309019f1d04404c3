"""The OpenSpec format on fixtures written here: which lines are tasks (OpenSpec's own
pattern), ids, the next task, the only active change, and the two ledgers (the archive
and tasks.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_harness import Run
from format_harness import codes, direct_envelope, load_one
from git_harness import GitRepo

from storyd.core.errors import UsageError
from storyd.core.formats import adapter_for, builtin
from storyd.core.formats.openspec import archive_date, task_number
from storyd.core.nextstep import next_of

ACTIVE = "openspec/changes/add-login/tasks.md"
TEXT = """\
## 1. Setup

- [x] 1.1 Create the module
   - [X] 1.1a an indented sub-task counts (OpenSpec since 2026-07)
* [ ] 1.2 a star bullet
-[ ] 1.3 no space after the bullet
- [ ]
- [~] 1.4 another mark: not a task
- [-] 1.5 not a task either

## 2. Build

- [ ] Prose without a number
- [ ] 1.2 the number again

```
- [ ] 2.9 inside a fence: OpenSpec counts it
```
<!--
- [x] 2.10 inside a comment: counted too
-->
- [docs](./design.md)
"""


def _write(ws: Path, relpath: str, text: str) -> None:
    path = ws / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


class TestTasks:
    """A task is a line OpenSpec's task-progress pattern takes."""

    def test_lines_ids_and_marks(self, tmp_path: Path) -> None:
        _write(tmp_path, ACTIVE, TEXT)
        unit = load_one(builtin("openspec"), tmp_path, ACTIVE)
        assert [(t.id, t.status) for t in unit.tasks] == [
            ("1.1", "done"), ("1.1a", "done"), ("1.2", "open"), ("1.3", "open"),
            ("#5", "open"), ("#6", "open"), ("#7", "open"), ("2.9", "open"), ("2.10", "done")]
        assert codes(unit) == ["duplicate-task-id", "not-a-task-mark"]
        note = next(f for f in unit.findings if f.code == "not-a-task-mark")
        assert "`[~]` line 8" in note.message and "`[-]` line 9" in note.message
        assert unit.labels["progress"] == "3/9 (33%)"

    def test_next_is_the_first_open_task_with_text(self, tmp_path: Path) -> None:
        _write(tmp_path, ACTIVE, "- [x] 1.1 a\n- [ ]\n- [ ] 1.2 b\n")
        unit = load_one(builtin("openspec"), tmp_path, ACTIVE)
        assert unit.resume_point == "task-1.2"
        assert next_of(unit) == {"task": "1.2", "why": unit.next["why"], "status": "open",  # type: ignore[index]
                                 "line": 3, "group": "", "change": "add-login"}

    def test_fresh_start_and_all_done(self, tmp_path: Path) -> None:
        _write(tmp_path, ACTIVE, "- [ ] 1.1 a\n- [ ] 1.2 b\n")
        assert direct_envelope(tmp_path, ACTIVE)["resumePoint"] == "fresh-start"
        _write(tmp_path, ACTIVE, "- [x] 1.1 a\n- [X] 1.2 b\n")
        unit = load_one(builtin("openspec"), tmp_path, ACTIVE)
        assert unit.resume_point == "all-done" and codes(unit) == ["done-not-archived"]
        assert "openspec archive add-login" in unit.findings[0].message

    def test_no_tasks(self, tmp_path: Path) -> None:
        _write(tmp_path, ACTIVE, "# Tasks\n\nnothing yet\n")
        assert codes(load_one(builtin("openspec"), tmp_path, ACTIVE)) == ["no-tasks"]

    @pytest.mark.parametrize(("word", "ok"), [("1", True), ("1.1", True), ("2.3.1", True),
                                              ("4.2a", True), ("3.", True), ("a.1", False),
                                              ("1.x1", False), ("", False), ("T001", False)])
    def test_task_numbers(self, word: str, ok: bool) -> None:
        assert task_number(word) is ok


class TestChanges:
    """Active changes, the archive and which ledger OpenSpec trusts."""

    def test_the_only_active_change_is_labelled(self, tmp_path: Path) -> None:
        _write(tmp_path, ACTIVE, "- [ ] 1.1 a\n")
        _write(tmp_path, "openspec/changes/archive/2026-01-01-old/tasks.md", "- [x] 1.1 a\n")
        assert "active" in load_one(builtin("openspec"), tmp_path, ACTIVE).labels
        _write(tmp_path, "openspec/changes/add-logout/tasks.md", "- [ ] 1.1 a\n")
        assert "active" not in load_one(builtin("openspec"), tmp_path, ACTIVE).labels

    def test_archived_with_open_tasks_is_not_in_flight(self, tmp_path: Path) -> None:
        relpath = "openspec/changes/archive/2026-01-31-add-auto-fix-pr/tasks.md"
        _write(tmp_path, relpath, "- [x] 1.1 a\n- [ ] 1.2 b\n- [ ] 1.3 c\n")
        unit = load_one(adapter_for(relpath), tmp_path, relpath)
        assert unit.key == "add-auto-fix-pr" and unit.labels["archived"] == "2026-01-31"
        assert unit.resume_point == "all-done" and next_of(unit) is None
        assert [t.bucket for t in unit.tasks] == ["done", "pending", "pending"]  # never ticked
        [found] = unit.findings
        assert found.code == "archived-with-open-tasks" and found.severity == "warning"
        assert "2 of 3 tasks open" in found.message and "trusts the archive" in found.message

    def test_archive_names(self) -> None:
        assert archive_date("2026-01-31-add-x") == ("2026-01-31", "add-x")
        assert archive_date("2026-01-10-2026-01-10-show") == ("2026-01-10", "2026-01-10-show")
        assert archive_date("add-ui-hints-support") == (None, "add-ui-hints-support")
        assert archive_date("2025-dockview-migration") == (None, "2025-dockview-migration")

    @pytest.mark.parametrize("relpath", [
        "openspec/changes/archive/tasks.md", "openspec/changes/.x/tasks.md",
        "openspec/changes/a/b/tasks.md", "openspec/changes/a/proposal.md",
        "openspec/specs/auth/tasks.md"])  # fmt: skip
    def test_paths_that_are_not_tasks_files(self, relpath: str) -> None:
        assert not builtin("openspec").matches(relpath)
        with pytest.raises(UsageError):
            adapter_for(relpath)


@pytest.mark.slow
def test_a_commit_naming_the_change_and_a_task(tmp_path: Path, run_storyd: Run) -> None:
    """task-named: `task 1.2` counts only in a commit that names the change too."""
    repo = GitRepo(tmp_path / "ws").init()
    repo.commit("docs: tasks", {ACTIVE: "- [x] 1.1 a\n- [ ] 1.2 b\n- [ ] 1.3 c\n",
                                "openspec/changes/other/tasks.md": "- [ ] 1.3 x\n"})
    first = repo.commit("feat(add-login): complete task 1.2", {"src/a.py": "a\n"})
    repo.commit("feat: task 1.3 of another change", {"src/b.py": "b\n"})
    done = run_storyd("resume", "--state-file", ACTIVE, "--detail", "--direct", cwd=repo.path)
    assert done.returncode == 0, done.stderr
    found = [(f["code"], f["task"], f["evidence"]["commit"])
             for f in json.loads(done.stdout)["findings"] if f["detector"] == "task-named"]
    assert found == [("claimed-in-commit", "1.2", first)]
