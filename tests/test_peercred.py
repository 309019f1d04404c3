"""Peer credentials fail closed (issue 39): one seam, storyd.core.peercred, for both sides.

The kernel's answers are parsed per platform (Linux's struct ucred, macOS's struct
xucred from LOCAL_PEERCRED); where the system gives none, the peer is unknown and is
refused like another user's: the daemon answers one EX_NOPERM line and logs one line,
the client says one line and reads the files directly. "A system without SO_PEERCRED"
is made on Linux by a sitecustomize.py that deletes it from `socket` and `_socket`.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from cli_harness import run_storyd_cli
from daemon_harness import DaemonProcess, daemon_env, wait_for
from epic_state_harness import write_epic

from storyd.core import peercred

STORY = "story-0049-0001"
STORIES = {STORY: {"tasks": {"T1": {"status": "done", "commitSha": "a" * 40},
                             "T2": {"status": "pending"}}}}
RESUME = ("resume", "--story-id", STORY, "--epic-id", "0049")

# struct xucred as macOS fills it for uid 501 in 16 groups, little-endian (arm64, x86_64):
# cr_version 0, cr_uid 501, cr_ngroups 16 (+2 bytes padding), cr_groups[16]. Encoded by
# hand in the kernel's layout (<sys/ucred.h>), not captured on a Mac.
XUCRED_501 = bytes.fromhex(
    "00000000" "f5010000" "1000" "0000"
    "14000000" "0c000000" "3d000000" "4f000000" "50000000" "51000000" "62000000" "bd020000"
    "21000000" "64000000" "cc000000" "fa000000" "8b010000" "8e010000" "8f010000" "90010000"
)
# the same answer with cr_version 1: a layout storyd does not know
XUCRED_V1 = b"\x01\x00\x00\x00" + XUCRED_501[4:]
# struct ucred as Linux fills it: pid 4242, uid 1000, gid 1000
UCRED_1000 = bytes.fromhex("92100000" "e8030000" "e8030000")

NO_PEERCRED = """\
import _socket, socket
for module in (socket, _socket):
    if hasattr(module, "SO_PEERCRED"):
        delattr(module, "SO_PEERCRED")
"""


@pytest.mark.skipif(sys.byteorder != "little", reason="the recorded answers are little-endian")
class TestParse:
    """The kernel's answers are read by their layout, and a strange one is not read."""

    def test_an_xucred_names_its_uid(self) -> None:
        assert len(XUCRED_501) == peercred.XUCRED_SIZE == 76
        assert peercred.parse_xucred(XUCRED_501) == 501

    def test_a_longer_xucred_is_read_too(self) -> None:  # FreeBSD 13 appends a pid union
        assert peercred.parse_xucred(XUCRED_501 + bytes(12)) == 501

    def test_an_unknown_xucred_version_is_not_read(self) -> None:
        assert peercred.parse_xucred(XUCRED_V1) == (
            "LOCAL_PEERCRED gave struct xucred version 1, not 0")

    @pytest.mark.parametrize("size", [0, 4, 8, 75])
    def test_a_short_xucred_is_not_read(self, size: int) -> None:
        assert peercred.parse_xucred(XUCRED_501[:size]) == (
            f"LOCAL_PEERCRED gave {size} bytes, too few for a struct xucred")

    def test_a_ucred_names_its_uid(self) -> None:
        assert peercred.parse_ucred(UCRED_1000) == 1000
        assert peercred.parse_ucred(UCRED_1000[:8]) == "SO_PEERCRED gave 8 bytes, not 12"

    def test_openbsd_puts_the_uid_first(self) -> None:
        assert peercred.parse_ucred(UCRED_1000, uid_at=0) == 4242


