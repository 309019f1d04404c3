"""The detectors' prepare step (issue 31): git work a check will read, started before
any detector waits on git, so the epic unit's processes run side by side.

Runner.run calls each detector's optional `prepare(unit, context)` before the checks;
unrecorded-commit starts its scan's `git log` there (GitView.prefetch_commits), read by
`commits` with the same arguments. A prepare never changes an answer, and a hook's
direct scan imports no thread machinery for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from agents_harness import AgentsEnv, LoggingGit, demo_workspace, hook_payload, run_hook
from cli_harness import lean_pythonpath

from storyd.core.model import Finding, Unit
from storyd.detectors import Context
from storyd.detectors.gitview import close_views, git_context, open_view
from storyd.detectors.runner import Runner

UNIT = Unit("epic", "plans/epic-0001/execution-state.json", "story-0001-0001", ())
LAUNCHER = str(Path(__file__).resolve().parents[1] / "bin" / "storyd")


class _Noted:
    """A detector that notes its prepare and check calls in one shared list."""

    def __init__(self, name: str, calls: list[str], *, fails: bool = False) -> None:
        self.name = name
        self.calls = calls
        self.fails = fails

    def prepare(self, unit: Unit, context: Context) -> None:
        self.calls.append(f"prepare {self.name}")
        if self.fails:
            raise RuntimeError("a prepare that breaks")

    def check(self, unit: Unit, context: Context) -> list[Finding]:
        self.calls.append(f"check {self.name}")
        return [Finding(self.name, "noted", "info", "checked")]


class TestRunner:
    """Every prepare before any check; a failing prepare changes nothing."""

    def test_prepares_run_before_the_checks(self) -> None:
        calls: list[str] = []
        runner = Runner([_Noted("a", calls), _Noted("b", calls)])
        try:
            found = runner.run("/nonexistent-workspace", UNIT, None)
        finally:
            runner.close()
        assert calls == ["prepare a", "prepare b", "check a", "check b"]
        assert [f.detector for f in found] == ["a", "b"]

    def test_a_failing_prepare_leaves_the_findings_as_they_were(self) -> None:
        calls: list[str] = []
        runner = Runner([_Noted("a", calls, fails=True), _Noted("b", calls)])
        try:
            found = runner.run("/nonexistent-workspace", UNIT, None)
        finally:
            runner.close()
        assert [f.code for f in found] == ["noted", "noted"]
        assert calls[-2:] == ["check a", "check b"]


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    for n in range(3):
        (repo / f"f{n}.txt").write_text(f"{n}\n")
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", f"TASK-0001-000{n}: step {n}"], check=True)
    return repo


class TestPrefetchCommits:
    """A started scan is read by `commits`, the same as one run then."""

    def test_a_prefetched_scan_gives_what_a_plain_one_gives(self, tmp_path: Path) -> None:
        repo = _repo(tmp_path)
        plain, early = open_view(str(repo)), open_view(str(repo))
        assert plain is not None and early is not None
        try:
            tip = plain.tip_sha("main")
            assert tip is not None
            early.prefetch_commits(tip, None, 200)
            got = [(c.sha, c.time, c.message) for c in early.commits(tip, None, 200)]
            want = [(c.sha, c.time, c.message) for c in plain.commits(tip, None, 200)]
            assert got == want and len(got) == 3
        finally:
            plain.close()
            early.close()

    def test_an_unread_prefetch_is_ended_at_close(self, tmp_path: Path) -> None:
        repo = _repo(tmp_path)
        view = open_view(str(repo))
        assert view is not None
        tip = view.tip_sha("main")
        assert tip is not None
        view.prefetch_commits(tip, None, 200)
        pids = [p.pid for p in view._early_logs.values()]
        assert len(pids) == 1
        view.close()
        with pytest.raises(ChildProcessError):  # reaped by close: no zombie left
            os.waitpid(pids[0], os.WNOHANG)

    def test_the_detectors_findings_are_unchanged(self, tmp_path: Path) -> None:
        """unrecorded-commit through a Runner (prepare, then check) and called alone."""
        from storyd.core.model import PENDING, Task
        from storyd.detectors.unrecorded import DETECTOR

        repo = _repo(tmp_path)
        tasks = (Task("TASK-0001-0002", "IN_PROGRESS", PENDING),)
        unit = Unit("epic", "plans/epic-0001/execution-state.json", "story-0001-0001", tasks)
        runner = Runner([DETECTOR], context_factory=git_context, on_exit=close_views)
        try:
            through = runner.run(str(repo), unit, None)
        finally:
            runner.close()
        view = open_view(str(repo))
        assert view is not None
        try:
            alone = DETECTOR.check(unit, Context(str(repo), {}, view, None))
        finally:
            view.close()
        assert list(through) == alone
        assert [f.code for f in alone] == ["unrecorded"]


def test_session_start_starts_the_scan_before_the_rewrite_search(tmp_path: Path) -> None:
    """On the demo, unrecorded-commit's log is spawned before commit-in-history's `log -p`
    (before: after it, one after the other)."""
    ws, git = demo_workspace(tmp_path), LoggingGit(tmp_path)
    done = run_hook("session-start", hook_payload("SessionStart", ws, source="startup"),
                    git.env)
    assert done.returncode == 0, done.stderr
    starts = git.starts()
    scan = next(i for i, s in enumerate(starts) if "--max-count=200 " in f"{s} " and " -p" not in s)
    search = next(i for i, s in enumerate(starts) if " -p" in s)
    assert scan < search, "\n".join(starts)


@pytest.mark.slow
@pytest.mark.parametrize("event", ["session-start", "stop"])
def test_a_hooks_scan_starts_no_thread_machinery(tmp_path: Path, event: str) -> None:
    """Inline detectors: no threading (with collections) nor weakref on the hook's path,
    and PATH and the finders read without importlib or warnings."""
    ws = demo_workspace(tmp_path)
    env = dict(AgentsEnv(tmp_path).env, PYTHONPATH=lean_pythonpath(),
               XDG_CACHE_HOME=str(tmp_path / "cache"))  # fmt: skip
    env.pop("STORYD_LOG_LEVEL", None)
    payload = (hook_payload("SessionStart", ws, source="startup") if event == "session-start"
               else hook_payload("Stop", ws, stop_hook_active=False))  # fmt: skip
    argv = [sys.executable, "-S", "-X", "importtime", LAUNCHER, "hook", event]
    for _ in range(2):  # the first run parses config.toml (tomllib), the second reads its parse
        done = subprocess.run(argv, input=orjson.dumps(payload), cwd="/", env=env,
                              capture_output=True, timeout=60, check=False)  # fmt: skip
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 0 and "Traceback" not in stderr, stderr[-2000:]
    names = {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines()
             if line.startswith("import time:")}  # fmt: skip
    assert "storyd.api.scan" in names, "the run did not scan"
    assert "storyd.detectors.unrecorded" in names  # the detectors ran
    assert not names & {"threading", "collections", "weakref", "storyd.detectors.owner"}
    # nor importlib (the dist scan's PathFinder) or warnings (os.get_exec_path's import)
    assert not names & {"importlib", "importlib.machinery", "warnings"}
    if event == "stop":  # only the detector of block_stop_on's codes is imported
        assert not names & {"storyd.detectors.history", "storyd.detectors.staleness",
                            "storyd.detectors.mentions", "storyd.detectors.task_order"}
