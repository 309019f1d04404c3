"""launchd socket activation (macOS): the listening socket a LaunchAgent's `Sockets`
entry made, taken with libSystem's `launch_activate_socket`.

The agent `storyd install --service` writes on macOS (storyd.cli.launchagent) asks
launchd to create and listen on storyd's socket (`Sockets` > `Listener` >
`SockPathName`, mode 0600) and to start `storyd serve` on the first connection. The
daemon then takes the descriptors with `launch_activate_socket(name, &fds, &cnt)`
(launch(3), macOS 10.10 and later), called here through ctypes: it fills a malloc'd
array of descriptors that the caller frees. ESRCH (not started by launchd) and ENOENT
(no such entry) mean "none": the daemon binds its own socket, as it does off macOS,
where nothing here runs.

The socket is listened on again by the daemon: on XNU a Unix socket's peer credentials,
which clients read with LOCAL_PEERCRED to check who serves them
(storyd.core.peercred), are those of the last process that called listen(2); launchd's
own call would otherwise make clients see launchd's uid.
"""

from __future__ import annotations

import errno
import os
import sys

from storyd.core.errors import SetupError
from storyd.server.systemd import adopt

TYPE_CHECKING = False  # `typing` costs the early door's start-up (server/door.py)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["LIBSYSTEM", "SOCKET_NAME", "LaunchdError", "activate", "listen_socket"]

SOCKET_NAME = "Listener"  # the key under `Sockets` in the agent's plist
LIBSYSTEM = "/usr/lib/libSystem.B.dylib"
_BACKLOG = 512  # as bind.py's own socket
_NONE = (errno.ESRCH, errno.ENOENT)  # not a launchd job; a job without this entry


class LaunchdError(SetupError):
    """launchd's socket cannot be taken, or is not what the agent's plist promises."""


def _libsystem() -> Any:
    """libSystem with the two functions this module calls, typed for ctypes."""
    import ctypes

    try:
        lib = ctypes.CDLL(LIBSYSTEM)
    except OSError as exc:
        msg = f"cannot load {LIBSYSTEM} for launch_activate_socket: {exc}"
        raise LaunchdError(msg) from None
    ints = ctypes.POINTER(ctypes.c_int)
    lib.launch_activate_socket.restype = ctypes.c_int
    lib.launch_activate_socket.argtypes = [
        ctypes.c_char_p,
        ctypes.POINTER(ints),
        ctypes.POINTER(ctypes.c_size_t),
    ]
    lib.free.restype = None
    lib.free.argtypes = [ctypes.c_void_p]
    return lib


def activate(name: str, lib: Any) -> list[int]:
    """The descriptors launchd holds for the plist's `Sockets` entry `name`; [] when this
    process is not a launchd job or its job has no such entry. `lib` is libSystem (or a
    stand-in with the same two functions)."""
    import ctypes

    fds = ctypes.POINTER(ctypes.c_int)()
    count = ctypes.c_size_t(0)
    err = lib.launch_activate_socket(name.encode(), ctypes.pointer(fds), ctypes.pointer(count))
    if err in _NONE:
        return []
    if err:
        msg = f"launch_activate_socket({name!r}) failed: {os.strerror(err)}"
        raise LaunchdError(msg)
    if not fds:
        return []
    try:
        return [int(fds[i]) for i in range(count.value)]
    finally:
        lib.free(ctypes.cast(fds, ctypes.c_void_p))


def listen_socket(lib: Any = None) -> Any:
    """launchd's listening socket for storyd (a socket.socket), or None: off macOS, when
    this process is not storyd's launchd job, or when launchd made no socket.

    Raises LaunchdError when launchd passed something else than a listening AF_UNIX
    stream socket, or the call fails otherwise. A descriptor past the first (a path
    makes one) is closed.
    """
    if lib is None:
        if sys.platform != "darwin":
            return None
        lib = _libsystem()
    fds = activate(SOCKET_NAME, lib)
    if not fds:
        return None
    for extra in fds[1:]:
        os.close(extra)
    sock = adopt(fds[0], "launchd", "SockPathName in the agent's Sockets entry", LaunchdError)
    sock.set_inheritable(False)  # no child (git, a hook) holds the listening socket
    sock.listen(_BACKLOG)  # the peer credentials clients read become storyd's (docstring)
    return sock