class TestThisSystem:
    """On the system the tests run on, a connected pair names this process's uid."""

    def test_a_socketpair_is_ours(self) -> None:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with a, b:
            assert peercred.peer(a) == os.getuid()

    def test_without_credentials_the_peer_is_unknown(
            self, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
        import _socket

        if hasattr(_socket, "SO_PEERCRED"):
            monkeypatch.delattr(_socket, "SO_PEERCRED")
        monkeypatch.delattr(os, "getpeereid", raising=False)  # the macOS stand-in has one
        monkeypatch.setattr(peercred.sys, "platform", "plan9")
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with a, b:
            assert peercred.peer(a) == (
                "this system (plan9) gives no peer credentials on Unix sockets")
            assert peercred.server_is_ours(a, "/run/s.sock") is False
        assert capfd.readouterr().err == (
            "warn: cannot tell who serves /run/s.sock (this system (plan9) gives no peer "
            "credentials on Unix sockets); not using its answer\n")


def _no_peercred(root: Path, env: dict[str, str]) -> dict[str, str]:
    """`env` with a sitecustomize.py first on PYTHONPATH that removes SO_PEERCRED."""
    standin = root / "no-peercred"
    standin.mkdir(exist_ok=True)
    (standin / "sitecustomize.py").write_text(NO_PEERCRED)
    return dict(env, PYTHONPATH=os.pathsep.join(filter(None, [str(standin),
                                                               env.get("PYTHONPATH")])))


def _first_answer(path: Path) -> bytes:
    """What the daemon says to a `ping`: its first line, or all it sent before closing."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(str(path))
        sock.sendall(b'{"op":"ping"}\n')
        data = b""
        while b"\n" not in data and (chunk := sock.recv(65536)):
            data += chunk
        return data


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    write_epic(path, "0049", STORIES)
    return path


@pytest.mark.slow
class TestDaemonWithoutCredentials:
    """A daemon that cannot learn its peer's uid refuses the peer, in one log line."""

    def test_a_client_is_refused_with_one_line(self, tmp_path: Path, ws: Path) -> None:
        sock = tmp_path / "run" / "storyd.sock"
        env = _no_peercred(tmp_path, daemon_env(tmp_path, sock))
        proc = DaemonProcess(tmp_path, socket_path=sock, workspaces=[ws], env=env)
        proc.spawn()
        try:
            wait_for(sock.exists, 10, "the daemon's socket")
            reply = wait_for(lambda: _try_read(sock), 10, "an answer on the socket")
            lines = reply.splitlines()
            assert len(lines) == 1, reply
            answer = orjson.loads(lines[0])
            assert answer["ok"] is False, f"served an unknown peer: {answer}"
            error = answer["error"]
            assert (error["code"], error["name"]) == (77, "EX_NOPERM"), error
            assert "the peer's uid is unknown" in error["message"], error
            wait_for(lambda: "peer_refused" in proc.log_text(), 5, "the refusal logged")
            log = proc.log_text()
            refusals = [line for line in log.splitlines() if "peer_refused" in line]
            assert len(refusals) == 1, log
            assert "no peer credentials" in refusals[0], log
            assert "Traceback" not in log, log
        finally:
            proc.close()


def _try_read(sock: Path) -> bytes | None:
    try:
        return _first_answer(sock) or None
    except OSError:
        return None


@pytest.mark.slow
class TestClientWithoutCredentials:
    """A client that cannot learn the server's uid says so once and reads directly."""

    @pytest.mark.parametrize("command", [RESUME, ("status", "--json")])
    def test_it_answers_by_the_direct_read(
            self, spawn_daemon: Callable[..., DaemonProcess], tmp_path: Path, ws: Path,
            command: tuple[str, ...]) -> None:
        proc = spawn_daemon([ws])
        before = proc.stats()["queries"]
        env = _no_peercred(tmp_path, proc.env)
        done = run_storyd_cli(*command, "--timeout", "5000", env=env, cwd=ws)
        direct = run_storyd_cli(*command, "--direct", env=proc.env, cwd=ws)
        err = done.stderr.decode()
        assert done.returncode == 0, err
        assert "Traceback" not in err
        assert err.splitlines() == [
            f"warn: cannot tell who serves {proc.socket} (this system ({sys.platform}) gives "
            "no peer credentials on Unix sockets); not using its answer"], err
        assert done.stdout == direct.stdout
        assert proc.stats()["queries"] == before  # the daemon was not asked
