"""The inline Runner (issue 31): a one-shot direct scan runs the detectors on its main
thread under a SIGALRM time limit, with the answers of the owner thread's Runner.

A hook without a daemon scans the workspace once and exits: an owner thread cost its
start, `threading`'s import and a hand-over per detector and unit. Inline, the same
detectors give the same findings; an overrun is interrupted, reported and benched as
the owner thread's is; off the main thread the Runner keeps its owner thread.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from agents_harness import demo_workspace

from storyd.config import Config
from storyd.core.model import Finding, Unit
from storyd.detectors import Context, load
from storyd.detectors.codes import CODES
from storyd.detectors.gitview import close_views, git_context
from storyd.detectors.runner import Runner

# pytest-timeout's own SIGALRM would make every Runner here keep its owner thread (a host
# with a handler of its own does): these tests bound their waits themselves
pytestmark = pytest.mark.timeout(0)

UNIT = Unit("epic", "plans/epic-0001/execution-state.json", "story-0001-0001", ())


class _Where:
    """A detector that notes the thread it ran on."""

    name = "where"

    def __init__(self) -> None:
        self.threads: list[int] = []

    def check(self, unit: Unit, context: Context) -> list[Finding]:
        self.threads.append(threading.get_ident())
        return []


class _Hang:
    """A detector blocked in a wait (a hung git read) far longer than its limit."""

    name = "hang"

    def check(self, unit: Unit, context: Context) -> list[Finding]:
        threading.Event().wait(30)
        return []


class _Raises:
    """A detector whose own code raises TimeoutError: a failure, not an overrun."""

    name = "raises"

    def check(self, unit: Unit, context: Context) -> list[Finding]:
        raise TimeoutError("its own")


class _Swallows:
    """A detector whose blocking calls sit in a bare `except:` (third-party code does)."""

    name = "swallows"

    def check(self, unit: Unit, context: Context) -> list[Finding]:
        for _ in range(3):
            try:  # noqa: SIM105 - a bare except, the case under test
                threading.Event().wait(10)
            except:  # noqa: E722
                pass
        return []


class _SlowGit:
    """A detector whose git child outlives its limit (a `git` that only sleeps)."""

    name = "slow-git"

    def __init__(self, git: Path) -> None:
        self.git = git
        self.pids: list[int] = []

    def check(self, unit: Unit, context: Context) -> list[Finding]:
        from storyd.detectors.gitview import proc

        child = proc.start([str(self.git), "log"], "/")
        self.pids.append(child.pid)
        proc.finish(child, timeout=20)
        return []


class TestInline:
    """Inline on the main thread, the owner thread elsewhere."""

    def test_it_runs_on_the_calling_thread_and_starts_none(self) -> None:
        where = _Where()
        before = threading.active_count()
        runner = Runner([where], inline=True)
        try:
            assert runner.inline
            assert runner.run("/nonexistent-workspace", UNIT, None) == ()
            assert where.threads == [threading.get_ident()]
            assert threading.active_count() == before
        finally:
            runner.close()

    def test_off_the_main_thread_it_keeps_its_owner_thread(self) -> None:
        made: list[Runner] = []
        maker = threading.Thread(target=lambda: made.append(Runner([_Where()], inline=True)))
        maker.start()
        maker.join(10)
        assert made, "the Runner was not made within 10 s"
        try:
            assert not made[0].inline
        finally:
            made[0].close()

    def test_an_overrun_is_interrupted_reported_and_benched(self) -> None:
        runner = Runner([_Hang(), _Where()], time_limit=0.2, inline=True)
        try:
            began = time.monotonic()
            first = runner.run("/nonexistent-workspace", UNIT, None)
            assert time.monotonic() - began < 5, "the alarm did not interrupt the wait"
            assert [f.message for f in first] == ["detector hang exceeded its 0.2 s time limit"]
            second = runner.run("/nonexistent-workspace", UNIT, None)
            assert [f.message for f in second] == [
                "detector hang still running after 0.2 s; skipped"
            ]
            assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
            assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
        finally:
            runner.close()

    def test_an_overrun_the_detector_swallows_is_still_an_overrun(self) -> None:
        runner = Runner([_Swallows()], time_limit=0.3, inline=True)
        try:
            assert runner.inline
            began = time.monotonic()
            found = runner.run("/nonexistent-workspace", UNIT, None)
            took = time.monotonic() - began
        finally:
            runner.close()
        assert [f.code for f in found] == ["detector-failed"], found
        assert "time limit" in found[0].message
        assert took < 3, took  # the repeated alarm ends each wait (not 3 x 10 s)

    def test_an_interrupted_git_child_is_killed_and_reaped(self, tmp_path: Path) -> None:
        git = tmp_path / "git"
        git.write_text("#!/bin/sh\nexec sleep 30\n")
        git.chmod(0o755)
        detector = _SlowGit(git)
        runner = Runner([detector], time_limit=0.3, inline=True)
        try:
            found = runner.run("/nonexistent-workspace", UNIT, None)
        finally:
            runner.close()
        assert [f.code for f in found] == ["detector-failed"], found
        assert len(detector.pids) == 1
        with pytest.raises(ChildProcessError):  # reaped already: not left a zombie
            os.waitpid(detector.pids[0], os.WNOHANG)

    def test_a_detector_raising_timeouterror_is_a_failure_not_an_overrun(self) -> None:
        runner = Runner([_Raises()], inline=True)
        try:
            found = runner.run("/nonexistent-workspace", UNIT, None)
            assert [f.message for f in found] == ["detector raises raised TimeoutError: its own"]
        finally:
            runner.close()

    @pytest.mark.parametrize("host", ["blocks SIGALRM", "handles SIGALRM"])
    def test_an_alarm_the_host_holds_keeps_the_owner_thread(self, host: str) -> None:
        blocks = host == "blocks SIGALRM"
        if blocks:
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
        else:
            previous = signal.signal(signal.SIGALRM, lambda signum, frame: None)
        try:
            runner = Runner([_Where()], inline=True)
            try:
                assert not runner.inline
            finally:
                runner.close()
        finally:
            if blocks:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGALRM])
            else:
                signal.signal(signal.SIGALRM, previous)


@pytest.mark.slow
def test_inline_and_owner_thread_find_the_same_on_the_demo(tmp_path: Path) -> None:
    """Every built-in detector on the demo workspace's units: the same findings either way."""
    from storyd.api.scan import scan_workspaces

    ws = str(demo_workspace(tmp_path))
    inline, _ = scan_workspaces([ws], Config())
    owned: list[object] = []
    other = threading.Thread(target=lambda: owned.append(scan_workspaces([ws], Config())[0]))
    other.start()
    other.join(60)
    assert owned, "the scan on another thread did not finish within 60 s"
    assert [dict(u) for u in inline] == [dict(u) for u in owned[0]]  # type: ignore[attr-defined]
    assert any(u["findingList"] for u in inline)


