"""storyd's threads: one small base, so each has a name, a stop sentinel and a join.

    Worker        a named daemon thread; `stop()` says stop and wakes it (`wake`),
                  `close(timeout)` stops it and joins it
    QueueWorker   a Worker fed by a queue, one job at a time; stop is a sentinel
                  queued behind the jobs already there, so they run first

Every thread of the daemon is one of these, each in a module named after it:
server/refresher.py (the cache's only writer), detectors/runner.py (the detectors'
owner thread), server/reconciler.py (auto-apply), server/notify.py (notifications)
and fleet/publisher.py (NATS). docs/design.md counts them; tests/test_house.py holds
the count to it. Threads are daemon threads: a stuck system call in one never keeps
the process alive (server/service.exit_now says which were left).
"""

from __future__ import annotations

import threading
from _queue import SimpleQueue  # queue.SimpleQueue itself, without queue's heapq (a hook's start)

__all__ = ["PREFIX", "QueueWorker", "Worker"]

PREFIX = "storyd-"  # every thread storyd starts is named storyd-<what it does>

TYPE_CHECKING = False  # `typing` costs a hook's direct path start-up time (daemon/core/model.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Generic, TypeVar

    _J = TypeVar("_J")

    class _Jobs(Generic[_J]):
        """What a QueueWorker is generic in: its jobs' type."""

else:
    _J = None

    class _Jobs:
        """`QueueWorker[Job]` at run time without `typing`: the subscript is the class."""

        def __class_getitem__(cls, item: object) -> type:
            return cls


class Worker(threading.Thread):
    """A named daemon thread of storyd's that runs until `stop`: a subclass overrides
    `run` and `wake`, or passes `body` (the loop) and `waker` (what unblocks it)."""

    def __init__(
        self,
        name: str,
        body: Callable[[], None] | None = None,
        waker: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name=PREFIX + name, daemon=True)
        self.stopping = False
        self._body = body
        self._waker = waker

    def run(self) -> None:
        if self._body is not None:
            self._body()

    def should_keep_running(self) -> bool:
        """False once `stop` was called."""
        return not self.stopping

    def stop(self) -> None:
        """Ask the thread to end after what it is doing; does not wait."""
        self.stopping = True
        self.wake()

    def wake(self) -> None:
        """Unblock the thread's wait so it sees `stopping`."""
        if self._waker is not None:
            self._waker()

    def close(self, timeout: float | None = None) -> bool:
        """Stop, then wait up to `timeout` seconds; whether the thread has ended."""
        self.stop()
        if self.is_alive() and self is not threading.current_thread():
            self.join(timeout)
        return not self.is_alive()


class QueueWorker(Worker, _Jobs[_J]):
    """A Worker that runs `handle(job)` for each job put, in order; a job that raises
    is given to `failed` and the thread goes on."""

    _STOP = object()

    def __init__(
        self,
        name: str,
        handle: Callable[[_J], None],
        failed: Callable[[_J, Exception], None] | None = None,
    ) -> None:
        super().__init__(name)
        self.jobs: SimpleQueue[object] = SimpleQueue()
        self.handle = handle
        self.failed = failed

    def put(self, job: _J) -> None:
        """Queue one job."""
        self.jobs.put(job)

    def wake(self) -> None:
        """The stop sentinel, behind the jobs already queued."""
        self.jobs.put(self._STOP)

    def run(self) -> None:
        while (job := self.jobs.get()) is not self._STOP:
            try:
                self.handle(job)  # type: ignore[arg-type]
            except Exception as exc:  # one bad job must never end the thread
                if self.failed is not None:
                    self.failed(job, exc)  # type: ignore[arg-type]
