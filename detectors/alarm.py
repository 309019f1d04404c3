"""A time limit for one call on the main thread, by SIGALRM: what lets a one-shot direct
scan (a hook without a daemon, `storyd status --direct`) run the detectors inline, with
no owner thread to start and no hand-over per detector.

    usable()             whether this thread may set the alarm (the main thread only)
    within(limit, func)  func(), or TimeUp (a TimeoutError) once `limit` seconds have passed

The alarm interrupts a blocking call (a read from git, a sleep, a lock's wait): the
handler raises, the call unwinds through its `finally` blocks. `_signal`, not
`signal`, whose enum import costs a hook's start. The previous handler is put back
after each call.
"""

from __future__ import annotations

TYPE_CHECKING = False  # annotations only: no `typing` on a hook's direct path
if TYPE_CHECKING:
    import signal as _signal  # the same functions, typed (`_signal` has no stubs)
    from collections.abc import Callable
else:
    import _signal

__all__ = ["REPEAT", "TimeUp", "usable", "within"]

REPEAT = 0.1
"""Seconds between the alarm's repeats once the limit has passed."""


class TimeUp(TimeoutError):
    """The call did not return within its limit (and was interrupted)."""


class _Expired(BaseException):
    """The alarm went off: raised inside the call, past any `except Exception`."""


class _Call:
    """One call's alarm: whether it went off, and whether it may still raise."""

    __slots__ = ("armed", "expired")

    def __init__(self) -> None:
        self.armed = False  # raises only while the call runs, not once it is disarmed
        self.expired = False  # set even when the call swallowed what was raised

    def expire(self, signum: int, frame: object) -> None:
        self.expired = True
        if self.armed:
            raise _Expired

    def disarm(self) -> None:
        """No more raises, the timer off: retried if the alarm lands in the middle (once
        `armed` is clear it no longer raises)."""
        while True:
            try:
                self.armed = False
                _signal.setitimer(_signal.ITIMER_REAL, 0)
                return
            except _Expired:
                continue


def usable() -> bool:
    """Whether `within` can run here: the main thread (only it may set a signal's
    handler), with SIGALRM's default handler (not ignored, as a parent may leave it),
    not blocked, and no timer of this process running."""
    try:
        if _signal.getsignal(_signal.SIGALRM) != _signal.SIG_DFL:
            return False
        if _signal.SIGALRM in _signal.pthread_sigmask(_signal.SIG_BLOCK, []):
            return False  # blocked (a mask a parent passed on): it would never go off
        _signal.signal(_signal.SIGALRM, _signal.SIG_DFL)  # ValueError off the main thread
        return bool(_signal.getitimer(_signal.ITIMER_REAL) == (0.0, 0.0))
    except (AttributeError, OSError, ValueError):
        return False


def within(limit: float, func: Callable[[], object]) -> object:
    """func()'s result, or TimeUp when it has not returned within `limit` s (call
    it where `usable()` said yes). The alarm repeats every REPEAT s past the limit, so
    a call that catches everything (a bare `except:` around a blocking read) is
    interrupted until it gives up, and an overrun it swallowed is still an overrun."""
    call = _Call()
    previous = _signal.signal(_signal.SIGALRM, call.expire)
    result: object = None
    try:
        try:
            call.armed = True
            _signal.setitimer(_signal.ITIMER_REAL, max(limit, 1e-6), REPEAT)
            result = func()
        finally:
            call.disarm()
    except _Expired:
        pass  # call.expired is set: reported below
    finally:
        _signal.signal(_signal.SIGALRM, previous)
    if call.expired:
        msg = f"no return within {limit:g} s"
        raise TimeUp(msg) from None
    return result
