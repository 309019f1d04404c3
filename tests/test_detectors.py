"""The built-in detectors against real repositories, and the Runner containing plugins."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from epic_state_harness import write_epic
from git_harness import EPOCH, GitRepo, ambiguous_commit_prefix
from plugins import broken

from storyd import detectors
from storyd.api import answers
from storyd.core import registry
from storyd.core.formats.base import Source
from storyd.core.model import DONE, PENDING, Finding, Task, Unit
from storyd.core.switches import CONFIG
from storyd.detectors import load
from storyd.detectors.gitview import close_views, git_context
from storyd.detectors.history import DETECTOR as HISTORY
from storyd.detectors.runner import Runner
from storyd.detectors.staleness import DETECTOR as STALENESS
from storyd.detectors.task_order import DETECTOR as TASK_ORDER
from storyd.detectors.unrecorded import DETECTOR as UNRECORDED

S = "story-0049-0013"
STATE = "plans/epic-0049/execution-state.json"
STORY = f"plans/epic-0049/{S}.md"
RESUME = ("resume", "--direct", "--story-id", S, "--epic-id", "0049")
BUILTINS = (
    "commit-in-history", "staleness", "task-named", "task-order", "unrecorded-commit"
)

Check = Callable[..., list[Finding]]
Run = Callable[..., subprocess.CompletedProcess[bytes]]


def task(tid: str, done: bool = True, sha: str | None = None, **extra: object) -> Task:
    """A task: DONE (status DONE) or PENDING (status from `status`, default PENDING)."""
    status = str(extra.pop("status", "DONE" if done else "PENDING"))
    return Task(tid, status, DONE if done else PENDING, commit_sha=sha, extra=extra)


def unit(*tasks: Task, branch: str | None = None) -> Unit:
    """An epic story unit holding `tasks`."""
    return Unit("epic", STATE, S, tasks, story_file=STORY, branch=branch)


def tid(n: int) -> str:
    """The seed's task id for task n of story 0049-0013."""
    return f"TASK-0049-0013-{n:03d}"


@pytest.fixture
def check() -> Iterator[Check]:
    """Run one detector the way the Runner does: context from git_context, then options."""
    local: dict[str, object] = {}

    def run(detector: object, story: Unit, workspace: Path, *,
            options: dict[str, object] | None = None, envelope: dict[str, object] | None = None,
            staleness: str = "git") -> list[Finding]:
        context = git_context(local, str(workspace), story, envelope, staleness)
        context.options = options or {}
        found = detector.check(story, context)  # type: ignore[attr-defined]
        assert isinstance(found, list) and all(isinstance(f, Finding) for f in found)
        return found

    yield run
    close_views(local)


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    """An empty repository on `main`."""
    return GitRepo(tmp_path / "repo").init()


def codes(findings: list[Finding]) -> list[tuple[str, str | None]]:
    """(code, task) of each finding."""
    return [(f.code, f.task) for f in findings]


