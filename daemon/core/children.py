"""No child outlives the storyd process that started it: one guard process per process.

Every child storyd starts (git, the history reader, notify-send, a drift hook) joins
one process group whose leader is a guard: `/bin/sh`, started with the first child,
blocked reading a pipe whose only writer is this process. However this process ends
(a return, an exception, SIGTERM, SIGKILL, os._exit) the kernel closes that pipe;
the guard reads end of file and SIGKILLs its whole group, every child still running
and itself. It costs one small process and ~0.3 ms at the first spawn (idle machine;
~1 ms on a loaded one); joining the group is one setpgid in posix_spawn, no exec of
its own (docs/platform-notes.md says why not PR_SET_PDEATHSIG, `setpriv --pdeathsig`
or a preexec_fn).

    spawn(path, argv, env, file_actions)  os.posix_spawn, the child in the guard's group
    group()       the guard's process group, for subprocess's `process_group=` (None:
                  no guard could start; the child then starts as before, unguarded)
    kill_all()    SIGKILL every child now (their owners reap them); the next spawn
                  starts a new guard
    release()     kill_all, then reap what is left: the last word of an interpreter's
                  exit (atexit). `storyd resume` and `storyd hook` end with os._exit
                  (bin/storyd): their guard then kills what is left, at no cost to them.

Imports only built-in modules (`os`, `_thread`, `atexit`, `time`): it is on the hook's
and `storyd resume`'s paths when they ask git.
"""

from __future__ import annotations

import _thread
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["group", "kill_all", "release", "spawn"]

SHELL = "/bin/sh"
# the guard: deaf to the terminal's and a stray kill's signals, it waits for the end of
# its stdin (this process gone, however it went) and then kills its group, itself too
GUARD = "trap '' HUP INT QUIT TERM PIPE; read line; kill -9 0"
_REAP_FOR = 1.0  # seconds release() waits for killed children to be reaped


class _Guard:
    """This process's guard: its pid (= its group's id), the pipe's writing end, and
    the process that started it (a forked child must start its own)."""

    __slots__ = ("failed", "owner", "pid", "registered", "writer")

    def __init__(self) -> None:
        self.pid = 0
        self.writer = -1
        self.owner = 0
        self.failed = 0  # the pid of a process whose guard would not start
        self.registered = False  # release() is an atexit function (a fork inherits it)


_GUARD = _Guard()
_LOCK = _thread.allocate_lock()


def group() -> int | None:
    """The guard's process group, starting the guard when there is none (or it died)."""
    guard = _GUARD
    me = os.getpid()
    if guard.owner == me and guard.pid and _alive(guard.pid):
        return guard.pid
    with _LOCK:
        if guard.owner == me and guard.pid and _alive(guard.pid):
            return guard.pid
        if guard.failed == me:
            return None
        _forget(guard, me)
        return _start(guard, me)


def spawn(path: str, argv: list[str], env: Mapping[str, str],
          file_actions: list[tuple[int, int, int]]) -> int:  # fmt: skip
    """os.posix_spawn(path, argv, env, file_actions=...) into the guard's group; its pid."""
    pgid = group()
    if pgid is None:
        return os.posix_spawn(path, argv, env, file_actions=file_actions)
    try:
        return os.posix_spawn(path, argv, env, file_actions=file_actions, setpgroup=pgid)
    except PermissionError:  # the group ended between the look and the spawn: once more
        pgid = group()
        if pgid is None:
            return os.posix_spawn(path, argv, env, file_actions=file_actions)
        return os.posix_spawn(path, argv, env, file_actions=file_actions, setpgroup=pgid)


def kill_all() -> int:
    """SIGKILL every child started so far, and the guard (reaped here); the group's id,
    or 0 when there was none. Each child is left to its owner to reap."""
    guard = _GUARD
    with _LOCK:
        if guard.owner != os.getpid() or not guard.pid:
            return 0
        pgid = guard.pid
        _forget(guard, 0)
    try:  # noqa: SIM105 (contextlib: imports on a hook's path)
        os.killpg(pgid, 9)
    except OSError:
        pass
    try:  # noqa: SIM105
        os.waitpid(pgid, 0)
    except ChildProcessError:
        pass
    return pgid


def release() -> None:
    """kill_all, then reap every child of this process left in the guard's group (for
    ~1 s at most: a child in an uninterruptible wait is left to init)."""
    import time

    pgid = kill_all()
    if not pgid:
        return
    deadline = time.monotonic() + _REAP_FOR
    while True:
        try:
            pid, _ = os.waitpid(-pgid, os.WNOHANG)
        except ChildProcessError:  # none left
            return
        if not pid:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.001)


def _alive(pid: int) -> bool:
    """Whether our child `pid` still runs (a dead one is reaped here)."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == 0
    except ChildProcessError:
        return False


def _forget(guard: _Guard, me: int) -> None:
    """Drop the guard this process knew (closing its pipe ends it, if it still runs)."""
    if guard.writer >= 0:
        try:  # noqa: SIM105
            os.close(guard.writer)
        except OSError:
            pass
    guard.pid, guard.writer, guard.owner = 0, -1, me


def _start(guard: _Guard, me: int) -> int | None:
    """Start the guard, leader of a new process group; None when it cannot start."""
    reader, writer = os.pipe()  # both close-on-exec: no child but the guard inherits them
    try:
        null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        try:
            actions = [(os.POSIX_SPAWN_DUP2, reader, 0), (os.POSIX_SPAWN_DUP2, null, 1),
                       (os.POSIX_SPAWN_DUP2, null, 2)]  # fmt: skip
            pid = os.posix_spawn(SHELL, ["sh", "-c", GUARD], {"PATH": os.defpath},
                                 file_actions=actions, setpgroup=0)  # fmt: skip
        finally:
            os.close(null)
    except OSError:
        os.close(writer)
        guard.failed = me
        return None
    finally:
        os.close(reader)
    if not guard.registered:
        import atexit

        guard.registered = True
        atexit.register(release)
    guard.pid, guard.writer, guard.owner = pid, writer, me
    return pid
