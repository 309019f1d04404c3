"""The detector plugin API: check each unit against what git (or anything else) says.

A detector is any object with a `name` and `check(story, context) -> list[Finding]`.
Detectors are found through the entry-point group `storyd.detectors`; the built-ins
register there too, exactly as a third-party plugin would (see docs/detectors.md).

    Detector (Protocol)          name, check(story, context)
    Context                      the workspace, this detector's options, the git view
    load(config) -> [Detector]   entry points, validated, filtered by `enabled`
    Runner                       runs them on one owner thread with a time limit; a
                                 detector that raises or hangs becomes an error finding

GitPython objects are not thread-safe, so every git view lives on the runner's one
worker thread. When a detector overruns its time limit, that thread is abandoned and
a fresh one (with fresh views) takes over; the hung detector is benched until its call
returns, and reported as an error finding meanwhile.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from daemon import storytime
from daemon.errors import SetupError
from daemon.model import OWN_DETECTORS, Finding, Unit

if TYPE_CHECKING:
    from detectors.gitview import GitView

__all__ = [
    "ENTRY_POINT_GROUP",
    "RESERVED_NAMES",
    "Context",
    "Detector",
    "DetectorError",
    "Runner",
    "load",
    "unit_context",
]

ENTRY_POINT_GROUP = "storyd.detectors"
RESERVED_NAMES = OWN_DETECTORS  # a plugin may not take these names (daemon/model.py)
DEFAULT_TIME_LIMIT = 5.0


class DetectorError(SetupError):
    """A detector plugin that cannot be loaded or is not a detector."""


@runtime_checkable
class Detector(Protocol):
    """Checks one unit; returns findings (an empty list when all is well)."""

    name: str

    def check(self, story: Unit, context: Context) -> list[Finding]:
        """Findings about `story`; may use `context.git`, never the socket or the cache."""
        ...


class Context:
    """What a detector may look at for one unit."""

    __slots__ = ("envelope", "git", "options", "staleness", "tip", "workspace")

    def __init__(
        self,
        workspace: str,
        options: dict[str, object],
        git: GitView | None,
        envelope: Mapping[str, object] | None,
        *,
        tip: str | None = None,
        staleness: str = storytime.DEFAULT_MODE,
    ) -> None:
        self.workspace = workspace
        self.options = options
        self.git = git
        self.envelope = envelope
        self.tip = tip
        self.staleness = staleness


def _validate(candidate: object, origin: str, entry_name: str) -> Detector:
    name = getattr(candidate, "name", None)
    if not isinstance(name, str) or not name:
        msg = f"detector plugin {origin} has no `name` string"
        raise DetectorError(msg)
    for what, taken in (("entry-point name", entry_name), ("name", name)):
        if taken in RESERVED_NAMES:
            msg = (
                f"detector plugin {origin}: the {what} {taken!r} is reserved for storyd's "
                f"own findings ({', '.join(sorted(RESERVED_NAMES))}); choose another"
            )
            raise DetectorError(msg)
    if not callable(getattr(candidate, "check", None)):
        msg = f"detector plugin {origin} ({name}) has no callable `check(story, context)`"
        raise DetectorError(msg)
    return candidate  # type: ignore[return-value]


def load(settings: dict[str, dict[str, object]] | None = None) -> list[Detector]:
    """Every detector from the entry-point group, minus those configured `enabled = false`.

    A plugin that fails to import or is not a detector raises DetectorError naming it.
    """
    settings = settings or {}
    found: list[Detector] = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if settings.get(ep.name, {}).get("enabled", True) is False:
            continue
        try:
            loaded = ep.load()
        except Exception as exc:
            why = f"{type(exc).__name__}: {exc}"
            msg = f"detector plugin {ep.name} ({ep.value}) failed to load: {why}"
            raise DetectorError(msg) from exc
        found.append(_validate(loaded, f"{ep.name} ({ep.value})", ep.name))
    return found


class _Job:
    __slots__ = ("done", "func", "result")

    def __init__(self, func: Callable[[], object]) -> None:
        self.func = func
        self.done = threading.Event()
        self.result: object = None


class _Worker(threading.Thread):
    """The owner thread of the git views: runs jobs one at a time."""

    def __init__(self, on_exit: Callable[[dict[str, object]], None] | None) -> None:
        super().__init__(name="storyd-detectors", daemon=True)
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.local: dict[str, object] = {}  # per-thread state (git views), never shared
        self.on_exit = on_exit

    def run(self) -> None:
        while (job := self.jobs.get()) is not None:
            try:
                job.result = job.func()
            except BaseException as exc:  # reported by the runner as a finding
                job.result = exc
            job.done.set()
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
        self._worker = _Worker(on_exit)
        self._worker.start()

    def close(self) -> None:
        """Stop the owner thread."""
        with self._turn:
            self._worker.jobs.put(None)
            worker = self._worker
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
            worker.jobs.put(job)
            if not job.done.wait(self.time_limit if timeout is None else timeout):
                self._worker.jobs.put(None)  # it exits when (if) its stuck job returns
                self._worker = _Worker(self.on_exit)
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


def unit_context(
    workspace: str,
    unit: Unit,
    envelope: Mapping[str, object] | None,
    staleness: str,
    git: GitView | None = None,
) -> Context:
    """A unit's context: the unit's own branch as the tip when its format names one."""
    return Context(workspace, {}, git, envelope, tip=unit.branch, staleness=staleness)


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