class TestStaleness:
    """staleWarnings made git-aware: the envelope's answer, as findings, in both modes."""

    @pytest.fixture
    def clone(self, repo: GitRepo, tmp_path: Path) -> GitRepo:
        """A fresh clone of a repository whose story was committed before its tasks ended."""
        tasks = {
            tid(1): {"status": "DONE", "commitSha": None, "completedAt": "2026-01-02T00:00:00Z"},
            tid(2): {"status": "DONE", "commitSha": None, "completedAt": "2026-01-03T00:00:00Z"},
            tid(3): {"status": "PENDING"},
        }
        write_epic(repo.path, "0049", tasks={S: tasks})
        repo.commit("story", {STORY: "# story\n"})  # committed 2026-01-01
        return repo.clone(tmp_path / "clone")

    def expected(self, mode: str) -> list[str]:
        """What each mode must say about the fresh clone."""
        if mode == "git":
            return []
        return [f"Story file modified after task {tid(n)} DONE" for n in (1, 2)]

    @pytest.mark.parametrize("mode", ["git", "mtime"])
    def test_fresh_clone(self, clone: GitRepo, run_storyd: Run, check: Check, mode: str) -> None:
        done = run_storyd(*RESUME, "--staleness", mode, cwd=clone.path)
        assert done.returncode == 0, done.stderr
        envelope = json.loads(done.stdout)
        assert envelope["staleWarnings"] == self.expected(mode)

        options = answers.Options(staleness=mode)
        answer = answers.resume_epic(str(clone.path), "0049", S, options)
        assert answer.line == done.stdout

        story = answer.unit
        with_envelope = check(STALENESS, story, clone.path, envelope=answer.envelope,
                              staleness=mode)
        recomputed = check(STALENESS, story, clone.path, staleness=mode)
        assert with_envelope == recomputed
        assert [f.message for f in with_envelope] == self.expected(mode)
        assert {(f.code, f.severity) for f in with_envelope} <= {("stale", "warning")}
        assert [f.task for f in with_envelope] == [tid(n) for n in (1, 2)][: len(with_envelope)]

    def test_git_mode_is_the_default(self, clone: GitRepo, run_storyd: Run) -> None:
        done = run_storyd(*RESUME, cwd=clone.path)
        assert json.loads(done.stdout)["staleWarnings"] == []

    @pytest.mark.parametrize("mode", ["git", "mtime"])
    def test_an_edited_story_is_stale_in_both_modes(self, clone: GitRepo, run_storyd: Run,
                                                    check: Check, mode: str) -> None:
        (clone.path / STORY).write_text("# story, edited\n", encoding="utf-8")
        done = run_storyd(*RESUME, "--staleness", mode, cwd=clone.path)
        warnings = json.loads(done.stdout)["staleWarnings"]
        assert warnings == self.expected("mtime")
        answer = answers.resume_epic(str(clone.path), "0049", S, answers.Options(staleness=mode))
        found = check(STALENESS, answer.unit, clone.path, staleness=mode)
        assert [f.message for f in found] == warnings
        assert check(STALENESS, answer.unit, clone.path, envelope=answer.envelope) == found

    def test_only_done_tasks_named_by_the_envelope(self, tmp_path: Path, check: Check) -> None:
        story = unit(task(tid(1)), task(tid(2)), task(tid(3), done=False))
        envelope = {"staleWarnings": ["Story file modified after task TASK-0049-0013-002 DONE",
                                      "Story file modified after task TASK-0049-0013-003 DONE",
                                      "something else"]}
        found = check(STALENESS, story, tmp_path, envelope=envelope)
        assert codes(found) == [("stale", tid(2))]


