"""storyd's launchd agent (macOS): the plist, where it and the logs go, and the
`launchctl` commands that load and unload it.

`storyd install --service` on macOS writes ~/Library/LaunchAgents/<LABEL>.plist with
plistlib. launchd makes storyd's socket (`Sockets` > `Listener`: the path storyd's
clients look at, mode 0600) at login and starts `storyd serve` on the first connection;
the daemon takes the socket with launch_activate_socket (storyd.server.launchd). The
daemon's log lines go to ~/Library/Logs/storyd/storyd.log, which Console.app lists
under Log Reports; launchd's own lines about the job are in the unified log.

`KeepAlive` > `PathState` {socket: false} also starts the daemon when the socket is
missing: a socket folder under /tmp is gone after a restart, and launchd may not make a
folder for a socket; the daemon then binds the socket itself, as `storyd serve` does.
"""

from __future__ import annotations

import os
import plistlib
import shutil
from typing import Any

from storyd.core.paths import socket_path

__all__ = [
    "LABEL",
    "SOCKET_MODE",
    "SOCKET_NAME",
    "agent",
    "bootout",
    "bootstrap",
    "default_agent_dir",
    "domain",
    "launchctl",
    "log_path",
    "plist_bytes",
    "print_service",
]

LABEL = "org.storyd.daemon"
# the name the daemon asks launchd for: storyd.server.launchd.SOCKET_NAME (the command
# line does not import the server; tests/test_launchd.py holds the two equal)
SOCKET_NAME = "Listener"
SOCKET_MODE = 0o600  # 384: plists have no octal (launchd.plist(5), SockPathMode)


def default_agent_dir() -> str:
    """~/Library/LaunchAgents: the per-user agents launchd loads at login."""
    return os.path.join(os.path.expanduser("~"), "Library", "LaunchAgents")


def log_path() -> str:
    """~/Library/Logs/storyd/storyd.log: Console.app shows ~/Library/Logs."""
    return os.path.join(os.path.expanduser("~"), "Library", "Logs", "storyd", "storyd.log")


def agent(executable: str, sock: str | None = None) -> dict[str, Any]:
    """The agent's property list: `storyd serve`, socket-activated at `sock` (the path
    storyd's clients compute), its output appended to log_path()."""
    sock = sock or socket_path()
    log = log_path()
    return {
        "Label": LABEL,
        "ProgramArguments": [executable, "serve"],
        "Sockets": {
            SOCKET_NAME: {
                "SockPathName": sock,
                "SockPathMode": SOCKET_MODE,
                "SockType": "stream",
                "SockFamily": "Unix",
            }
        },
        "KeepAlive": {"PathState": {sock: False}},
        "EnvironmentVariables": {
            # launchd's jobs get PATH=/usr/bin:/bin:/usr/sbin:/sbin; git, a hook and
            # osascript are found where this shell finds them
            "PATH": os.environ.get("PATH") or os.defpath,
            "STORYD_SOCKET": sock,  # the same path should the daemon bind it itself
        },
        "StandardOutPath": log,
        "StandardErrorPath": log,
        "ProcessType": "Standard",
    }


def plist_bytes(spec: dict[str, Any]) -> bytes:
    """The XML property list launchd reads."""
    return plistlib.dumps(spec, fmt=plistlib.FMT_XML, sort_keys=True)


def domain() -> str:
    """The user's login (GUI) domain, `gui/<uid>`."""
    return f"gui/{os.getuid()}"


def launchctl() -> str | None:
    """launchctl's path, or None where there is none (off macOS)."""
    return shutil.which("launchctl")


def bootstrap(plist: str) -> list[str]:
    """Load the agent into the user's domain."""
    return ["launchctl", "bootstrap", domain(), plist]


def bootout() -> list[str]:
    """Unload the agent (stops a running daemon)."""
    return ["launchctl", "bootout", f"{domain()}/{LABEL}"]


def print_service() -> list[str]:
    """What launchd knows of the agent: its state, pid, last exit, sockets."""
    return ["launchctl", "print", f"{domain()}/{LABEL}"]