def test_a_runner_of_every_detector_matches_the_owner_thread(tmp_path: Path) -> None:
    """The same unit through both Runners, git views included."""
    from storyd.core.formats import adapter_for
    from storyd.core.pipeline import Options, answer, read_file

    ws = str(demo_workspace(tmp_path))
    relpath = "plans/epic-0049/execution-state.json"
    units = read_file(ws, adapter_for(relpath), relpath, Options(5.0, "git")).units or []
    assert units
    results = []
    for inline in (True, False):
        runner = Runner(load(), context_factory=git_context, on_exit=close_views, inline=inline)
        try:
            assert runner.inline is inline
            results.append([runner.run(ws, u, answer(ws, u, Options(5.0, "git")).envelope)
                            for u in units])  # fmt: skip
        finally:
            runner.close()
    assert results[0] == results[1]
    assert any(results[0])


class TestCodes:
    """Built-in codes are read without importing the detectors."""

    def test_each_built_in_takes_its_codes_from_the_table(self) -> None:
        assert {d.name: tuple(d.codes) for d in load()} == CODES  # type: ignore[attr-defined]

    def test_loading_for_some_codes_imports_only_their_detectors(self) -> None:
        probe = (
            "import sys\n"
            "from storyd.detectors import load\n"
            "found = load(codes=frozenset({'unrecorded'}))\n"
            "print([d.name for d in found])\n"
            "print(sorted(m for m in sys.modules if m.startswith('storyd.detectors.')))\n"
        )
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              timeout=60, check=False, env=dict(os.environ))  # fmt: skip
        assert done.returncode == 0, done.stderr
        names, modules = done.stdout.splitlines()
        assert names == "['unrecorded-commit']"
        for other in ("history", "staleness", "mentions", "task_order"):
            assert f"storyd.detectors.{other}'" not in modules, modules