class TestHistory:
    """commit-in-history: missing, unknown, unreachable (and rewritten), ambiguous."""

    def test_reachable_full_and_abbreviated(self, repo: GitRepo, check: Check) -> None:
        one = repo.commit("one", {"a": "1\n"})
        two = repo.commit("two", {"b": "2\n"})
        story = unit(task(tid(1), sha=one), task(tid(2), sha=two[:7]), task(tid(3), done=False))
        assert check(HISTORY, story, repo.path) == []

    def test_amend_is_unreachable_and_rewritten(self, repo: GitRepo, check: Check) -> None:
        repo.commit("base", {"a": "1\n"})
        old = repo.commit("task 2", {"b": "2\n"})
        new = repo.commit("task 2 (reworded)", amend=True)
        (found,) = check(HISTORY, unit(task(tid(2), sha=old[:10])), repo.path)
        assert (found.code, found.severity, found.task) == ("unreachable", "warning", tid(2))
        assert found.message == (
            f"commit {old[:10]} of {tid(2)} is not in the history of main "
            f"(amended, rebased, reset or force-pushed); rewritten: now {new}"
        )

    def test_amend_that_changes_the_diff_has_no_replacement(self, repo: GitRepo,
                                                            check: Check) -> None:
        repo.commit("base", {"a": "1\n"})
        old = repo.commit("task", {"b": "2\n"})
        repo.commit("task", {"b": "two\n"}, amend=True)
        (found,) = check(HISTORY, unit(task(tid(1), sha=old)), repo.path)
        assert (found.code, found.severity) == ("unreachable", "error")
        assert "rewritten" not in found.message

    def test_rebase(self, repo: GitRepo, check: Check) -> None:
        repo.commit("base", {"a": "1\n"})
        repo.git("checkout", "-q", "-b", "topic")
        olds = [repo.commit(f"task {i}", {f"t{i}": f"{i}\n"}) for i in (1, 2)]
        repo.git("checkout", "-q", "main")
        repo.commit("upstream", {"u": "u\n"})
        repo.git("checkout", "-q", "topic")
        repo.git("rebase", "-q", "main")
        news = repo.git("rev-list", "--reverse", "main..topic").split()
        story = unit(task(tid(1), sha=olds[0]), task(tid(2), sha=olds[1]))
        found = check(HISTORY, story, repo.path)
        assert codes(found) == [("unreachable", tid(1)), ("unreachable", tid(2))]
        assert [f.message.rsplit("rewritten: now ", 1)[1] for f in found] == news

    def test_reset(self, repo: GitRepo, check: Check) -> None:
        one = repo.commit("one", {"a": "1\n"})
        two = repo.commit("two", {"b": "2\n"})
        repo.git("reset", "-q", "--hard", one)
        found = check(HISTORY, unit(task(tid(1), sha=one), task(tid(2), sha=two)), repo.path)
        assert [(f.code, f.severity, f.task) for f in found] == [("unreachable", "error", tid(2))]

    def test_missing(self, repo: GitRepo, check: Check) -> None:
        repo.commit("one")
        story = unit(task(tid(1), sha="deadbeef" * 5), task(tid(2), sha="abc123"))
        found = check(HISTORY, story, repo.path)
        assert [(f.code, f.severity) for f in found] == [("missing", "error")] * 2
        assert found[0].message == (
            f"commit {'deadbeef' * 5} of {tid(1)} does not exist in the repository"
        )

    def test_shallow_clone_gives_unknown(self, repo: GitRepo, check: Check,
                                         tmp_path: Path) -> None:
        one = repo.commit("one", {"a": "1\n"})
        two = repo.commit("two", {"b": "2\n"})
        clone = repo.clone(tmp_path / "shallow", "--depth", "1")
        story = unit(task(tid(1), sha=one), task(tid(2), sha=two))
        found = check(HISTORY, story, clone.path)
        assert [(f.code, f.severity, f.task) for f in found] == [("unknown", "info", tid(1))]
        assert "shallow clone" in found[0].message

    def test_ambiguous_abbreviation(self, repo: GitRepo, check: Check) -> None:
        repo.fast_import(300)
        sha, prefix = ambiguous_commit_prefix(repo)
        found = check(HISTORY, unit(task(tid(1), sha=prefix), task(tid(2), sha=sha)), repo.path)
        assert [(f.code, f.severity, f.task) for f in found] == [("ambiguous", "warning", tid(1))]

    def test_not_hex_and_not_a_commit(self, repo: GitRepo, check: Check) -> None:
        repo.commit("one", {"a": "1\n"})
        blob = repo.git("rev-parse", "HEAD:a")
        story = unit(task(tid(1), sha="ghi789"), task(tid(2), sha="main"), task(tid(3), sha=blob))
        found = check(HISTORY, story, repo.path)
        assert codes(found) == [("invalid-sha", tid(1)), ("invalid-sha", tid(2)),
                                ("not-a-commit", tid(3))]

    def test_which_tip(self, repo: GitRepo, check: Check) -> None:
        """The unit's branch, else the `branch` option, else the checked-out branch, else HEAD."""
        repo.commit("base", {"a": "1\n"})
        repo.git("checkout", "-q", "-b", "feature")
        feature = repo.commit("feature work", {"f": "f\n"})
        repo.git("checkout", "-q", "main")
        on_feature = task(tid(1), sha=feature)
        assert codes(check(HISTORY, unit(on_feature), repo.path)) == [("unreachable", tid(1))]
        assert check(HISTORY, unit(on_feature, branch="feature"), repo.path) == []
        assert check(HISTORY, unit(on_feature), repo.path, options={"branch": "feature"}) == []
        bad = check(HISTORY, unit(on_feature, branch="main"), repo.path,
                    options={"branch": "feature"})
        assert codes(bad) == [("unreachable", tid(1))]
        repo.git("checkout", "-q", "--detach", feature)
        assert check(HISTORY, unit(on_feature), repo.path) == []
        (none,) = check(HISTORY, unit(on_feature, branch="not-yet"), repo.path)
        assert (none.code, none.severity) == ("no-tip", "info")

    def test_no_repository(self, tmp_path: Path, check: Check) -> None:
        (found,) = check(HISTORY, unit(task(tid(1), sha="abc1234")), tmp_path)
        assert (found.code, found.severity) == ("no-repository", "info")
        assert check(HISTORY, unit(task(tid(1))), tmp_path) == []

    def test_messages_are_stable_as_the_branch_moves(self, repo: GitRepo, check: Check) -> None:
        repo.commit("base", {"a": "1\n"})
        old = repo.commit("t", {"b": "2\n"})
        repo.commit("t", {"b": "3\n"}, amend=True)
        story = unit(task(tid(1), sha=old))
        first = check(HISTORY, story, repo.path)
        repo.commit("more", {"c": "c\n"})
        assert check(HISTORY, story, repo.path) == first


