"""The detectors' runner: every detector for one unit, each within its time limit, on
the one thread that owns the git views.

    threaded (the default: the daemon, several callers)  one owner thread
        (detectors/owner.py); when a detector overruns its limit, that thread is
        abandoned and a fresh one (with fresh views) takes over; the hung detector is
        benched until its call returns, and reported as an error finding meanwhile
    inline (a one-shot direct scan on the main thread: a hook without a daemon,
        `storyd status`)  the calling thread runs each detector under a SIGALRM limit
        (detectors/alarm.py): no thread to start, no hand-over per detector (30 for the
        demo workspace's 6 units); an overrun interrupts the call, ends the views
        (fresh ones follow) and benches the detector for the rest of the run, reported
        in the same words

A detector that raises, or returns something other than a list of Finding, becomes an
error finding too.
"""

from __future__ import annotations

import _thread

from storyd.core import storytime
from storyd.core.model import Finding, Unit
from storyd.detectors import DEFAULT_TIME_LIMIT, ONE_SHOT_KEY, Context, unit_context

TYPE_CHECKING = False  # annotations only: no `typing` on a hook's direct path
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from storyd.detectors.owner import DetectorThread, Job
    from storyd.detectors.protocol import Detector

__all__ = ["Runner"]


class _Interrupted:
    """An inline call the alarm ended: benched for the rest of the run."""

    __slots__ = ()

    def running(self) -> bool:
        return True


class _Overrun(TimeoutError):
    """A job that outlived its time limit; its worker thread was abandoned (or, inline,
    the call was interrupted)."""

    def __init__(self, job: Job | _Interrupted) -> None:
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
        inline: bool = False,
    ) -> None:
        self.detectors = list(detectors)
        self.options = options or {}
        self.time_limit = time_limit
        self.context_factory = context_factory or _plain_context
        self.on_exit = on_exit
        self._turn = _thread.RLock()  # guards _worker and _benched
        self._benched: dict[str, Job | _Interrupted] = {}  # detector -> its call still running
        self._local: dict[str, object] = {}  # inline: this thread's state (git views)
        self._owner = _thread.get_ident()
        self._worker: DetectorThread | None = None
        if inline:
            from storyd.detectors import alarm

            inline = alarm.usable()
        if not inline:
            self._worker = _started(on_exit)
        else:
            self._local[ONE_SHOT_KEY] = True  # a one-shot scan: see GitView's walk_limit

    @property
    def inline(self) -> bool:
        """Whether the detectors run on the calling thread (under an alarm)."""
        return self._worker is None

    def close(self) -> None:
        """Stop the owner thread (inline: end the views)."""
        with self._turn:
            worker = self._worker
            if worker is None:
                self._end_local()
                return
            worker.stop()
        worker.join(timeout=self.time_limit)

    def _end_local(self) -> None:
        local, self._local = self._local, {ONE_SHOT_KEY: True}
        if self.on_exit is not None:
            self.on_exit(local)

    def submit(
        self, func: Callable[[dict[str, object]], object], timeout: float | None = None
    ) -> object:
        """Run `func(thread_state)` on the owner thread and return its result (or raise).

        Raises TimeoutError (an `_Overrun` carrying the job) when it outlives the limit;
        the limit counts from the moment this thread's turn starts, and the worker is idle
        then, so the job starts at once.
        """
        limit = self.time_limit if timeout is None else timeout
        with self._turn:
            worker = self._worker
            if worker is None:
                return self._inline(func, limit)
            from storyd.detectors.owner import Job

            job = Job(lambda: func(worker.local))
            worker.put(job)
            if not job.done.wait(limit):
                worker.stop()  # it exits when (if) its stuck job returns
                self._worker = _started(self.on_exit)
                raise _Overrun(job)
        if isinstance(job.result, BaseException):
            raise job.result
        return job.result

    def _inline(self, func: Callable[[dict[str, object]], object], limit: float) -> object:
        """func(views) on this thread within `limit` (the Runner's own thread only)."""
        from storyd.detectors import alarm

        if _thread.get_ident() != self._owner:
            msg = "an inline Runner was used outside the thread that made it"
            raise RuntimeError(msg)
        try:
            return alarm.within(limit, lambda: func(self._local))
        except alarm.TimeUp:
            self._end_local()  # views interrupted mid-answer: fresh ones follow
            raise _Overrun(_Interrupted()) from None

    def _prepare(self, workspace: str, unit: Unit, envelope: Mapping[str, object] | None,
                 staleness: str) -> None:  # fmt: skip
        """The optional prepare step, in one job before any check: a detector with a
        `prepare(unit, context)` starts the git processes its check will read (they run
        beside the other detectors' git: 2 cores). It never changes an answer; a failure
        or an overrun here is left to the check to meet and report."""
        ready = [d for d in self.detectors
                 if hasattr(d, "prepare") and d.name not in self._benched]  # fmt: skip
        if not ready:
            return
        try:  # noqa: SIM105 (contextlib imports collections, functools...: a hook's start)
            self.submit(lambda local: _prepare_all(self, local, workspace, unit, envelope,
                                                   staleness, ready))  # fmt: skip
        except Exception:  # an overrun (its worker replaced) or a failure: the checks tell
            pass

    def run(
        self,
        workspace: str,
        unit: Unit,
        envelope: Mapping[str, object] | None,
        staleness: str = storytime.DEFAULT_MODE,
    ) -> tuple[Finding, ...]:
        """Every detector's findings for one unit, each cause once (storyd.core.causes);
        failures become error findings."""
        with self._turn:
            found = tuple(self._run(workspace, unit, envelope, staleness))
        if len(found) < 2:
            return found
        from storyd.core.causes import one_line_each  # one cause, one line

        return one_line_each(found)

    def _run(
        self, workspace: str, unit: Unit, envelope: Mapping[str, object] | None, staleness: str
    ) -> list[Finding]:
        findings: list[Finding] = []
        self._prepare(workspace, unit, envelope, staleness)
        for detector in self.detectors:
            name = detector.name
            stuck = self._benched.get(name)
            if stuck is not None:
                if stuck.running():
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


def _prepare_all(self_: Runner, local: dict[str, object], workspace: str, unit: Unit,
                 envelope: Mapping[str, object] | None, staleness: str,
                 ready: list[Detector]) -> None:  # fmt: skip
    """Each detector's `prepare(unit, context)`: git work started now, read by its check."""
    for detector in ready:
        context = self_.context_factory(local, workspace, unit, envelope, staleness)
        context.options = self_.options.get(detector.name, {})
        try:  # noqa: SIM105 (contextlib imports collections, functools...: a hook's start)
            detector.prepare(unit, context)  # type: ignore[attr-defined]
        except Exception:  # only a head start: its check meets the same failure and says so
            pass


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


def _started(on_exit: Callable[[dict[str, object]], None] | None) -> DetectorThread:
    """A new owner thread, running."""
    from storyd.detectors.owner import DetectorThread

    worker = DetectorThread(on_exit)
    worker.start()
    return worker
