"""A macOS stand-in for Linux CI: what macOS's CPython 3.11/3.12 lacks is taken away.

Put on PYTHONPATH with STORYD_MACOS_STANDIN=1 (.ci/run does, for the whole suite);
every Python process of the run loads it, the daemons and CLIs the tests start too
(its folder is made absolute in PYTHONPATH, so a child run elsewhere keeps it):

    os.pidfd_open, os.waitid     absent (macOS; waitid comes with Python 3.13)
    socket.SO_PEERCRED           absent: the peer's uid comes from os.getpeereid, as
                                 macOS's LOCAL_PEERCRED gives it (answered here by
                                 the kernel's SO_PEERCRED, kept out of storyd's sight)
    libc's inotify_* symbols     absent from ctypes.CDLL: storyd's change queue has no
                                 inotify instance (a stat per answer), and watchdog's
                                 Observer is its PollingObserver (FSEvents stands in)
    select.epoll                 absent: asyncio's selector is poll (macOS: kqueue)
    fcntl.F_FULLFSYNC            present (51, macOS's value): Linux refuses it with
                                 EINVAL, so storyd's fallback to fsync runs

Tests that need what is taken away are skipped with a platform reason by the plugin
`standin_skips` (PYTEST_PLUGINS). What cannot be stood in: sys.platform stays "linux"
(so the 108-byte socket limit and peercred's SO_PEERCRED layout choice stay Linux's),
and /proc is still there.
"""

from __future__ import annotations

import os
import sys


def _absent(module: object, *names: str) -> None:
    for name in names:
        if hasattr(module, name):
            delattr(module, name)


def _getpeereid(fd: int) -> tuple[int, int]:
    """(uid, gid) of a Unix socket's peer, as macOS's getpeereid(3) answers."""
    import _socket

    sock = _socket.socket(fileno=os.dup(fd))
    try:
        creds = sock.getsockopt(_socket.SOL_SOCKET, 17, 12)  # Linux's SO_PEERCRED
    finally:
        sock.close()
    return (int.from_bytes(creds[4:8], sys.byteorder), int.from_bytes(creds[8:12], sys.byteorder))


def _patch(name: str, module: object) -> None:
    """Take away what macOS lacks from a module just imported."""
    if name in ("_socket", "socket"):
        _absent(module, "SO_PEERCRED")
    elif name == "select":
        _absent(module, "epoll", "EPOLLIN", "EPOLLOUT")
    elif name == "fcntl":
        module.F_FULLFSYNC = 51  # type: ignore[attr-defined]
    elif name == "ctypes":
        base = module.CDLL  # type: ignore[attr-defined]

        class CDLL(base):  # type: ignore[misc,valid-type]
            """A libc without inotify (macOS's)."""

            def __getattr__(self, attr: str) -> object:
                if attr.startswith("inotify_"):
                    raise AttributeError(attr)
                return super().__getattr__(attr)

            def __getitem__(self, attr: object) -> object:
                if isinstance(attr, str) and attr.startswith("inotify_"):
                    raise AttributeError(attr)
                return super().__getitem__(attr)

        module.CDLL = CDLL  # type: ignore[attr-defined]


_PATCHED = frozenset(("_socket", "socket", "select", "fcntl", "ctypes"))


class _Finder:
    """Patches each module of _PATCHED once it is imported (none is imported here:
    a process that never uses them pays nothing)."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> object:
        if name not in _PATCHED:
            return None
        for finder in sys.meta_path:
            if finder is _Finder:
                continue
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec

        class Loader:
            def create_module(self, spec: object) -> object:
                return loader.create_module(spec)

            def exec_module(self, module: object) -> None:
                loader.exec_module(module)
                _patch(name, module)

        spec.loader = Loader()
        return spec


def _install() -> None:
    _absent(os, "pidfd_open", "waitid")
    posix = sys.modules.get("posix")
    if posix is not None:
        _absent(posix, "pidfd_open", "waitid")
    os.getpeereid = _getpeereid  # type: ignore[attr-defined]
    for name in _PATCHED:
        module = sys.modules.get(name)
        if module is not None:
            _patch(name, module)
    sys.meta_path.insert(0, _Finder)  # type: ignore[arg-type]
    here = os.path.dirname(os.path.abspath(__file__))
    entries = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    absolute = [os.path.abspath(p) for p in entries]
    if here not in absolute:
        absolute.insert(0, here)
    os.environ["PYTHONPATH"] = os.pathsep.join(absolute)
    plugins = [p for p in os.environ.get("PYTEST_PLUGINS", "").split(",") if p]
    if "standin_skips" not in plugins:
        os.environ["PYTEST_PLUGINS"] = ",".join([*plugins, "standin_skips"])


if os.environ.get("STORYD_MACOS_STANDIN") == "1":
    _install()
