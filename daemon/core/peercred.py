"""Whose process is at the other end of a Unix socket: the one place storyd asks the kernel.

A socket path can be served by anyone who can create it (the `/tmp/storyd-$UID`
fallback, a `--socket` in a shared folder), and an answer from another user's process
could be forged; a daemon must not serve another user either. Both sides ask here, and
both fail closed: where the system gives no credentials the peer is unknown, and an
unknown peer is refused like a foreign one.

    peer(sock)                the peer's uid, or why it is unknown (a str)
    server_is_ours(sock, p)   the client's check: False (one stderr line) unless our uid

Which call, chosen at run time by what the system offers (docs/platform-notes.md):

    Linux, Cygwin       getsockopt(SOL_SOCKET, SO_PEERCRED): struct ucred {pid, uid, gid}
    OpenBSD             getsockopt(SOL_SOCKET, SO_PEERCRED): struct sockpeercred {uid, gid, pid}
    macOS, FreeBSD      getsockopt(SOL_LOCAL, LOCAL_PEERCRED): struct xucred (`parse_xucred`)
    anywhere            os.getpeereid, should the os module ever offer it

Imports nothing but `_socket` (lazily), so `storyd resume`'s start-up stays small.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import _socket
    from collections.abc import Callable

    _Parse = Callable[[bytes], "int | str"]

__all__ = ["XUCRED_SIZE", "parse_ucred", "parse_xucred", "peer", "server_is_ours"]

_UCRED = 12  # struct ucred { pid_t pid; uid_t uid; gid_t gid; }
_SOL_LOCAL = 0  # <sys/un.h>: the level of LOCAL_* options on macOS and FreeBSD
_LOCAL_PEERCRED = 1
_XUCRED_VERSION = 0
_NGROUPS = 16
XUCRED_SIZE = 4 + 4 + 2 + 2 + 4 * _NGROUPS  # version, uid, ngroups (+2 padding), groups: 76
"""sizeof(struct xucred) on macOS: a shorter answer is not read."""
_XUCRED_ROOM = 128  # FreeBSD 13 appends a pid union (88 bytes in all): room for either


def parse_ucred(creds: bytes, uid_at: int = 4) -> int | str:
    """The uid in a struct ucred (Linux: at 4) or sockpeercred (OpenBSD: at 0), or why not."""
    if len(creds) < _UCRED:
        return f"SO_PEERCRED gave {len(creds)} bytes, not {_UCRED}"
    return int.from_bytes(creds[uid_at : uid_at + 4], sys.byteorder)


def parse_xucred(creds: bytes) -> int | str:
    """The uid in a struct xucred from LOCAL_PEERCRED, or why it cannot be trusted.

    struct xucred { u_int cr_version; uid_t cr_uid; short cr_ngroups; gid_t cr_groups[16]; }
    cr_version must be XUCRED_VERSION (0): any other layout is not read.
    """
    if len(creds) < XUCRED_SIZE:
        return f"LOCAL_PEERCRED gave {len(creds)} bytes, too few for a struct xucred"
    version = int.from_bytes(creds[0:4], sys.byteorder)
    if version != _XUCRED_VERSION:
        return f"LOCAL_PEERCRED gave struct xucred version {version}, not {_XUCRED_VERSION}"
    return int.from_bytes(creds[4:8], sys.byteorder)


def peer(sock: _socket.socket) -> int | str:
    """The uid of the process at the other end of a connected AF_UNIX socket, or, when
    the system cannot tell, why not (one line, for a log or stderr)."""
    import _socket

    option = getattr(_socket, "SO_PEERCRED", None)
    if option is not None and sys.platform.startswith(("linux", "cygwin", "openbsd")):
        uid_at = 0 if sys.platform.startswith("openbsd") else 4
        return _ask(sock, _socket.SOL_SOCKET, option, _UCRED, lambda b: parse_ucred(b, uid_at))
    if sys.platform.startswith(("darwin", "freebsd", "dragonfly")):
        level: int = getattr(_socket, "SOL_LOCAL", _SOL_LOCAL)
        local: int = getattr(_socket, "LOCAL_PEERCRED", _LOCAL_PEERCRED)
        return _ask(sock, level, local, _XUCRED_ROOM, parse_xucred)
    getpeereid = getattr(os, "getpeereid", None)
    if getpeereid is not None:
        try:
            return int(getpeereid(sock.fileno())[0])
        except OSError as exc:
            return f"getpeereid failed: {exc.strerror or exc}"
    return f"this system ({sys.platform}) gives no peer credentials on Unix sockets"


def _ask(sock: _socket.socket, level: int, option: int, size: int,
         parse: _Parse) -> int | str:  # fmt: skip
    try:
        creds = sock.getsockopt(level, option, size)
    except OSError as exc:
        return f"the peer's credentials could not be read: {exc.strerror or exc}"
    return parse(creds)


def server_is_ours(sock: _socket.socket, path: str) -> bool:
    """Whether this user's own process serves the socket; if not, one line on stderr."""
    found = peer(sock)
    mine = os.getuid()
    if found == mine:
        return True
    if isinstance(found, str):
        line = f"warn: cannot tell who serves {path} ({found}); not using its answer\n"
    else:
        line = (f"warn: {path} is served by uid {found}, not by this user (uid {mine}); "
                "not using its answer\n")  # fmt: skip
    os.write(2, line.encode("utf-8", "replace"))
    return False
