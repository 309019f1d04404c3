"""macOS's launchd, checked on Linux: the daemon's launch_activate_socket call through
ctypes (a stand-in library object that fills the same pointers libSystem fills), and
the LaunchAgent `storyd install --launchd` writes and loads (a stand-in `launchctl`
that keeps launchd's rules: bootstrap of a loaded service fails, bootout of an absent
one fails). Nothing here ran on a Mac (docs/service.md says what that leaves open)."""

from __future__ import annotations

import ctypes
import errno
import os
import plistlib
import socket
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_harness import STORYD

from storyd.server import launchd

Run = Callable[..., subprocess.CompletedProcess[bytes]]
LABEL = "org.storyd.daemon"


class FakeLibSystem:
    """launch_activate_socket and free as libSystem has them: the descriptors in a
    C int array written through `fds`, its length through `count`; `free` records."""

    def __init__(self, fds: list[int], err: int = 0) -> None:
        self.fds, self.err = fds, err
        self.names: list[bytes] = []
        self.freed: list[int | None] = []
        self.array: ctypes.Array[ctypes.c_int] | None = None

    def launch_activate_socket(self, name: bytes, fds: Any, count: Any) -> int:
        """`fds` and `count` are ctypes pointers, to an int pointer and a size_t."""
        self.names.append(name)
        if self.err:
            return self.err
        self.array = (ctypes.c_int * len(self.fds))(*self.fds)
        fds[0] = ctypes.cast(self.array, ctypes.POINTER(ctypes.c_int))
        count[0] = len(self.fds)
        return 0

    def free(self, pointer: ctypes.c_void_p) -> None:
        self.freed.append(pointer.value)


def _listener(path: Path, kind: int = socket.SOCK_STREAM) -> int:
    """A bound (and, for a stream, listening) Unix socket's descriptor, as launchd passes it."""
    sock = socket.socket(socket.AF_UNIX, kind)
    sock.bind(str(path))
    if kind == socket.SOCK_STREAM:
        sock.listen(5)
    return sock.detach()


class TestActivate:
    """The daemon takes launchd's socket, frees launchd's array, and refuses others."""

    def test_takes_the_listening_socket(self, tmp_path: Path) -> None:
        path = tmp_path / "s.sock"
        lib = FakeLibSystem([_listener(path)])
        sock = launchd.listen_socket(lib)
        assert sock is not None
        try:
            assert lib.names == [b"Listener"]
            assert lib.array is not None
            assert lib.freed == [ctypes.addressof(lib.array)]  # launchd's malloc'd array
            assert sock.getsockname() == str(path)
            assert not sock.get_inheritable()
            client = socket.socket(socket.AF_UNIX)
            client.connect(str(path))
            conn, _ = sock.accept()
            conn.close()
            client.close()
        finally:
            sock.close()

    def test_descriptors_past_the_first_are_closed(self, tmp_path: Path) -> None:
        first, extra = _listener(tmp_path / "a.sock"), _listener(tmp_path / "b.sock")
        sock = launchd.listen_socket(FakeLibSystem([first, extra]))
        assert sock is not None
        sock.close()
        with pytest.raises(OSError):
            os.fstat(extra)

    @pytest.mark.parametrize("err", [errno.ESRCH, errno.ENOENT])
    def test_not_a_launchd_job_is_none(self, err: int) -> None:
        lib = FakeLibSystem([], err)
        assert launchd.listen_socket(lib) is None
        assert lib.freed == []

    def test_no_descriptors_is_none(self) -> None:
        assert launchd.listen_socket(FakeLibSystem([])) is None

    def test_another_failure_is_one_line(self) -> None:
        with pytest.raises(launchd.LaunchdError, match=r"launch_activate_socket\('Listener'\) "
                                                        r"failed: Operation already"):
            launchd.listen_socket(FakeLibSystem([], errno.EALREADY))

    def test_a_datagram_socket_is_refused(self, tmp_path: Path) -> None:
        fd = _listener(tmp_path / "d.sock", socket.SOCK_DGRAM)
        with pytest.raises(launchd.LaunchdError, match=r"passed by launchd is an AF_UNIX "
                           r"SOCK_DGRAM socket.*SockPathName"):
            launchd.listen_socket(FakeLibSystem([fd]))
        os.close(fd)

    def test_the_plist_names_the_socket_the_daemon_asks_for(self) -> None:
        from storyd.cli import launchagent

        assert launchagent.SOCKET_NAME == launchd.SOCKET_NAME
        assert launchagent.agent("/bin/storyd", "/s")["Sockets"].keys() == {launchd.SOCKET_NAME}

    @pytest.mark.skipif(os.uname().sysname == "Darwin", reason="off macOS only")
    def test_off_macos_nothing_is_loaded(self) -> None:
        assert launchd.listen_socket() is None