class TestTaskOrder:
    """task-order: a DONE task after the first task that is not DONE."""

    @pytest.mark.parametrize(
        ("pattern", "offenders"),
        [
            ("DDD", []),
            ("DDP", []),
            ("PPP", []),
            ("PDP", [2]),
            ("DPDD", [3, 4]),
            ("", []),
        ],
    )
    def test_offenders(self, tmp_path: Path, check: Check, pattern: str,
                       offenders: list[int]) -> None:
        story = unit(*(task(tid(i), done=c == "D") for i, c in enumerate(pattern, 1)))
        found = check(TASK_ORDER, story, tmp_path)
        # one cause, one line: one finding per unit, on the first offender, all in evidence
        assert codes(found) == [("out-of-order", tid(i)) for i in offenders[:1]]
        if len(offenders) > 1:
            assert found[0].evidence == {"count": str(len(offenders)),
                                         "tasks": ",".join(tid(i) for i in offenders)}

    def test_message(self, tmp_path: Path, check: Check) -> None:
        story = unit(task(tid(1), done=False, status="IN_PROGRESS"), task(tid(2)))
        (found,) = check(TASK_ORDER, story, tmp_path)
        assert found.severity == "warning"
        assert found.message == f"task {tid(2)} is DONE after task {tid(1)}, which is IN_PROGRESS"


