"""Whose process answers on a Unix socket (SO_PEERCRED): a client trusts only its own user.

A socket path can be served by anyone who can create it (the `/tmp/storyd-$UID`
fallback, a `--socket` in a shared folder), and an answer from another user's process
could be forged. Clients call `server_is_ours` right after connecting, before they send
anything; on False they read the files directly. Imports nothing but `_socket` (lazily),
so `storyd resume`'s start-up stays small.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import _socket

__all__ = ["peer_uid", "server_is_ours"]

_UCRED = 12  # struct ucred { pid_t pid; uid_t uid; gid_t gid; }


def peer_uid(sock: _socket.socket) -> int | None:
    """The uid of the process at the other end of a connected AF_UNIX socket, or None."""
    import _socket

    try:
        creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, _UCRED)
    except OSError:
        return None
    if len(creds) < _UCRED:
        return None
    return int.from_bytes(creds[4:8], sys.byteorder)


def server_is_ours(sock: _socket.socket, path: str) -> bool:
    """Whether this user's own process serves the socket; if not, one line on stderr."""
    uid = peer_uid(sock)
    mine = os.getuid()
    if uid == mine:
        return True
    who = "an unknown user" if uid is None else f"uid {uid}"
    os.write(
        2,
        f"warn: {path} is served by {who}, not by this user (uid {mine}); "
        "not using its answer\n".encode("utf-8", "replace"),
    )
    return False
