"""The detectors' owner thread: runs every detector for one unit, each within its time
limit, on one thread that owns the git views.

GitPython objects are not thread-safe, so every git view lives on the runner's one
worker thread. When a detector overruns its time limit, that thread is abandoned and
a fresh one (with fresh views) takes over; the hung detector is benched until its call
returns, and reported as an error finding meanwhile. A detector that raises, or returns
something other than a list of Finding, becomes an error finding too.
"""

from __future__ import annotations

import threading

from storyd.core import storytime
from storyd.core.model import Finding, Unit
from storyd.core.worker import QueueWorker
from storyd.detectors import DEFAULT_TIME_LIMIT, Context, unit_context

TYPE_CHECKING = False  # annotations only: no `typing` on a hook's direct path
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from storyd.detectors.protocol import Detector

__all__ = ["DetectorThread", "Runner"]


class _Job:
    __slots__ = ("done", "func", "result")

    def __init__(self, func: Callable[[], object]) -> None:
        self.func = func
        self.done = threading.Event()
        self.result: object = None


def _do(job: _Job) -> None:
    try:
        job.result = job.func()
    except BaseException as exc:  # reported by the runner as a finding
        job.result = exc
    job.done.set()


class DetectorThread(QueueWorker[_Job]):
    """The owner thread of the git views: runs jobs one at a time."""

    def __init__(self, on_exit: Callable[[dict[str, object]], None] | None) -> None:
        super().__init__("detectors", _do)
        self.local: dict[str, object] = {}  # per-thread state (git views), never shared
        self.on_exit = on_exit

    def run(self) -> None:
        super().run()
        if self.on_exit is not None:
            self.on_exit(self.local)  # e.g. end the git views' cat-file processes


class _Overrun(TimeoutError):
    """A job that outlived its time limit; its worker thread was abandoned."""

    def __init__(self, job: _Job) -> None:
        super().__init__("time limit exceeded")
        self.job = job


class Runner:
    """Runs the detectors for one unit on the owner thread, each within its time limit.

    One Runner serves several threads (the refresher and the read pool). They take turns:
    a thread holds `_turn` for a whole unit, so the worker, the bench and the time limits
    have one owner at a time, and a job's limit starts when the job starts, never while
    it waits behind another thread's unit.
    """

    def __init__(
        self,
        detectors: Iterable[Detector],
        options: dict[str, dict[str, object]] | None = None,
        *,
        time_limit: float = DEFAULT_TIME_LIMIT,
        context_factory: Callable[
            [dict[str, object], str, Unit, Mapping[str, object] | None, str], Context
        ]
        | None = None,
        on_exit: Callable[[dict[str, object]], None] | None = None,
    ) -> None:
        self.detectors = list(detectors)
        self.options = options or {}
        self.time_limit = time_limit
        self.context_factory = context_factory or _plain_context
        self.on_exit = on_exit
        self._turn = threading.RLock()  # guards _worker and _benched
        self._benched: dict[str, _Job] = {}  # detector name -> its job still running
        self._worker = DetectorThread(on_exit)
        self._worker.start()

    def close(self) -> None:
        """Stop the owner thread."""
        with self._turn:
            worker = self._worker
            worker.stop()
        worker.join(timeout=self.time_limit)

    def submit(
        self, func: Callable[[dict[str, object]], object], timeout: float | None = None
    ) -> object:
        """Run `func(thread_state)` on the owner thread and return its result (or raise).

        Raises TimeoutError (an `_Overrun` carrying the job) when it outlives the limit;
        the limit counts from the moment this thread's turn starts, and the worker is idle
        then, so the job starts at once.
        """
        with self._turn:
            worker = self._worker
            job = _Job(lambda: func(worker.local))
            worker.put(job)
            if not job.done.wait(self.time_limit if timeout is None else timeout):
                self._worker.stop()  # it exits when (if) its stuck job returns
                self._worker = DetectorThread(self.on_exit)
                self._worker.start()
                raise _Overrun(job)
        if isinstance(job.result, BaseException):
            raise job.result
        return job.result

    def run(
        self,
        workspace: str,
        unit: Unit,
        envelope: Mapping[str, object] | None,
        staleness: str = storytime.DEFAULT_MODE,
    ) -> tuple[Finding, ...]:
        """Every detector's findings for one unit; failures become error findings."""
        with self._turn:
            return tuple(self._run(workspace, unit, envelope, staleness))

    def _run(
        self, workspace: str, unit: Unit, envelope: Mapping[str, object] | None, staleness: str
    ) -> list[Finding]:
        findings: list[Finding] = []
        for detector in self.detectors:
            name = detector.name
            stuck = self._benched.get(name)
            if stuck is not None:
                if not stuck.done.is_set():
                    findings.append(
                        _failure(name, f"still running after {self.time_limit:g} s; skipped")
                    )
                    continue
                del self._benched[name]
            options = self.options.get(name, {})

            def call(
                local: dict[str, object], d: Detector = detector, o: dict[str, object] = options
            ) -> object:
                context = self.context_factory(local, workspace, unit, envelope, staleness)
                context.options = o
                return d.check(unit, context)

            try:
                result = self.submit(call)
            except _Overrun as overrun:
                self._benched[name] = overrun.job
                findings.append(_failure(name, f"exceeded its {self.time_limit:g} s time limit"))
                continue
            except Exception as exc:
                findings.append(_failure(name, f"raised {type(exc).__name__}: {exc}"))
                continue
            findings.extend(_checked(name, result))
        return findings


def _plain_context(
    local: dict[str, object],
    workspace: str,
    unit: Unit,
    envelope: Mapping[str, object] | None,
    staleness: str,
) -> Context:
    return unit_context(workspace, unit, envelope, staleness)


def _failure(name: str, what: str) -> Finding:
    return Finding(name, "detector-failed", "error", f"detector {name} {what}")


def _checked(name: str, result: object) -> list[Finding]:
    if not isinstance(result, list | tuple) or not all(isinstance(f, Finding) for f in result):
        return [_failure(name, "returned something other than a list of Finding")]
    return list(result)