class TestUnrecorded:
    """unrecorded-commit: git is ahead of the state file."""

    def test_a_commit_names_a_pending_task(self, repo: GitRepo, check: Check) -> None:
        one = repo.commit(f"feat: {tid(1)} parse", {"a": "1\n"})
        two = repo.commit(f"feat: {tid(2)} render\n\nbody", {"b": "2\n"})
        repo.commit(f"chore: not {tid(3)}0 nor X{tid(3)}", {"c": "3\n"})
        story = unit(task(tid(1), sha=one), task(tid(2), done=False), task(tid(3), done=False))
        (found,) = check(UNRECORDED, story, repo.path)
        assert (found.code, found.severity, found.task) == ("unrecorded", "warning", tid(2))
        assert found.message == (
            f'commit {two[:12]} "feat: {tid(2)} render" on main names task {tid(2)}, which is '
            "still PENDING: the state file is behind git (crash after the commit, before the "
            "state update?)"
        )

    def test_newest_commit_is_reported(self, repo: GitRepo, check: Check) -> None:
        repo.commit(f"wip {tid(1)}", {"a": "1\n"})
        newest = repo.commit(f"finish {tid(1)}", {"a": "2\n"})
        (found,) = check(UNRECORDED, unit(task(tid(1), done=False)), repo.path)
        assert newest[:12] in found.message

    def test_scan_starts_at_the_merge_base(self, repo: GitRepo, check: Check) -> None:
        repo.commit(f"old mention of {tid(1)}", {"a": "1\n"})
        repo.git("checkout", "-q", "-b", "topic")
        repo.commit("topic work", {"b": "2\n"})
        story = unit(task(tid(1), done=False))
        assert check(UNRECORDED, story, repo.path) == []
        repo.git("checkout", "-q", "main")
        assert codes(check(UNRECORDED, story, repo.path)) == [("unrecorded", tid(1))]

    def test_scan_depth(self, repo: GitRepo, check: Check) -> None:
        repo.commit(f"did {tid(1)}", {"a": "1\n"})
        for i in range(3):
            repo.commit(f"later {i}", {f"l{i}": "x\n"})
        story = unit(task(tid(1), done=False))
        assert check(UNRECORDED, story, repo.path, options={"scan_depth": 3}) == []
        assert len(check(UNRECORDED, story, repo.path, options={"scan_depth": 4})) == 1

    def test_short_ids_are_not_searched(self, repo: GitRepo, check: Check) -> None:
        repo.commit("fix 1 and step-3", {"a": "1\n"})
        story = unit(task("1", done=False), task("step-3", done=False))
        assert check(UNRECORDED, story, repo.path) == []
        found = check(UNRECORDED, story, repo.path, options={"min_id_length": 4})
        assert codes(found) == [("unrecorded", "step-3")]

    @pytest.mark.parametrize("other", ["T.9.1", "step 3"])  # ids outside [\w-]: the regex path
    def test_word_ids_and_other_ids_are_named_alike(
        self, repo: GitRepo, check: Check, other: str
    ) -> None:
        """Ids made of word characters and hyphens are found as whole words of the message
        (split once per commit); the same boundaries as the regex used for other ids."""
        repo.commit(f"x{tid(1)} {tid(2)}-b a_{tid(3)} ({tid(4)}) {tid(5)}: {other}.", {"a": "1\n"})
        ids = [tid(1), tid(2), tid(3), tid(4), tid(5)]
        story = unit(*(task(i, done=False) for i in ids))
        assert codes(check(UNRECORDED, story, repo.path)) == [
            ("unrecorded", tid(4)), ("unrecorded", tid(5)),
        ]
        with_other = unit(*(task(i, done=False) for i in [*ids, other]))  # the regex path
        assert codes(check(UNRECORDED, with_other, repo.path, options={"min_id_length": 3})) == [
            ("unrecorded", tid(4)), ("unrecorded", tid(5)), ("unrecorded", other),
        ]

    def test_no_repository(self, tmp_path: Path, check: Check) -> None:
        assert check(UNRECORDED, unit(task(tid(1), done=False)), tmp_path) == []

    def in_progress(self, started: str, files: list[str]) -> Unit:
        """An issue-plan-like unit whose task 2 is in_progress since `started`."""
        return Unit("issue-plan", ".claude/plans/issue-7/execution-state.json", "issue-7", (
            Task("1", "completed", DONE),
            Task("2", "in_progress", PENDING,
                 extra={"started_at": started, "files_created": files[:1],
                        "files_modified": files[1:]}),
        ))

    def test_in_progress_task_with_committed_files(self, repo: GitRepo, check: Check) -> None:
        repo.commit("before", {"src/a.ts": "0\n"})  # EPOCH + 60
        sha = repo.commit("work", {"src/a.ts": "1\n", "src/b.ts": "b\n"})  # EPOCH + 120
        started = "2026-01-01T00:01:30Z"  # EPOCH + 90
        (found,) = check(UNRECORDED, self.in_progress(started, ["src/b.ts", "src/a.ts"]), repo.path)
        assert (found.code, found.task) == ("in-progress-committed", "2")
        assert found.message == (
            f"task 2 is in_progress, but commit {sha[:12]} on main, after its started_at "
            f"{started}, touches src/a.ts, src/b.ts: the sub-agent did not update the state file"
        )

    @pytest.mark.parametrize(("started", "files"), [
        ("2026-01-01T00:03:00Z", ["src/a.ts"]),  # started after the commit
        ("2026-01-01T00:00:30Z", ["src/other.ts"]),  # the commit touches other files
        ("not a time", ["src/a.ts"]),
        ("2026-01-01T00:00:30Z", []),
    ])
    def test_in_progress_without_committed_work(self, repo: GitRepo, check: Check,
                                                started: str, files: list[str]) -> None:
        repo.commit("work", {"src/a.ts": "1\n"})  # EPOCH + 60
        assert check(UNRECORDED, self.in_progress(started, files), repo.path) == []

    def test_issue_plan_state_file(self, repo: GitRepo, check: Check) -> None:
        """Through the issue-plan adapter: its branch is the tip, its task extras are read."""
        from storyd.core.formats.issue_plan import ADAPTER

        relpath = ".claude/plans/issue-7-login/execution-state.json"
        state = {
            "issue": {"number": 7, "title": "Login", "branch": "feature/login"},
            "tasks": [{"id": "1", "status": "in_progress", "started_at": "2026-01-01T00:00:30Z",
                       "files_created": ["src/login.ts"], "files_modified": []}],
        }
        repo.commit("base", {relpath: json.dumps(state)})
        repo.git("checkout", "-q", "-b", "feature/login")
        repo.commit("login form", {"src/login.ts": "form\n"})
        repo.git("checkout", "-q", "main")
        (story,) = ADAPTER.load(Source(str(repo.path)), relpath)
        assert story.branch == "feature/login"
        found = check(UNRECORDED, story, repo.path)
        assert codes(found) == [("in-progress-committed", "1")]
        assert "on feature/login" in found[0].message


