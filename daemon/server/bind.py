"""The daemon's own socket: its folder made private, one daemon per path, bound 0600.

`bind_socket` takes the single-instance lock (`<socket>.lock`), refuses a path another
daemon answers on (AlreadyRunning, exit 1), replaces a stale socket left by a killed
one, and binds with a umask that leaves the socket its owner's only, under a side name
renamed onto the path once it listens. systemd's socket
(LISTEN_FDS) skips all this: runtime.py takes it from systemd.py instead.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat

from storyd.core.errors import StorydError, UsageError
from storyd.core.paths import check_socket_path, socket_path, socket_path_problem

TYPE_CHECKING = False  # fasteners is imported where the lock is taken (bind_socket)
if TYPE_CHECKING:
    import fasteners

__all__ = ["AlreadyRunning", "Bound", "bind_socket", "take_socket"]


class AlreadyRunning(StorydError):
    """Another daemon answers on this socket."""

    code = 1
    name = "ALREADY_RUNNING"


def _prepare_directory(path: str) -> None:
    """Create the socket's folder 0700, or check that an existing one is ours and private.

    The folder is opened with O_NOFOLLOW and checked and tightened through that
    descriptor (fstat, fchmod), so a folder path planted as a symlink (the /tmp
    fallback is plantable by anyone) is refused rather than followed, and nothing but
    the folder itself is ever chmod-ed. A folder of another user, and a shared sticky
    folder such as /tmp itself, are refused without being touched.
    """
    folder = os.path.dirname(path) or "."
    parent = os.path.dirname(os.path.abspath(folder))
    try:
        os.makedirs(parent, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
    except OSError as exc:
        msg = f"socket folder {folder} cannot be created: {exc.strerror}"
        raise UsageError(msg) from None
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if os.path.islink(folder):
            msg = f"socket folder {folder} is a symlink; refusing to follow it (remove it)"
        else:
            msg = f"socket folder {folder} cannot be opened: {exc.strerror}"
        raise UsageError(msg) from None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid():
            msg = (
                f"socket folder {folder} belongs to uid {st.st_uid}, not to this user "
                f"(uid {os.getuid()}); refusing to use it"
            )
            raise UsageError(msg)
        if st.st_mode & stat.S_ISVTX:
            msg = (
                f"socket folder {folder} is a shared sticky folder; "
                "give the socket a folder of its own"
            )
            raise UsageError(msg)
        if st.st_mode & 0o077:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def _probe(path: str) -> bool:
    """Whether something accepts connections on the socket path."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except OSError:
        return False
    finally:
        probe.close()
    return True


def bind_socket(path: str) -> tuple[socket.socket, fasteners.InterProcessLock, tuple[int, int]]:
    """Take the single-instance lock, refuse a live socket, replace a stale one, bind 0600.
    A path longer than sun_path holds is refused first, in one line (UsageError).
    fasteners is imported here, not above: a socket handed over by systemd or launchd
    takes no lock, and its daemon's early door opens without the import (about 9 ms:
    fasteners imports logging, typing and pathlib)."""
    import fasteners

    check_socket_path(path)
    _prepare_directory(path)
    lock = fasteners.InterProcessLock(path + ".lock")
    if not lock.acquire(blocking=False):
        msg = f"another storyd holds {path}.lock; it serves {path}"
        raise AlreadyRunning(msg)
    try:
        if _probe(path):
            msg = f"a daemon already answers on {path}; not starting a second one"
            raise AlreadyRunning(msg)
        sock, st = _listen_then_appear(path)
    except BaseException:
        lock.release()
        raise
    return sock, lock, (st.st_dev, st.st_ino)


def _listen_then_appear(path: str) -> tuple[socket.socket, os.stat_result]:
    """Bind 0600 under `<path>~`, listen, then rename onto `path` (a stale socket there is
    replaced in the same step): a client that finds the path finds a listener, never the
    ECONNREFUSED of a socket bound but not yet listening. The lock makes the side name
    ours; one left by a daemon killed mid-bind is removed first. A path too long for the
    side name is bound in place."""
    side = path + "~" if socket_path_problem(path + "~") is None else None
    target = side or path
    try:
        if os.path.lexists(target):
            os.unlink(target)  # stale: left by a daemon that was killed
    except OSError as exc:  # a folder there, say
        raise _in_the_way(target, exc) from None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound = False
    try:
        old_umask = os.umask(0o177)
        try:
            sock.bind(target)
            bound = True
        finally:
            os.umask(old_umask)
        os.chmod(target, 0o600)
        sock.listen(512)
        st = os.stat(target)
        if side is not None:
            os.rename(side, path)
    except BaseException as exc:
        sock.close()
        if bound:  # never a name this call did not bind
            with contextlib.suppress(OSError):
                os.unlink(target)
        if isinstance(exc, OSError):
            raise _in_the_way(path if bound else target, exc) from None
        raise
    return sock, st


def _in_the_way(name: str, exc: OSError) -> UsageError:
    """One line for what keeps the socket from its path (a folder there, a full disk)."""
    reason = exc.strerror or str(exc)
    return UsageError(f"cannot bind the socket at {name}: {reason}; remove what is there "
                      "or give another path with --socket")  # fmt: skip


class Bound:
    """The daemon's listening socket: inherited (systemd, launchd) or bound here, in
    which case the single-instance lock and the inode to unlink at the end come with it."""

    __slots__ = ("identity", "inherited", "lock", "path", "sock")

    def __init__(
        self,
        sock: socket.socket,
        path: str,
        lock: fasteners.InterProcessLock | None,
        identity: tuple[int, int] | None,
    ) -> None:
        self.sock, self.path, self.lock, self.identity = sock, path, lock, identity
        self.inherited = lock is None

    def close(self) -> None:
        """Close the socket, unlink it if it is still the one bound here, free the lock."""
        self.sock.close()
        if self.identity is not None:
            _unlink_if_ours(self.path, self.identity)
        if self.lock is not None:
            self.lock.release()


def take_socket(socket_flag: str) -> Bound:
    """systemd's socket (LISTEN_FDS), launchd's, or ours bound at `socket_flag` (empty:
    the default path)."""
    from storyd.server import launchd, systemd

    inherited = systemd.listen_socket() or launchd.listen_socket()
    if inherited is not None:
        return Bound(inherited, str(inherited.getsockname()), None, None)
    path = socket_path(socket_flag or None)
    sock, lock, identity = bind_socket(path)
    return Bound(sock, path, lock, identity)


def _unlink_if_ours(path: str, identity: tuple[int, int]) -> None:
    """Unlink the socket only if it is still the one we bound (a successor's stays)."""
    try:
        st = os.stat(path)
    except OSError:
        return
    if (st.st_dev, st.st_ino) == identity:
        os.unlink(path)
