"""storyd.server.systemd and the unit files: socket activation, sd_notify, `systemd-analyze verify`.

The harness plays systemd. It makes the listening socket, and starts the service through
`sh -c 'export LISTEN_PID=$$; exec python ...'` with the socket as descriptor 3, so
LISTEN_PID is the pid of the exec'd Python exactly as when systemd forks and execs it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cli_harness import STORYD

from storyd.cli.commands import install
from storyd.core.errors import StorydError
from storyd.server import systemd

Run = Callable[..., subprocess.CompletedProcess[bytes]]
LISTEN_VARS = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")

# The service side: take the socket, report what it saw, answer one connection.
CHILD = r"""
import fcntl, json, os, sys
from storyd.server import systemd
seen = {k: os.environ.get(k) for k in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")}
try:
    sock = systemd.listen_socket()
except systemd.SystemdError as exc:
    print(json.dumps({"error": exc.message, "code": exc.code}), flush=True)
    sys.exit(exc.code)
report = {"seen": seen, "pid": os.getpid(), "left": [k for k in seen if k in os.environ]}
if sock is not None:
    flags = fcntl.fcntl(sock.fileno(), fcntl.F_GETFD)
    report.update(fd=sock.fileno(), name=sock.getsockname(), cloexec=bool(flags & fcntl.FD_CLOEXEC))
print(json.dumps(report), flush=True)
if sock is not None:
    conn, _ = sock.accept()
    conn.sendall(b"hello from %d\n" % os.getpid())
    conn.close()
"""


def activate(passed: int, listen_pid: str = "$$") -> subprocess.Popen[bytes]:
    """Start CHILD as systemd would: `passed` becomes fd 3, LISTEN_FDS=1, LISTEN_PID set.

    The descriptor travels as the shell's stdin and is moved to 3 by the shell, since
    dash's redirections take single-digit descriptors only.
    """
    script = f'export LISTEN_PID={listen_pid}; exec "$0" -c "$1" 3<&0 0</dev/null'
    env = {**os.environ, "LISTEN_FDS": "1", "LISTEN_FDNAMES": "storyd.socket"}
    return subprocess.Popen(
        ["sh", "-c", script, sys.executable, CHILD],
        stdin=passed, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )


def finish(proc: subprocess.Popen[bytes]) -> tuple[dict[str, object], int]:
    """The child's report and exit code."""
    out, err = proc.communicate(timeout=30)
    assert b"Traceback" not in err, err.decode(errors="replace")
    return json.loads(out.splitlines()[0]), proc.returncode


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    """A listening AF_UNIX stream socket, as a socket unit's ListenStream= makes."""
    path = str(tmp_path / "storyd.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(8)
    yield sock, path
    sock.close()


class TestListenSocket:
    """listen_socket() takes systemd's descriptor 3 only when LISTEN_PID is ours."""

    def test_passed_socket_is_returned(self, listener: tuple[socket.socket, str]) -> None:
        """The child gets fd 3 as a listening socket and a client reaches the child through it."""
        sock, path = listener
        proc = activate(sock.fileno())
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(30)
            client.connect(path)
            greeting = client.makefile("rb").readline()
        report, code = finish(proc)
        assert code == 0
        assert report["fd"] == 3
        assert report["name"] == path
        assert report["cloexec"] is True
        assert greeting == f"hello from {report['pid']}\n".encode()

    def test_environment_is_cleared(self, listener: tuple[socket.socket, str]) -> None:
        """LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES leave the environment once read."""
        sock, path = listener
        proc = activate(sock.fileno())
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(30)
            client.connect(path)
            client.recv(64)
        report, _ = finish(proc)
        assert report["seen"] == {
            "LISTEN_PID": str(report["pid"]), "LISTEN_FDS": "1", "LISTEN_FDNAMES": "storyd.socket",
        }
        assert report["left"] == []

    def test_other_pid_gets_nothing(self, listener: tuple[socket.socket, str]) -> None:
        """LISTEN_PID naming another process (here the test runner) means no descriptors."""
        sock, _ = listener
        report, code = finish(activate(sock.fileno(), listen_pid="$PPID"))
        assert code == 0
        assert "fd" not in report
        assert report["seen"]["LISTEN_PID"] != str(report["pid"])  # type: ignore[index]
        assert report["left"] == []

    @pytest.mark.parametrize(
        ("family", "kind", "listen", "words"),
        [
            (socket.AF_UNIX, socket.SOCK_DGRAM, False, "AF_UNIX SOCK_DGRAM"),
            (socket.AF_INET, socket.SOCK_STREAM, True, "AF_INET SOCK_STREAM"),
            (socket.AF_UNIX, socket.SOCK_STREAM, False, "not listening"),
        ],
    )
    def test_wrong_kind_is_a_clear_error(
        self, family: int, kind: int, listen: bool, words: str
    ) -> None:
        """A descriptor that is not a listening AF_UNIX stream socket is refused by name."""
        with socket.socket(family, kind) as wrong:
            if family == socket.AF_INET:
                wrong.bind(("127.0.0.1", 0))
            if listen:
                wrong.listen(1)
            report, code = finish(activate(wrong.fileno()))
        assert code == 78
        assert words in str(report["error"])
        assert "ListenStream=" in str(report["error"])

    def test_not_a_socket(self, tmp_path: Path) -> None:
        """A plain file as fd 3 is reported as not a socket."""
        plain = tmp_path / "plain"
        plain.write_bytes(b"")
        with plain.open("rb") as handle:
            report, code = finish(activate(handle.fileno()))
        assert code == 78
        assert "not a socket" in str(report["error"])

    def test_without_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """With no LISTEN_* variables there is nothing, and nothing is touched."""
        for name in LISTEN_VARS:
            monkeypatch.delenv(name, raising=False)
        assert systemd.listen_fds() == []
        assert systemd.listen_socket() is None


@pytest.fixture(params=["path", "abstract"])
def notify_socket(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[socket.socket]:
    """A datagram socket playing systemd's notification socket; NOTIFY_SOCKET names it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if request.param == "path":
        address = str(tmp_path / "notify")
        sock.bind(address)
    else:
        name = f"storyd-test-{uuid.uuid4().hex}"
        sock.bind("\0" + name)
        address = "@" + name
    sock.settimeout(10)
    monkeypatch.setenv("NOTIFY_SOCKET", address)
    yield sock
    sock.close()


class TestNotifier:
    """Notifier sends sd_notify datagrams, and is silent and harmless without a socket."""

    @pytest.mark.parametrize(
        ("call", "expected"),
        [
            (lambda n: n.ready(), b"READY=1"),
            (lambda n: n.status("3 workspaces, 12 units"), b"STATUS=3 workspaces, 12 units"),
            (lambda n: n.status("two\nlines"), b"STATUS=two lines"),
            (lambda n: n.watchdog(), b"WATCHDOG=1"),
            (lambda n: n.stopping(), b"STOPPING=1"),
        ],
    )
    def test_messages(
        self,
        notify_socket: socket.socket,
        call: Callable[[systemd.Notifier], bool],
        expected: bytes,
    ) -> None:
        """Each method sends its one datagram to the socket NOTIFY_SOCKET names."""
        notifier = systemd.Notifier()
        try:
            assert notifier.enabled
            assert call(notifier) is True
            assert notify_socket.recv(4096) == expected
        finally:
            notifier.close()

    def test_reloading_carries_monotonic_time(self, notify_socket: socket.socket) -> None:
        """RELOADING=1 comes with MONOTONIC_USEC from CLOCK_MONOTONIC."""
        notifier = systemd.Notifier()
        before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        assert notifier.reloading()
        after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        notifier.close()
        first, second = notify_socket.recv(4096).split(b"\n")
        assert first == b"RELOADING=1"
        key, _, value = second.partition(b"=")
        assert key == b"MONOTONIC_USEC"
        assert before <= int(value) <= after

    def test_sequence_in_order(self, notify_socket: socket.socket) -> None:
        """A daemon's life arrives in the order it was sent."""
        notifier = systemd.Notifier()
        notifier.ready()
        notifier.watchdog()
        notifier.stopping()
        notifier.close()
        got = [notify_socket.recv(4096) for _ in range(3)]
        assert got == [b"READY=1", b"WATCHDOG=1", b"STOPPING=1"]

    def test_unset_is_a_no_op(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without NOTIFY_SOCKET every call returns False and nothing is opened."""
        monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
        notifier = systemd.Notifier()
        assert not notifier.enabled
        assert [notifier.ready(), notifier.status("x"), notifier.watchdog(),
                notifier.stopping(), notifier.reloading()] == [False] * 5
        assert notifier._sock is None

    def test_send_failure_returns_false(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capfd: pytest.CaptureFixture[str]) -> None:
        """A socket nobody listens on gives False, no exception and no output."""
        monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody"))
        notifier = systemd.Notifier()
        assert notifier.ready() is False
        assert notifier.watchdog() is False
        assert capfd.readouterr() == ("", "")

    @pytest.mark.parametrize(
        ("usec", "pid", "expected"),
        [
            ("2000000", None, 1.0),
            ("2000000", "self", 1.0),
            ("2000000", "other", None),
            ("30000000", None, 15.0),
            (None, None, None),
            ("0", None, None),
            ("soon", None, None),
        ],
    )
    def test_watchdog_interval(self, monkeypatch: pytest.MonkeyPatch, usec: str | None,
                               pid: str | None, expected: float | None) -> None:
        """Half of WATCHDOG_USEC, in seconds, unless WATCHDOG_PID names another process."""
        for name, value in (("WATCHDOG_USEC", usec), ("WATCHDOG_PID", pid)):
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                pids = {"self": str(os.getpid()), "other": str(os.getppid())}
                monkeypatch.setenv(name, pids.get(value, value))
        assert systemd.Notifier().watchdog_interval() == expected


SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(
    SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed"
)


def verify(units: list[Path], env: dict[str, str]) -> list[str]:
    """`systemd-analyze --user verify`; its complaints about our units (it exits 0 on many).

    --user needs XDG_RUNTIME_DIR (without it: "Failed to lookup RuntimeDirectory path")
    and no running user manager: the isolated environment provides a private one.
    """
    assert SYSTEMD_ANALYZE is not None
    done = subprocess.run(
        [SYSTEMD_ANALYZE, "--user", "verify", *map(str, units)],
        capture_output=True, env=env, timeout=60, check=False,
    )
    complaints = [
        line for line in done.stderr.decode(errors="replace").splitlines()
        if any(unit.name in line or str(unit.parent) in line for unit in units)
    ]
    if done.returncode != 0:
        complaints.append(f"exit {done.returncode}: {done.stderr.decode(errors='replace')}")
    return complaints


class TestUnitFiles:
    """The units that `storyd install` renders pass `systemd-analyze --user verify`."""

    def test_templates_are_the_repository_files(self) -> None:
        """systemd/ holds the single copy, with the executable as a placeholder."""
        repo = Path(__file__).resolve().parent.parent / "systemd"
        templates = install.find_templates()
        for unit, text in templates.items():
            assert text == (repo / unit).read_text()
        assert f"ExecStart={install.PLACEHOLDER} serve" in templates["storyd.service"]

    @needs_analyze
    def test_installed_units_verify(self, run_storyd: Run, tmp_path: Path,
                                    isolated_env: dict[str, str]) -> None:
        """The rendered socket and service have no unknown keys, bad values or missing binary."""
        units = tmp_path / "units"
        done = run_storyd("install", "--unit-dir", str(units))
        assert done.returncode == 0, done.stderr
        rendered = [units / "storyd.socket", units / "storyd.service"]
        assert f"ExecStart={STORYD} serve" in rendered[1].read_text()
        assert verify(rendered, isolated_env) == []

    @needs_analyze
    def test_awkward_executable_path_verifies(self, tmp_path: Path,
                                              isolated_env: dict[str, str]) -> None:
        """A path with spaces, % and $ is quoted and escaped so systemd finds the binary."""
        folder = tmp_path / "my 100% $HOME bin"
        folder.mkdir()
        (folder / "storyd").symlink_to(STORYD)
        units = tmp_path / "units"
        units.mkdir()
        for unit, text in install.find_templates().items():
            (units / unit).write_text(install.render(text, str(folder / "storyd")))
        assert verify([units / "storyd.socket", units / "storyd.service"], isolated_env) == []

    @pytest.mark.parametrize("name", ['a "q" b', "a'b", "a\\b", "a\tb"])
    def test_paths_systemd_refuses_are_refused_first(self, name: str) -> None:
        """Quotes, backslashes and control characters: systemd will not run it, so no unit."""
        with pytest.raises(StorydError, match="systemd cannot run"):
            install.render("ExecStart=@STORYD_BIN@ serve", f"/opt/{name}/storyd")

    @needs_analyze
    def test_verify_catches_mistakes(self, tmp_path: Path, isolated_env: dict[str, str]) -> None:
        """The check above is not vacuous: an unknown key and a missing binary are reported."""
        units = tmp_path / "units"
        units.mkdir()
        text = install.render(install.find_templates()["storyd.service"], str(tmp_path / "none"))
        (units / "storyd.service").write_text(text.replace("Type=notify", "Type=notify\nBogus=1"))
        complaints = verify([units / "storyd.service"], isolated_env)
        assert any("Bogus" in line for line in complaints)
        assert any("not executable" in line for line in complaints)
