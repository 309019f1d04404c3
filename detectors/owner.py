"""The detectors' owner thread: runs jobs one at a time and owns the git views made on
it (the views' objects and pipes are not thread-safe). Imported only by a
threaded Runner (detectors/runner.py): an inline one starts no thread.
"""

from __future__ import annotations

import threading

from storyd.core.worker import QueueWorker

TYPE_CHECKING = False  # annotations only: no `typing` on a hook's direct path
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["DetectorThread", "Job"]


class Job:
    """One call on the owner thread: its function, then its result (or exception)."""

    __slots__ = ("done", "func", "result")

    def __init__(self, func: Callable[[], object]) -> None:
        self.func = func
        self.done = threading.Event()
        self.result: object = None

    def running(self) -> bool:
        """Whether the call has not returned yet (a benched detector's)."""
        return not self.done.is_set()


def _do(job: Job) -> None:
    try:
        job.result = job.func()
    except BaseException as exc:  # reported by the runner as a finding
        job.result = exc
    job.done.set()


class DetectorThread(QueueWorker[Job]):
    """The owner thread of the git views: runs jobs one at a time."""

    def __init__(self, on_exit: Callable[[dict[str, object]], None] | None) -> None:
        super().__init__("detectors", _do)
        self.local: dict[str, object] = {}  # per-thread state (git views), never shared
        self.on_exit = on_exit

    def run(self) -> None:
        super().run()
        if self.on_exit is not None:
            self.on_exit(self.local)  # e.g. end the git views' cat-file processes