class TestRunner:
    """Built-ins and plugins through entry points, on the Runner's owner thread."""

    @pytest.fixture
    def entry_points(self, monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
        """A registry whose detectors are the given (name, value) pairs, nothing else."""

        def install(*pairs: tuple[str, str]) -> None:
            text = "[storyd.detectors]\n" + "".join(f"{n} = {v}\n" for n, v in pairs)
            monkeypatch.setattr(CONFIG, "registry", registry.Registry(text, scan=list))

        return install

    @pytest.fixture
    def runner(self) -> Iterator[Callable[..., Runner]]:
        """Make Runners with git_context; their views and threads are closed afterwards."""
        made: list[Runner] = []

        def make(found: list[detectors.Detector], **kwargs: object) -> Runner:
            made.append(Runner(found, context_factory=git_context, **kwargs))  # type: ignore[arg-type]
            return made[-1]

        yield make
        broken.RELEASE.set()
        for r in made:
            r.submit(close_views)
            r.close()
        broken.RELEASE.clear()

    def test_builtins_are_registered(self) -> None:
        names = [d.name for d in load()]
        assert names == sorted(BUILTINS)

    def test_discovery_and_the_example_plugin(self, entry_points: Callable[..., None],
                                              runner: Callable[..., Runner],
                                              tmp_path: Path) -> None:
        entry_points(("todo", "plugins.todo_detector:DETECTOR"),
                     ("task-order", "storyd.detectors.task_order:DETECTOR"))
        found = load({"todo": {"severity": "info"}})
        assert [d.name for d in found] == ["task-order", "todo"]
        r = runner(found, options={"todo": {"severity": "info"}})
        story = unit(task(tid(1), sha="abc1234"), task(tid(2)), task(tid(3), done=False))
        findings = r.run(str(tmp_path), story, None)
        assert [(f.detector, f.code, f.severity, f.task) for f in findings] == [
            ("todo", "no-commit", "info", tid(2)),
        ]
        assert load({"todo": {"enabled": False}})[0].name == "task-order"

    def test_a_plugin_that_fails_to_import(self, entry_points: Callable[..., None]) -> None:
        entry_points(("todo", "plugins.todo_detector:DETECTOR"),
                     ("broken-import", "plugins.fails_to_import:DETECTOR"))
        assert [d.name for d in load({"broken-import": {"enabled": False}})] == ["todo"]
        assert registry.get().problems == []  # a disabled plugin is not even imported
        assert [d.name for d in load()] == ["todo"]  # skipped, the rest load
        (problem,) = registry.get().problems
        assert problem.startswith("detector plugin broken-import (plugins.fails_to_import")
        assert "failed to load: ModuleNotFoundError" in problem

    def test_a_plugin_that_is_not_a_detector(self, entry_points: Callable[..., None]) -> None:
        entry_points(("nameless", "plugins.broken:NAMELESS"),
                     ("task-order", "storyd.detectors.task_order:DETECTOR"))
        assert [d.name for d in load()] == ["task-order"]
        assert registry.get().problems == [
            "detector plugin nameless (plugins.broken:NAMELESS) skipped: it has no `name` string"
        ]

    def test_raising_and_garbage_become_error_findings(self, entry_points: Callable[..., None],
                                                       runner: Callable[..., Runner],
                                                       tmp_path: Path) -> None:
        entry_points(("raising", "plugins.broken:RAISING"), ("garbage", "plugins.broken:GARBAGE"),
                     ("task-order", "storyd.detectors.task_order:DETECTOR"))
        r = runner(load())
        story = unit(task(tid(1), done=False), task(tid(2)))
        findings = r.run(str(tmp_path), story, None)
        assert [(f.detector, f.code, f.severity) for f in findings] == [
            ("garbage", "detector-failed", "error"),
            ("raising", "detector-failed", "error"),
            ("task-order", "out-of-order", "warning"),
        ]
        assert "RuntimeError: boom in story-0049-0013" in findings[1].message

    @pytest.mark.slow
    def test_a_hang_is_cut_off_and_later_checks_work(self, entry_points: Callable[..., None],
                                                     runner: Callable[..., Runner],
                                                     repo: GitRepo) -> None:
        entry_points(("commit-in-history", "storyd.detectors.history:DETECTOR"),
                     ("hanging", "plugins.broken:HANGING"))
        gone = repo.commit("gone", {"a": "1\n"})
        repo.commit("kept", {"a": "2\n"}, amend=True)
        story = unit(task(tid(1), sha=gone))
        limit = 0.5
        r = runner(load(), time_limit=limit)
        started = time.monotonic()
        first = r.run(str(repo.path), story, None)
        assert time.monotonic() - started < limit + 2.0
        assert [(f.detector, f.code) for f in first] == [
            ("commit-in-history", "unreachable"), ("hanging", "detector-failed"),
        ]
        assert f"exceeded its {limit:g} s time limit" in first[1].message
        second = r.run(str(repo.path), story, None)  # a fresh owner thread, fresh views
        assert second[0] == first[0]
        assert "still running" in second[1].message
        broken.RELEASE.set()  # the hung call returns; a later run unbenches it
        deadline = time.monotonic() + 10
        later = second
        while later != (first[0],) and time.monotonic() < deadline:
            assert broken.RETURNED.wait(10), "the hanging check did not return"
            later = r.run(str(repo.path), story, None)  # done is set just after RETURNED
        assert later == (first[0],)


class TestEndToEnd:
    """A real state file in a real repository, through load(), the Runner and git_context."""

    def test_epic_story(self, repo: GitRepo, tmp_path: Path) -> None:
        one = repo.commit(f"{tid(1)} done", {"src/one.py": "1\n"})
        two = repo.commit(f"{tid(2)} done", {"src/two.py": "2\n"})
        gone = repo.commit(f"{tid(3)} done", {"src/three.py": "3\n"})
        repo.git("reset", "-q", "--hard", two)
        repo.commit(f"{tid(5)} done early", {"src/five.py": "5\n"})
        stamp = "2026-02-01T00:00:00Z"
        tasks = {
            tid(1): {"status": "DONE", "commitSha": one[:8], "completedAt": stamp},
            tid(2): {"status": "DONE", "commitSha": two, "completedAt": stamp},
            tid(3): {"status": "DONE", "commitSha": gone, "completedAt": stamp},
            tid(4): {"status": "PENDING"},
            tid(5): {"status": "PENDING"},
            tid(6): {"status": "DONE", "commitSha": None, "completedAt": stamp},
        }
        write_epic(repo.path, "0049", tasks={S: tasks})
        story_file = repo.write(STORY, "# story\n")
        later = EPOCH + 86400 * 60
        os.utime(story_file, (later, later))
        answer = answers.resume_epic(str(repo.path), "0049", S, answers.Options())
        r = Runner(load(), context_factory=git_context, time_limit=30)
        try:
            findings = r.run(str(repo.path), answer.unit, answer.envelope)
        finally:
            r.submit(close_views)
            r.close()
        assert sorted((f.detector, f.code, f.task) for f in findings) == sorted([
            ("commit-in-history", "unreachable", tid(3)),
            ("staleness", "stale", None),  # one cause (the story file edited): one line
            ("task-order", "out-of-order", tid(6)),
            ("unrecorded-commit", "unrecorded", tid(5)),
        ])
        assert answer.envelope["staleWarnings"] == [
            f"Story file modified after task {tid(n)} DONE" for n in (1, 2, 3, 6)
        ]
        assert orjson.loads(answer.line) == answer.envelope


def test_load_with_codes_builds_only_the_detectors_that_declare_one() -> None:
    """What a caller reading only some finding codes runs (the stop hook: block_stop_on)."""
    from storyd import detectors as plugins

    def names(codes: frozenset[str] | None) -> list[str]:
        return [d.name for d in plugins.load(None, codes)]

    assert names(frozenset({"unrecorded"})) == ["unrecorded-commit"]
    assert names(frozenset({"unreachable", "stale"})) == ["commit-in-history", "staleness"]
    assert names(frozenset({"state-not-updated"})) == []  # a format's finding: no detector
    assert names(frozenset({"git-error"})) == ["commit-in-history", "task-named",
                                               "unrecorded-commit"]
    assert names(None) == sorted(d.name for d in plugins.load())
    off = {"unrecorded-commit": {"enabled": False}}
    assert [d.name for d in plugins.load(off, frozenset({"unrecorded"}))] == []