# -- the agent: storyd install --launchd ---------------------------------------------------

FAKE_LAUNCHCTL = """#!/bin/sh
# launchctl's rules for one service: print answers only when loaded, bootstrap fails
# when loaded, bootout fails when not
echo "$*" >>"$LAUNCHCTL_LOG"
case $1 in
  print) [ -e "$LAUNCHCTL_STATE" ] || { echo "Could not find service" >&2; exit 113; }
         printf 'gui/%s/org.storyd.daemon = {\\n\\tstate = waiting\\n}\\n' "$(id -u)" ;;
  bootstrap) [ -e "$LAUNCHCTL_STATE" ] && { echo "Bootstrap failed: 5: Input/output error" >&2
             exit 5; }; : >"$LAUNCHCTL_STATE" ;;
  bootout) [ -e "$LAUNCHCTL_STATE" ] || { echo "Boot-out failed: 3: No such process" >&2
           exit 3; }; rm -f "$LAUNCHCTL_STATE" ;;
esac
"""


@pytest.fixture
def mac_env(isolated_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """A home of its own and no XDG_RUNTIME_DIR (as on macOS); no launchctl on PATH."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in isolated_env.items() if k != "XDG_RUNTIME_DIR"}
    env["HOME"] = str(home)
    return env


@pytest.fixture
def launchctl(mac_env: dict[str, str], tmp_path: Path) -> Path:
    """A stand-in launchctl on PATH; what it was asked is in the returned log."""
    tools = tmp_path / "tools"
    tools.mkdir()
    fake = tools / "launchctl"
    fake.write_text(FAKE_LAUNCHCTL)
    fake.chmod(0o755)
    log = tmp_path / "launchctl.log"
    mac_env.update(PATH=f"{tools}{os.pathsep}{mac_env['PATH']}", LAUNCHCTL_LOG=str(log),
                   LAUNCHCTL_STATE=str(tmp_path / "loaded"))
    return log


def _lines(done: subprocess.CompletedProcess[bytes]) -> list[str]:
    assert b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    return done.stdout.decode().splitlines()


@pytest.mark.slow
class TestAgentFile:
    """The plist is launchd's: plistlib reads back what was written, with the keys launchd
    needs for a socket-activated agent, and nothing is loaded without --enable."""

    def test_the_plist(self, run_storyd: Run, mac_env: dict[str, str], tmp_path: Path) -> None:
        agents = tmp_path / "agents"
        done = run_storyd("install", "--launchd", "--unit-dir", str(agents), env=mac_env)
        assert done.returncode == 0
        plist = agents / f"{LABEL}.plist"
        lines = _lines(done)
        assert lines[0] == f"wrote: {plist}"
        raw = plist.read_bytes()
        assert raw.startswith(b'<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE plist')
        spec = plistlib.loads(raw)
        assert plistlib.loads(plistlib.dumps(spec)) == spec
        assert plistlib.dumps(spec, sort_keys=True) == raw
        sock = f"/tmp/storyd-{os.getuid()}/storyd.sock"  # where clients look on macOS
        home = mac_env["HOME"]
        log = f"{home}/Library/Logs/storyd/storyd.log"
        assert spec == {
            "Label": LABEL,
            "ProgramArguments": [str(STORYD), "serve"],
            "Sockets": {"Listener": {"SockPathName": sock, "SockPathMode": 384,
                                     "SockType": "stream", "SockFamily": "Unix"}},
            "KeepAlive": {"PathState": {sock: False}},
            "EnvironmentVariables": {"PATH": mac_env["PATH"], "STORYD_SOCKET": sock},
            "StandardOutPath": log,
            "StandardErrorPath": log,
            "ProcessType": "Standard",
        }
        assert stat.S_IMODE(plist.stat().st_mode) == 0o644
        assert Path(log).parent.is_dir()
        assert f"socket: {sock} (launchd makes it, mode 0600)" in lines
        uid = os.getuid()
        assert lines[lines.index("to enable, run (the bootout only when loaded):") + 1:] == [
            f"  launchctl bootout gui/{uid}/{LABEL}",
            f"  launchctl bootstrap gui/{uid} {plist}",
            f"  launchctl print gui/{uid}/{LABEL}",
        ]

    def test_default_folder_and_the_socket_clients_use(self, run_storyd: Run,
                                                       mac_env: dict[str, str]) -> None:
        mac_env["STORYD_SOCKET"] = "/tmp/elsewhere/s.sock"
        done = run_storyd("install", "--launchd", env=mac_env)
        plist = Path(mac_env["HOME"]) / "Library" / "LaunchAgents" / f"{LABEL}.plist"
        assert _lines(done)[0] == f"wrote: {plist}"
        spec = plistlib.loads(plist.read_bytes())
        assert spec["Sockets"]["Listener"]["SockPathName"] == "/tmp/elsewhere/s.sock"

    def test_dry_run_writes_nothing(self, run_storyd: Run, mac_env: dict[str, str],
                                    tmp_path: Path) -> None:
        agents = tmp_path / "agents"
        done = run_storyd("install", "--launchd", "--unit-dir", str(agents), "--dry-run",
                          env=mac_env)
        assert _lines(done)[0] == f"would write: {agents / LABEL}.plist"
        assert not agents.exists()

    def test_enable_without_launchctl_says_what_to_run(self, run_storyd: Run,
                                                      mac_env: dict[str, str],
                                                      tmp_path: Path) -> None:
        done = run_storyd("install", "--launchd", "--enable", "--unit-dir",
                          str(tmp_path / "a"), env=mac_env)
        assert done.returncode == 69
        lines = _lines(done)
        assert "fail: launchctl is not on PATH (not macOS?); nothing was loaded." in lines
        assert f"  launchctl bootstrap gui/{os.getuid()} {tmp_path}/a/{LABEL}.plist" in lines

    def test_service_flag_conflicts(self, run_storyd: Run, mac_env: dict[str, str]) -> None:
        done = run_storyd("install", "--launchd", "--systemd", env=mac_env)
        assert done.returncode == 64
        assert b"--launchd or --systemd, not both" in done.stderr
        done = run_storyd("install", "--claude", "--service", env=mac_env)
        assert done.returncode == 64


@pytest.mark.slow
class TestAgentLifecycle:
    """--enable bootstraps into gui/<uid>; a changed plist is booted out first; an
    unchanged loaded one is left alone; uninstall boots it out and removes the file."""

    def test_enable_update_uninstall(self, run_storyd: Run, mac_env: dict[str, str],
                                     launchctl: Path, tmp_path: Path) -> None:
        agents = tmp_path / "agents"
        plist = agents / f"{LABEL}.plist"
        uid = os.getuid()
        service = f"gui/{uid}/{LABEL}"

        def install(env: dict[str, str]) -> list[str]:
            done = run_storyd("install", "--launchd", "--enable", "--unit-dir", str(agents),
                              env=env)
            assert done.returncode == 0, done.stdout.decode()
            return _lines(done)

        def asked() -> list[str]:
            got = launchctl.read_text().splitlines()
            launchctl.write_text("")
            return got

        lines = install(mac_env)
        assert f"$ launchctl bootstrap gui/{uid} {plist}" in lines
        assert f"enabled: {LABEL} (launchd starts storyd on the first connection)" in lines
        assert asked() == [f"print {service}", f"bootstrap gui/{uid} {plist}"]

        assert f"loaded: {LABEL} already, unchanged" in install(mac_env)
        assert asked() == [f"print {service}"]

        changed = dict(mac_env, PATH=f"{tmp_path}{os.pathsep}{mac_env['PATH']}")
        lines = install(changed)
        assert lines[0] == f"updated: {plist}"
        assert asked() == [f"print {service}", f"bootout {service}",
                           f"bootstrap gui/{uid} {plist}"]

        done = run_storyd("uninstall", "--launchd", "--unit-dir", str(agents), env=changed)
        assert done.returncode == 0
        assert _lines(done)[-1] == f"removed: {plist}"
        assert asked() == [f"print {service}", f"bootout {service}"]
        assert not plist.exists()
        assert Path(mac_env["HOME"], "Library", "Logs", "storyd").is_dir()  # logs stay

        done = run_storyd("uninstall", "--launchd", "--unit-dir", str(agents), env=changed)
        assert _lines(done) == [f"note: {LABEL} is not loaded; nothing to unload",
                                f"absent: {plist}"]
