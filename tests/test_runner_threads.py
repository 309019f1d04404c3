"""The detector Runner shared by several threads (issue 12, defect 1).

The refresher and the read pool both run detectors through one Runner. A job's time
limit must count from the moment the job starts on the owner thread, not from when it
was queued behind other threads' jobs, and the Runner's bookkeeping (the worker, the
benched detectors) must have one owner at a time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from storyd.core.model import Finding, Unit
from storyd.detectors import Context
from storyd.detectors.runner import Runner

pytestmark = pytest.mark.slow


class _Sleeper:
    """A detector that takes `seconds` of real work and finds nothing."""

    def __init__(self, name: str, seconds: float) -> None:
        self.name = name
        self.seconds = seconds

    def check(self, unit: Unit, context: Context) -> list[Finding]:
        time.sleep(self.seconds)  # the detector's own work, not a test wait
        return []


class _Hang:
    """A detector that blocks until released: a hung git call."""

    name = "hang"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.returned = threading.Event()

    def check(self, unit: Unit, context: Context) -> list[Finding]:
        self.release.wait(30)
        self.returned.set()
        return []


UNIT = Unit("epic", "plans/epic-0001/execution-state.json", "story-0001-0001", ())


@pytest.fixture
def make_runner() -> Iterator[list[Runner]]:
    made: list[Runner] = []
    yield made
    for runner in made:
        runner.close()


def _hammer(runner: Runner, threads: int, rounds: int) -> list[Finding]:
    failures: list[Finding] = []
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def work() -> None:
        start.wait(10)
        for _ in range(rounds):
            found = runner.run("/nonexistent-workspace", UNIT, None)
            with lock:
                failures.extend(f for f in found if f.code == "detector-failed")

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(60)
        assert not t.is_alive(), "a runner thread did not finish within 60 s"
    return failures


def test_queued_time_does_not_count_against_the_limit(make_runner: list[Runner]) -> None:
    """Four threads, a 60 ms detector, a 100 ms limit: no detector overruns by itself."""
    runner = Runner([_Sleeper("slow", 0.06), _Sleeper("instant", 0.0)], time_limit=0.1)
    make_runner.append(runner)
    failures = _hammer(runner, threads=4, rounds=5)
    assert failures == [], [f.message for f in failures]


def test_a_hung_detector_is_still_benched_and_reported(make_runner: list[Runner]) -> None:
    """The real overrun still becomes an error finding, then 'still running', then clears."""
    hang = _Hang()
    runner = Runner([hang, _Sleeper("instant", 0.0)], time_limit=0.2)
    make_runner.append(runner)
    first = runner.run("/nonexistent-workspace", UNIT, None)
    assert [(f.detector, f.code) for f in first] == [("hang", "detector-failed")]
    assert "exceeded its 0.2 s time limit" in first[0].message
    second = runner.run("/nonexistent-workspace", UNIT, None)
    assert [f.message for f in second] == ["detector hang still running after 0.2 s; skipped"]
    hang.release.set()  # the hung call returns; the next run finds it done and unbenches it
    deadline = time.monotonic() + 10
    third: tuple[Finding, ...] = second
    while third and time.monotonic() < deadline:
        hang.returned.wait(10)
        third = runner.run("/nonexistent-workspace", UNIT, None)
    assert third == ()


def test_concurrent_runs_with_a_hang_report_once_per_run(make_runner: list[Runner]) -> None:
    """Threads that queue behind a hung detector see 'still running', never a false overrun
    of the instant detector."""
    hang = _Hang()
    runner = Runner([hang, _Sleeper("instant", 0.0)], time_limit=0.2)
    make_runner.append(runner)
    try:
        failures = _hammer(runner, threads=4, rounds=3)
    finally:
        hang.release.set()
    assert failures, "the hung detector must be reported"
    assert all(f.detector == "hang" for f in failures), [f.message for f in failures]
