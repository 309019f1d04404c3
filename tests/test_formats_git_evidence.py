"""Issue 44 rule 5 for Backlog.md and Codex ExecPlans, in real git repositories: a commit
naming an open Backlog.md task is a finding (a claim or a mention), a done task never
is, and nothing is ticked from a commit; an ExecPlan's Progress steps have no ids, so no
commit is read as naming one, however it is worded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_harness import Run
from git_harness import GitRepo

pytestmark = pytest.mark.slow

CONFIG = "backlog/config.yml"
PLAN = ".agent/plans/001-bootstrap.md"


def _task(ident: str, status: str) -> str:
    return f"---\nid: {ident}\ntitle: {ident}\nstatus: {status}\n---\n"


def _named(run_storyd: Run, repo: GitRepo, state: str) -> tuple[list[tuple[str, str]], str]:
    done = run_storyd("resume", "--state-file", state, "--detail", "--direct", cwd=repo.path)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    found = sorted((f["code"], f["task"]) for f in answer["findings"]
                   if f["detector"] == "task-named")
    return found, done.stdout.decode()


def test_a_commit_naming_an_open_backlog_task(tmp_path: Path, run_storyd: Run) -> None:
    """`BACK-2 - Done ...` while task-2 is To Do is a claim (ids compared as Backlog.md
    does: prefix case and zero padding aside); `wip: progress on TASK-003` a mention; task-1,
    Done, is never a finding; the task files are left as they are."""
    repo = GitRepo(tmp_path / "ws").init()
    files = {CONFIG: "project_name: p\nstatuses: [To Do, In Progress, Done]\n",
             "backlog/tasks/task-1 - A.md": _task("task-1", "Done"),
             "backlog/tasks/task-2 - B.md": _task("task-2", "To Do"),
             "backlog/tasks/task-3 - C.md": _task("task-3", "To Do")}
    repo.commit("docs: backlog", files)
    claim = repo.commit("fix: complete TASK-02 - the form", {"src/a.py": "a\n"})
    repo.commit("wip: progress on TASK-003", {"src/b.py": "b\n"})
    repo.commit("feat: task-1 polish, done", {"src/c.py": "c\n"})
    found, out = _named(run_storyd, repo, CONFIG)
    assert found == [("claimed-in-commit", "task-2"), ("named-in-commit", "task-3")]
    assert claim in out
    assert json.loads(out)["envelope"]["resumePoint"] == "task-task-2"
    for relpath, text in files.items():
        assert (repo.path / relpath).read_text() == text


def test_no_commit_names_an_execplan_step(tmp_path: Path, run_storyd: Run) -> None:
    """Steps are prose (`#1`, `#2` are storyd's positions, not the producer's ids)."""
    repo = GitRepo(tmp_path / "ws").init()
    repo.commit("docs: plan", {PLAN: "# P\n\n## Progress\n\n- [x] (2026-02-07 10:00Z) Repo\n"
                                     "- [ ] Deploy\n- [ ] Docs\n"})
    repo.commit("feat: complete #2 deploy", {"src/a.py": "a\n"})
    repo.commit("feat: done step 3 (Docs)", {"src/b.py": "b\n"})
    found, out = _named(run_storyd, repo, PLAN)
    assert found == []
    assert json.loads(out)["envelope"]["resumePoint"] == "task-#2"
