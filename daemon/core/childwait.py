"""Wait, with a deadline, for one of our children to exit: by what the running system
offers, chosen at each call, never by a build-time guess.

    await_exit(pid, timeout)  return once `pid` has exited; TimeoutError after `timeout`
                              seconds. None: the child is left to the caller to reap;
                              an int: it had to be reaped here (the waitpid status)
    methods()                 the ways this system offers, best first

The ways, best first (docs/platform-notes.md):

    pidfd    os.pidfd_open and select (Linux 5.3+): one descriptor, no polling
    kqueue   select.kqueue with KQ_FILTER_PROC / NOTE_EXIT (macOS, the BSDs)
    waitid   os.waitid(WEXITED | WNOHANG | WNOWAIT) every 2 ms (Python 3.13 on macOS)
    poll     os.waitpid(WNOHANG) every 2 ms: reaps, so the status is handed back

A way the system lists but refuses (pidfd_open's ENOSYS in an old kernel or a seccomp
sandbox, a kqueue that cannot be made) gives way to the next. Imports only built-in
modules: it is on a hook's path when git is asked.
"""

from __future__ import annotations

import errno
import os
import select
import time

__all__ = ["await_exit", "methods"]

_POLL_EVERY = 0.002  # seconds between two looks of the polling ways


class _Unsupported(Exception):
    """This way is listed but refused here: try the next."""


def methods() -> list[str]:
    """The ways to wait this system offers, best first ("poll" is always there)."""
    found = []
    if hasattr(os, "pidfd_open"):
        found.append("pidfd")
    if hasattr(select, "kqueue") and hasattr(select, "KQ_FILTER_PROC"):
        found.append("kqueue")
    if hasattr(os, "waitid") and hasattr(os, "WNOWAIT"):
        found.append("waitid")
    found.append("poll")
    return found


def await_exit(pid: int, timeout: float) -> int | None:
    """Return once our child `pid` has exited (TimeoutError after `timeout` seconds).

    None when the child is left unreaped for the caller; the waitpid status when the
    only way left was to reap it. A child reaped elsewhere (SIGCHLD ignored) counts as
    exited (None: the caller's waitpid then says ChildProcessError)."""
    deadline = time.monotonic() + max(0.0, timeout)
    for way in methods():
        try:
            return _WAYS[way](pid, deadline)
        except _Unsupported:
            continue
    raise AssertionError("poll is always supported")  # pragma: no cover


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _by_pidfd(pid: int, deadline: float) -> int | None:
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return None  # reaped elsewhere: nothing to wait for
    except OSError as exc:
        raise _Unsupported from exc
    try:
        ready, _, _ = select.select([handle], [], [], _left(deadline))
    finally:
        os.close(handle)
    if not ready:
        raise TimeoutError
    return None


def _by_kqueue(pid: int, deadline: float) -> int | None:
    kq = vars(select)  # what this system's select offers (Linux's has no kqueue)
    try:
        queue = kq["kqueue"]()
    except OSError as exc:
        raise _Unsupported from exc
    try:
        event = kq["kevent"](
            pid,
            filter=kq["KQ_FILTER_PROC"],
            flags=kq["KQ_EV_ADD"] | kq["KQ_EV_ONESHOT"],
            fflags=kq["KQ_NOTE_EXIT"],
        )
        try:  # no event asked for: a refused registration raises here, not as an event
            queue.control([event], 0, 0)
        except ProcessLookupError:
            return None  # exited before the registration (a zombie: ESRCH on macOS)
        except OSError as exc:
            raise _Unsupported from exc
        if not queue.control(None, 1, _left(deadline)):
            raise TimeoutError
        return None
    finally:
        queue.close()


def _by_waitid(pid: int, deadline: float) -> int | None:
    flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
    while True:
        try:
            if os.waitid(os.P_PID, pid, flags) is not None:
                return None
        except ChildProcessError:
            return None
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            raise _Unsupported from exc
        _pause(deadline)


def _by_poll(pid: int, deadline: float) -> int | None:
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if done:
            return status
        _pause(deadline)


def _pause(deadline: float) -> None:
    """Wait a little before the next look; TimeoutError once the deadline has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    select.select([], [], [], min(_POLL_EVERY, left))


_WAYS = {"pidfd": _by_pidfd, "kqueue": _by_kqueue, "waitid": _by_waitid, "poll": _by_poll}
