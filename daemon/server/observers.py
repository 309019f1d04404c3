"""Which watchdog observer watches, and what its events can be trusted for.

    new_observer()     watchdog's observer for this system: inotify on Linux, FSEvents on
                       macOS (its emitter reading the "events were lost" flags, which
                       watchdog drops: `rescan_flagged`), a NoObserver when the kernel
                       refuses an inotify instance
    is_inotify(obs)    whether it is inotify's (else the watcher polls every workspace:
                       kqueue and polling observers coalesce, FSEvents may drop)
    NoObserver         stands for an observer while there is no inotify instance
    LIMIT_ERRORS       the errnos of inotify's limits
"""

from __future__ import annotations

import errno
from collections.abc import Callable

from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch

__all__ = ["LIMIT_ERRORS", "NoObserver", "is_inotify", "new_observer", "rescan_flagged"]

LIMIT_ERRORS = frozenset((errno.ENOSPC, errno.EMFILE, errno.ENFILE))  # inotify limits


class NoObserver:
    """Stands for watchdog's observer when the kernel gives no inotify instance
    (max_user_instances): nothing is watched, everything is polled (Watcher.polled), and
    the next `_schedule` after the retry delay tries for an instance again."""

    daemon = True

    def start(self) -> None:
        """Nothing to start."""

    def stop(self) -> None:
        """Nothing to stop."""

    def join(self, timeout: float | None = None) -> None:
        """Nothing to wait for."""

    def unschedule(self, watch: object) -> None:
        """Nothing is scheduled."""

    def schedule(self, *_args: object, **_kwargs: object) -> ObservedWatch:
        """Nothing can be: there is no inotify instance."""
        raise OSError(errno.EMFILE, "inotify instance limit reached")


def is_inotify(observer: BaseObserver | NoObserver) -> bool:
    """Whether the observer is watchdog's inotify one (a NoObserver will be)."""
    return isinstance(observer, NoObserver) or type(observer).__module__.endswith(".inotify")


# kFSEventStreamEventFlag MustScanSubDirs | UserDropped | KernelDropped (FSEvents.h)
_FSEVENTS_LOST = 0x1 | 0x2 | 0x4


def rescan_flagged(events: list[object]) -> bool:
    """Whether FSEvents says events were lost (MustScanSubDirs, UserDropped,
    KernelDropped) in a batch of watchdog's native events (their `flags`, or the
    `is_*` properties): watchdog's emitter drops these flags."""
    return any(
        int(getattr(e, "flags", 0) or 0) & _FSEVENTS_LOST
        or getattr(e, "is_must_scan_subdirs", False)
        or getattr(e, "is_user_dropped", False)
        or getattr(e, "is_kernel_dropped", False)
        for e in events
    )


def _fsevents_observer(on_lost: Callable[[], None]) -> BaseObserver | None:
    """watchdog's FSEvents observer, its emitter reading the "events lost" flags
    (macOS); None where FSEvents is not there."""
    try:
        from watchdog.observers.fsevents import FSEventsEmitter, FSEventsObserver
    except Exception:  # not macOS: its extension module is absent (ImportError or worse)
        return None

    class _Emitter(FSEventsEmitter):
        def queue_events(self, timeout: float, events: list[object]) -> None:  # type: ignore[override]
            if rescan_flagged(events):
                on_lost()
            super().queue_events(timeout, events)

    observer: BaseObserver = FSEventsObserver()
    observer._emitter_class = _Emitter  # the class schedule() makes its emitters of
    return observer


def new_observer(
    *, raising: bool = False, on_lost: Callable[[], None] | None = None
) -> BaseObserver | NoObserver:
    """watchdog's observer for this system (inotify on Linux, FSEvents on macOS); a
    NoObserver when the kernel refuses an inotify instance (or OSError, with
    `raising`: the caller says it once)."""
    if on_lost is not None and getattr(Observer, "__name__", "") == "FSEventsObserver":
        flagged = _fsevents_observer(on_lost)
        if flagged is not None:
            flagged.daemon = True
            return flagged
    try:
        observer = Observer()
    except OSError as exc:
        if raising or exc.errno not in LIMIT_ERRORS:
            raise
        return NoObserver()
    observer.daemon = True
    return observer
