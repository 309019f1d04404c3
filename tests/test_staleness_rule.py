"""The staleness rule has one home, storyd.core.storytime: every path that asks it agrees.

    resume      `storyd resume --direct`, a fresh process: per-file git calls
    per-file    storyd.api.answers.answer in this process, batching off (the memo)
    batched     the same with the daemon's batching on (one status + one log pass)
    detector    the staleness detector on a real Runner worker with a real git view,
                given the envelope (it restates it) and given none (it asks storytime)

Each path keeps its own caches across the steps of a case, so a cache that misses a
change (HEAD moved by `git reset --soft`) shows up as a disagreement.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from epic_state_harness import write_epic
from git_harness import EPOCH, GitRepo

from storyd.api import answers
from storyd.core import storytime, switches
from storyd.detectors.gitview import close_views, git_context
from storyd.detectors.runner import Runner
from storyd.detectors.staleness import DETECTOR, message

Run = Callable[..., subprocess.CompletedProcess[bytes]]

EPIC = "0049"
S = "story-0049-0013"
STORY = f"plans/epic-{EPIC}/{S}.md"
RESUME = ("resume", "--direct", "--story-id", S, "--epic-id", EPIC)
OLD, BETWEEN = "TASK-0049-0013-001", "TASK-0049-0013-002"
# OLD ended before any commit (stale in every mode); BETWEEN after the commits and
# before the story file's mtime (stale unless git vouches for the file).
TASKS = {
    OLD: {"status": "DONE", "completedAt": "2025-06-01T00:00:00Z"},
    BETWEEN: {"status": "DONE", "completedAt": "2026-01-02T00:00:00Z"},
    "TASK-0049-0013-003": {"status": "PENDING"},
}
MTIME = EPOCH + 30 * 86400  # the story file's mtime: after every completedAt


class Path_:
    """One in-process path's own storytime caches, swapped in while it answers."""

    def __init__(self, batching: bool) -> None:
        self.batching = batching
        self.memo: dict[tuple[object, ...], int | None] = {}
        self.primed: dict[str, object] = {}

    @contextmanager
    def active(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
        with monkeypatch.context() as m:
            m.setattr(switches.CONFIG, "git_memo", self.memo)
            m.setattr(switches.CONFIG, "git_primed", self.primed)
            m.setattr(switches.CONFIG, "git_batching", self.batching)
            yield


class Paths:
    """Every path's answer for the story, in one mode."""

    def __init__(self, repo: GitRepo, run_storyd: Run, monkeypatch: pytest.MonkeyPatch,
                 mode: str) -> None:
        self.ws = str(repo.path)
        self.run_storyd = run_storyd
        self.monkeypatch = monkeypatch
        self.mode = mode
        self.per_file = Path_(batching=False)
        self.batched = Path_(batching=True)
        self.runner = Runner([DETECTOR], context_factory=git_context, on_exit=close_views,
                             time_limit=30)

    def close(self) -> None:
        self.runner.close()

    def commit_times(self) -> dict[str, int | None]:
        """storytime.git_commit_time through each in-process cache."""
        found = {}
        for name, path in (("per-file", self.per_file), ("batched", self.batched)):
            with path.active(self.monkeypatch):
                found[name] = storytime.git_commit_time(self.ws, STORY)
        return found

    def warnings(self) -> dict[str, list[str]]:
        """The stale warnings (or findings' messages) each path gives."""
        done = self.run_storyd(*RESUME, "--staleness", self.mode, cwd=self.ws)
        assert done.returncode == 0, done.stderr
        found = {"resume": json.loads(done.stdout)["staleWarnings"]}
        options = answers.Options(staleness=self.mode)
        for name, path in (("per-file", self.per_file), ("batched", self.batched)):
            with path.active(self.monkeypatch):
                answer = answers.resume_epic(self.ws, EPIC, S, options)
                found[name] = answer.envelope["staleWarnings"]
                for label, envelope in (("envelope", answer.envelope), ("none", None)):
                    findings = self.runner.run(self.ws, answer.unit, envelope, self.mode)
                    assert {(f.detector, f.code) for f in findings} <= {("staleness", "stale")}
                    # one cause, one line (storyd.core.causes): the stale tasks in evidence
                    found[f"detector ({label}, {name})"] = [
                        message(t) for f in findings
                        for t in (f.evidence["tasks"].split(",") if "tasks" in f.evidence
                                  else [f.task])
                    ]  # fmt: skip
        return found

    def agree(self, commit_time: int | None) -> list[str]:
        """Assert every path says the same; returns the warnings they agree on."""
        warnings = self.warnings()
        first = warnings["resume"]
        assert warnings == dict.fromkeys(warnings, first)
        times = self.commit_times()
        assert times == {"per-file": commit_time, "batched": commit_time}
        return first


STALE_BOTH = [message(OLD), message(BETWEEN)]
STALE_OLD = [message(OLD)]


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    """A repository whose story file was committed twice (2026-01-01), then dated later."""
    repo = GitRepo(tmp_path / "repo").init()
    repo.commit("story", {STORY: "# story\n"})
    repo.commit("story, revised", {STORY: "# story, revised\n"})
    write_epic(repo.path, EPIC, tasks={S: TASKS})  # untracked: the rule never reads it
    os.utime(repo.path / STORY, (MTIME, MTIME))
    return repo


@pytest.fixture(params=list(storytime.MODES))
def paths(request: pytest.FixtureRequest, repo: GitRepo, run_storyd: Run,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[Paths]:
    found = Paths(repo, run_storyd, monkeypatch, request.param)
    yield found
    found.close()


def expected(paths: Paths, vouched: bool) -> list[str]:
    """git mode drops BETWEEN when git vouches for the file; mtime mode never does."""
    return STALE_OLD if vouched and paths.mode == storytime.GIT else STALE_BOTH


class TestEveryPathAgrees:
    """resume, the daemon's batch, the memo and the detector give one answer."""

    def test_clean_tracked_file(self, repo: GitRepo, paths: Paths) -> None:
        assert paths.agree(EPOCH + 120) == expected(paths, vouched=True)

    def test_modified_file(self, repo: GitRepo, paths: Paths) -> None:
        assert paths.agree(EPOCH + 120) == expected(paths, vouched=True)  # caches warm
        repo.write(STORY, "# story, edited\n")
        os.utime(repo.path / STORY, (MTIME, MTIME))
        assert paths.agree(None) == expected(paths, vouched=False)

    def test_untracked_file(self, repo: GitRepo, paths: Paths) -> None:
        repo.git("rm", "-q", "--cached", STORY)
        repo.clock += 60
        repo.git("commit", "-q", "-m", "untrack the story")  # the file stays in the work tree
        assert paths.agree(None) == expected(paths, vouched=False)

    def test_head_moved_by_reset_soft(self, repo: GitRepo, paths: Paths) -> None:
        assert paths.agree(EPOCH + 120) == expected(paths, vouched=True)  # caches warm
        repo.git("reset", "--soft", "HEAD~1")  # the revision is staged now: not clean
        assert paths.agree(None) == expected(paths, vouched=False)

    @pytest.mark.slow
    def test_committed_again_after_reset_soft(self, repo: GitRepo, paths: Paths) -> None:
        assert paths.agree(EPOCH + 120) == expected(paths, vouched=True)
        repo.git("reset", "--soft", "HEAD~1")
        assert paths.agree(None) == expected(paths, vouched=False)
        repo.commit("story, revised again")  # same index, new HEAD: clean, a new time
        assert paths.agree(EPOCH + 180) == expected(paths, vouched=True)


class TestTheFilesystemClock:
    """A batched pass trusts a path whose ctime predates the pass's start (read from
    time.time()). A file's ctime comes from the filesystem's clock: Linux's coarse one lags
    time.time() by a tick (8 ms measured on a loaded 2-core VM, more than the 6 ms a pass of
    two git runs can take), HFS+ keeps whole seconds. An edit made after the pass began
    but dated up to a second before it is still seen as an edit."""

    def test_an_edit_dated_before_the_pass(self, repo: GitRepo,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
        ws, batched = str(repo.path), Path_(batching=True)
        # the filesystem's clock a second behind the pass's (HFS+ truncating the edit's
        # 12:00:00.9 to 12:00:00 after a pass that began at 12:00:00.5)
        monkeypatch.setattr(storytime, "_now", lambda: time.time() + 1.0)
        with batched.active(monkeypatch):
            assert storytime.git_commit_time(ws, STORY) == EPOCH + 120
            assert ws in batched.primed  # the pass ran
            repo.write(STORY, "# story, edited\n")
            os.utime(repo.path / STORY, (MTIME, MTIME))
            assert storytime.git_commit_time(ws, STORY) is None
