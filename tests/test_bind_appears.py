"""The daemon's socket path appears only once something listens on it: bound under
`<path>~`, listening, then renamed onto the path. A client that finds the path never gets
the ECONNREFUSED of a socket bound but not yet listening (CI saw one under load)."""

from __future__ import annotations

import errno
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from storyd.core import paths
from storyd.core.errors import UsageError
from storyd.server import bind
from storyd.server.bind import bind_socket


def _connects(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(2)
        try:
            probe.connect(path)
        except OSError:
            return False
        return True


def _bound(path: str) -> tuple[socket.socket, object, tuple[int, int]]:
    sock, lock, identity = bind_socket(path)
    assert os.stat(path).st_ino == identity[1]  # the inode close() will unlink
    return sock, lock, identity


def _release(sock: socket.socket, lock: object, path: str) -> None:
    os.unlink(path)  # before the close: no instant where the path names a closed socket
    sock.close()
    lock.release()  # type: ignore[attr-defined]


def _serves_with_no_side_name(path: str) -> bool:
    """Bind `path`: whether a client connects and no `<path>~` is left; then let go."""
    sock, lock, _ = _bound(path)
    try:
        return _connects(path) and not os.path.lexists(path + "~")
    finally:
        _release(sock, lock, path)


def test_the_path_is_absent_until_the_socket_listens(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "run" / "storyd.sock")
    seen: list[bool] = []

    class Watching(socket.socket):
        """Notes, when it starts to listen, whether the path already exists."""

        def listen(self, backlog: int = 0) -> None:
            seen.append(os.path.lexists(path))
            super().listen(backlog)

    monkeypatch.setattr(bind.socket, "socket", Watching)
    sock, lock, _ = _bound(path)
    monkeypatch.undo()
    try:
        assert seen == [False]  # listen() ran before the path was there
        assert _connects(path)
        assert not os.path.lexists(path + "~")
        assert os.stat(path).st_mode & 0o777 == 0o600
    finally:
        _release(sock, lock, path)


def test_a_client_racing_the_bind_is_never_refused(tmp_path: Path) -> None:
    """A thread connects whenever the path exists while the daemon binds again and again."""
    path = str(tmp_path / "run" / "storyd.sock")
    refused: list[int] = []
    tries = [0]
    done = threading.Event()

    def race() -> None:
        while not done.is_set():
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                try:
                    probe.connect(path)
                except FileNotFoundError:
                    continue
                except OSError as error:
                    if error.errno == errno.ECONNREFUSED and os.path.lexists(path):
                        refused.append(error.errno)
                tries[0] += 1

    racer = threading.Thread(target=race, daemon=True)
    racer.start()
    binds, deadline = 0, time.monotonic() + 20
    try:  # at least 60 binds, and until the racer has connected 100 times (it needs the GIL)
        while (binds < 60 or tries[0] < 100) and time.monotonic() < deadline:
            sock, lock, _identity = _bound(path)
            _release(sock, lock, path)
            binds += 1
    finally:
        done.set()
        racer.join(10)
    assert tries[0] > 0, "the racing client never found the path"
    # a connect that found the path between its unlink and the next bind is refused by
    # no one: the path is gone, so every refusal here would be a socket not yet listening
    assert refused == []


def test_a_stale_socket_is_replaced_in_one_step(tmp_path: Path) -> None:
    path = str(tmp_path / "run" / "storyd.sock")
    first, lock, _ = _bound(path)
    first.close()  # killed: the file stays, nothing listens
    lock.release()  # type: ignore[attr-defined]
    assert os.path.lexists(path) and not _connects(path)
    sock, lock, identity = _bound(path)
    try:
        assert _connects(path)
        assert identity == (os.stat(path).st_dev, os.stat(path).st_ino)
    finally:
        _release(sock, lock, path)


@pytest.mark.parametrize("leftover", ["file", "socket"])
def test_a_side_name_left_by_a_kill_mid_bind_is_removed(tmp_path: Path, leftover: str) -> None:
    path = str(tmp_path / "run" / "storyd.sock")
    (tmp_path / "run").mkdir(mode=0o700)
    if leftover == "file":
        Path(path + "~").write_text("left")
    else:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as old:
            old.bind(path + "~")
    assert _serves_with_no_side_name(path)


def test_a_path_with_no_room_for_the_side_name_binds_in_place(tmp_path: Path) -> None:
    base = str(tmp_path / "run") + "/"
    longest = paths.socket_path_limit() - 1
    path = base + "s" * (longest - len(base))
    assert paths.socket_path_problem(path) is None
    assert paths.socket_path_problem(path + "~") is not None
    assert _serves_with_no_side_name(path)


class _Failing(socket.socket):
    def listen(self, backlog: int = 0) -> None:
        raise OSError(errno.EADDRINUSE, "listen refused")


def test_a_failed_listen_leaves_no_name_and_frees_the_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "run" / "storyd.sock")
    monkeypatch.setattr(bind.socket, "socket", _Failing)
    with pytest.raises(UsageError, match=f"cannot bind the socket at {path}: listen refused"):
        bind_socket(path)
    monkeypatch.undo()
    assert not os.path.lexists(path) and not os.path.lexists(path + "~")
    sock, lock, _ = _bound(path)  # the lock was released: a second daemon may bind
    _release(sock, lock, path)


@pytest.mark.parametrize("where", ["~", ""])
def test_a_folder_in_the_way_is_one_line_and_nothing_else_goes(tmp_path: Path, where: str) -> None:
    """A folder at the side name or at the path: a usage error naming it (no traceback),
    the folder and what it holds left, the lock free, no socket left behind."""
    path = str(tmp_path / "run" / "storyd.sock")
    (tmp_path / "run").mkdir(mode=0o700)
    folder = Path(path + where)
    folder.mkdir()
    (folder / "kept").write_text("x")
    with pytest.raises(UsageError) as caught:
        bind_socket(path)
    message = caught.value.message
    assert f"cannot bind the socket at {folder}:" in message and "\n" not in message
    assert (folder / "kept").read_text() == "x"
    left = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert left == sorted({"storyd.sock.lock", folder.name}), left
    (folder / "kept").unlink()
    folder.rmdir()
    assert _serves_with_no_side_name(path)  # the lock was released
