"""commit-in-history on squash merges: real `git merge --squash` in tmp repositories."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from git_harness import GitRepo

from storyd.core.model import DONE, Finding, Task, Unit
from storyd.detectors.gitview import close_views, git_context
from storyd.detectors.history import DETECTOR as HISTORY

S = "story-0049-0013"
STATE = "plans/epic-0049/execution-state.json"
Check = Callable[[Unit, Path], list[Finding]]
Run = Callable[..., subprocess.CompletedProcess[bytes]]


@pytest.fixture
def check() -> Iterator[Check]:
    local: dict[str, object] = {}

    def run(story: Unit, workspace: Path) -> list[Finding]:
        context = git_context(local, str(workspace), story, None, "git")
        context.options = {}
        return HISTORY.check(story, context)

    yield run
    close_views(local)


def unit(shas: list[str], *, pr: int | None = None, task_pr: int | None = None) -> Unit:
    tasks = tuple(
        Task(f"TASK-0049-0013-00{n}", "DONE", DONE, commit_sha=sha,
             extra={"prNumber": task_pr} if task_pr else None)
        for n, sha in enumerate(shas, 1)
    )
    labels = {"epic": "0049", "story": S, **({"pr": str(pr)} if pr else {})}
    return Unit("epic", STATE, S, tasks, labels=labels)


def topic(repo: GitRepo) -> list[str]:
    """Two task commits on branch `topic` off main; main checked out again."""
    repo.commit("base", {"a": "1\n"})
    repo.git("checkout", "-q", "-b", "topic")
    shas = [
        repo.commit("TASK-0049-0013-001 first part", {"b": "2\n"}),
        repo.commit("TASK-0049-0013-002 second part", {"c": "3\n", "a": "1\nmore\n"}),
    ]
    repo.git("checkout", "-q", "main")
    repo.commit("unrelated upstream work", {"u": "u\n"})
    return shas


def squash(repo: GitRepo, subject: str) -> str:
    repo.git("merge", "-q", "--squash", "topic")
    return repo.commit(subject)


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    return GitRepo(tmp_path / "repo").init()


def test_squash_naming_the_story_is_info(repo: GitRepo, check: Check) -> None:
    shas = topic(repo)
    landed = squash(repo, f"feat({S}): the whole story")
    found = check(unit(shas), repo.path)
    assert [(f.code, f.severity, f.task) for f in found] == [
        ("squash-merged", "info", "TASK-0049-0013-001"),
        ("squash-merged", "info", "TASK-0049-0013-002"),
    ]
    assert all(landed in f.message and "names story-0049-0013" in f.message for f in found)


def test_squash_naming_the_pr_number(repo: GitRepo, check: Check) -> None:
    shas = topic(repo)
    landed = squash(repo, "Add the things (#461)")
    found = check(unit(shas, pr=461), repo.path)
    assert {f.code for f in found} == {"squash-merged"}
    assert all(f"{landed} (its subject names #461)" in f.message for f in found)
    # a task-level PR number counts too; another number does not
    assert {f.code for f in check(unit(shas, task_pr=461), repo.path)} == {"squash-merged"}


def test_squash_with_a_silent_subject_matches_by_combined_patch_id(
    repo: GitRepo, check: Check
) -> None:
    shas = topic(repo)
    landed = squash(repo, "misc")
    found = check(unit(shas, pr=999), repo.path)
    assert [f.code for f in found] == ["squash-merged", "squash-merged"]
    assert all(landed in f.message and "combined change" in f.message for f in found)


def test_a_squash_of_other_work_stays_an_error(repo: GitRepo, check: Check) -> None:
    shas = topic(repo)
    repo.commit("misc", {"z": "other\n"})
    found = check(unit(shas, pr=999), repo.path)
    assert [(f.code, f.severity) for f in found] == [("unreachable", "error")] * 2


def test_merge_commit_naming_the_pr_keeps_commits_reachable(repo: GitRepo, check: Check) -> None:
    shas = topic(repo)
    repo.git("merge", "-q", "--no-ff", "-m", "Merge pull request #7 from me/topic", "topic")
    assert check(unit(shas, pr=7), repo.path) == []


@pytest.mark.slow
def test_storyd_detail_reports_the_squash(repo: GitRepo, run_storyd: Run) -> None:
    shas = topic(repo)
    squash(repo, f"{S}: squashed (#12)")
    repo.git("branch", "-q", "-D", "topic")
    state = {
        "stories": {
            S: {
                "status": "SUCCESS",
                "prNumber": 12,
                "tasks": {
                    f"TASK-0049-0013-00{n}": {"status": "DONE", "commitSha": sha}
                    for n, sha in enumerate(shas, 1)
                },
            }
        }
    }
    repo.write(STATE, json.dumps(state))
    done = run_storyd(
        "resume", "--epic-id", "0049", "--story-id", S, "--detail", "--direct", cwd=repo.path
    )
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    history = [f for f in body["findings"] if f["detector"] == "commit-in-history"]
    assert [(f["code"], f["severity"]) for f in history] == [("squash-merged", "info")] * 2
