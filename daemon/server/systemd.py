"""systemd integration in pure Python: socket activation and sd_notify.

No libsystemd: both protocols are a few environment variables and a datagram.

- `listen_fds()` / `listen_socket()` follow sd_listen_fds(3) with unset_environment=1:
  the descriptors start at 3, they are ours only when LISTEN_PID is our pid, they get
  FD_CLOEXEC, and LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES leave os.environ in every
  case, so children (hooks, git) never see them.
- `Notifier` follows sd_notify(3): `KEY=VALUE` lines in one datagram to $NOTIFY_SOCKET
  (a path, or an abstract name written with a leading '@'). Every method is a no-op
  returning False when NOTIFY_SOCKET is unset, and a failed send returns False too:
  notification must never take the daemon down.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time

from storyd.core.errors import SetupError

__all__ = [
    "LISTEN_FDS_START",
    "Notifier",
    "SystemdError",
    "adopt",
    "listen_fds",
    "listen_socket",
]

LISTEN_FDS_START = 3
_LISTEN_VARS = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")


class SystemdError(SetupError):
    """A passed descriptor that is not what the socket unit promises."""


def _positive_int(text: str | None) -> int | None:
    if text is None or not text.strip().isdigit():
        return None
    value = int(text)
    return value if value > 0 else None


def listen_fds() -> list[int]:
    """The descriptors systemd passed to this process (3, 4, ...), or [] when none are ours.

    The LISTEN_* variables are removed from os.environ whatever the outcome.
    """
    pid = _positive_int(os.environ.get("LISTEN_PID"))
    count = _positive_int(os.environ.get("LISTEN_FDS"))
    for name in _LISTEN_VARS:
        os.environ.pop(name, None)
    if pid != os.getpid() or count is None:
        return []
    fds = list(range(LISTEN_FDS_START, LISTEN_FDS_START + count))
    for fd in fds:
        try:
            flags = fcntl.fcntl(fd, fcntl.F_GETFD)
            fcntl.fcntl(fd, fcntl.F_SETFD, flags | fcntl.FD_CLOEXEC)
        except OSError as exc:
            msg = f"LISTEN_FDS={count} but descriptor {fd} is not open: {exc.strerror}"
            raise SystemdError(msg) from None
    return fds


def listen_socket() -> socket.socket | None:
    """The first passed descriptor as a listening AF_UNIX stream socket, or None.

    Raises SystemdError when it is another kind of descriptor or socket (for example a
    socket unit written with ListenDatagram= or ListenStream=PORT).
    """
    fds = listen_fds()
    if not fds:
        return None
    return adopt(fds[0], "systemd", "ListenStream=/path in the socket unit", SystemdError)


def adopt(fd: int, by: str, fix: str, error: type[SetupError]) -> socket.socket:
    """Descriptor `fd`, passed by `by` (systemd, launchd), as a listening AF_UNIX stream
    socket; else `error`, naming what it is and `fix` (the service file's setting)."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        msg = f"descriptor {fd} passed by {by} is not a socket: {exc.strerror}"
        raise error(msg) from None
    family, kind = sock.family, sock.type
    listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
    if family != socket.AF_UNIX or kind != socket.SOCK_STREAM or not listening:
        sock.detach()
        what = f"{_enum_name(socket.AddressFamily, family)} {_enum_name(socket.SocketKind, kind)}"
        state = "listening" if listening else "not listening"
        msg = (
            f"descriptor {fd} passed by {by} is an {what} socket ({state}); "
            f"storyd needs a listening AF_UNIX stream socket ({fix})"
        )
        raise error(msg)
    return sock


def _enum_name(enum: type[socket.AddressFamily] | type[socket.SocketKind], value: int) -> str:
    try:
        return enum(value).name
    except ValueError:
        return str(int(value))


class Notifier:
    """sd_notify(3) over $NOTIFY_SOCKET, read once when the Notifier is made.

    Each method returns True when the datagram was sent, False when notification is off
    (NOTIFY_SOCKET unset or of an unsupported kind) or the send failed. None raises.
    After `ready()`, a Type=notify service must call `watchdog()` every
    `watchdog_interval()` seconds, and after `reloading()` call `ready()` again.
    """

    def __init__(self) -> None:
        address = os.environ.get("NOTIFY_SOCKET", "")
        if address.startswith("@"):
            self.address: str | None = "\0" + address[1:]
        elif address.startswith("/"):
            self.address = address
        else:
            self.address = None  # unset, empty, or vsock: (not supported here)
        self._sock: socket.socket | None = None

    @property
    def enabled(self) -> bool:
        """Whether a notification socket is configured."""
        return self.address is not None

    def send(self, *fields: str) -> bool:
        """Send `KEY=VALUE` fields as one datagram."""
        if self.address is None:
            return False
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto("\n".join(fields).encode("utf-8", "replace"), self.address)
        except OSError:
            self.close()
            return False
        return True

    def ready(self) -> bool:
        """READY=1: start-up (or a reload) is complete."""
        return self.send("READY=1")

    def status(self, text: str) -> bool:
        """STATUS=text, shown by `systemctl status`; newlines become spaces."""
        return self.send("STATUS=" + " ".join(text.splitlines()))

    def watchdog(self) -> bool:
        """WATCHDOG=1: the keep-alive for WatchdogSec=."""
        return self.send("WATCHDOG=1")

    def stopping(self) -> bool:
        """STOPPING=1: shutdown has begun."""
        return self.send("STOPPING=1")

    def reloading(self) -> bool:
        """RELOADING=1 with MONOTONIC_USEC; send `ready()` when the reload is done."""
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def watchdog_interval(self) -> float | None:
        """Seconds between keep-alives (half of WATCHDOG_USEC), or None when not asked.

        WATCHDOG_PID, when set, must be this process's pid.
        """
        usec = _positive_int(os.environ.get("WATCHDOG_USEC"))
        if usec is None:
            return None
        pid = os.environ.get("WATCHDOG_PID")
        if pid is not None and _positive_int(pid) != os.getpid():
            return None
        return usec / 2_000_000

    def close(self) -> None:
        """Close the datagram socket; a later send opens a new one."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
