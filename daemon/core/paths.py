"""Where storyd's socket, configuration and executable live (XDG base directories)."""

from __future__ import annotations

import os
import sys

__all__ = ["check_socket_path", "config_path", "history_path", "socket_path",
           "socket_path_limit", "socket_path_problem", "state_dir", "storyd_executable",
           "which"]


def socket_path(flag: str | None = None) -> str:
    """--socket, else $STORYD_SOCKET, else $XDG_RUNTIME_DIR/storyd/storyd.sock, else /tmp."""
    if flag:
        return flag
    env = os.environ.get("STORYD_SOCKET")
    if env:
        return env
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return os.path.join(runtime, "storyd", "storyd.sock")
    return f"/tmp/storyd-{os.getuid()}/storyd.sock"


def socket_path_limit() -> int:
    """The size of sun_path, which holds a socket's path and its NUL: 108 bytes on Linux
    (and Cygwin), 104 on macOS and the BSDs."""
    return 108 if sys.platform.startswith(("linux", "cygwin")) else 104


def socket_path_problem(path: str) -> str | None:
    """None when `path` fits in sun_path; else one line naming the limit and the fix
    (bind and connect would fail with a bare "AF_UNIX path too long")."""
    size = len(os.fsencode(path))
    limit = socket_path_limit()
    if size < limit:
        return None
    system = "Linux allows" if limit == 108 else "macOS and the BSDs allow"
    return (
        f"socket path {path} is {size} bytes; {system} at most {limit - 1} "
        f"(sun_path is {limit} bytes): give a shorter one with --socket PATH or "
        "STORYD_SOCKET, or set XDG_RUNTIME_DIR to a shorter folder"
    )


def check_socket_path(path: str) -> None:
    """UsageError with `socket_path_problem`'s line when `path` is too long."""
    problem = socket_path_problem(path)
    if problem is not None:
        from storyd.core.errors import UsageError

        raise UsageError(problem)


def config_path() -> str:
    """$XDG_CONFIG_HOME/storyd/config.toml (default ~/.config)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "storyd", "config.toml")


def state_dir() -> str:
    """$XDG_STATE_HOME/storyd (default ~/.local/state/storyd): undo records, the hooks'
    session records, install records."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(base, "storyd")


def history_path() -> str:
    """$STORYD_HISTORY, else $XDG_STATE_HOME/storyd/history.sqlite3 (~/.local/state)."""
    return os.environ.get("STORYD_HISTORY") or os.path.join(state_dir(), "history.sqlite3")


def storyd_executable() -> str | None:
    """The `storyd` beside this interpreter (its venv or pipx env), else the one on PATH."""
    beside = os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "storyd")
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    found = which("storyd")
    return os.path.abspath(found) if found else None


def which(name: str) -> str | None:
    """What `shutil.which(name)` answers (the first executable non-folder `name` on PATH),
    without shutil's import: its compression modules cost a hook 1.5 ms. PATH is read as
    os.get_exec_path() reads it, without its `warnings` import (0.4 ms)."""
    path = os.environ.get("PATH")
    for folder in dict.fromkeys((os.defpath if path is None else path).split(os.pathsep)):
        path = os.path.join(folder, name)
        if os.path.exists(path) and os.access(path, os.X_OK) and not os.path.isdir(path):
            return path
    return None
