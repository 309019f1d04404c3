"""doctor speaks the platform's language: the file events watchdog runs (inotify's
limits on Linux, FSEvents or kqueue elsewhere), the desktop notifier (osascript on
macOS, notify-send and D-Bus on Linux) and what to install for the fast path.

The checks are called in process with the platform and the observer named, so the
macOS wording is checked on Linux; stand-in tools on PATH are real executables.
"""

from __future__ import annotations

import resource
from pathlib import Path

import pytest
from notify_harness import fake_notify_send

from storyd.cli.commands import doctor


def _lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().out.splitlines()


def _tool(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


class TestWatcher:
    """inotify's sysctls only where inotify is what watchdog runs."""

    def test_fsevents_has_no_limit(self, capsys: pytest.CaptureFixture[str]) -> None:
        doctor._check_watcher(doctor._Screen(), None, 12, "FSEventsObserver")
        assert _lines(capsys) == [
            "ok   watcher: macOS FSEvents: no per-user watch limit to raise; "
            "storyd would watch about 12 directories"]

    def test_kqueue_is_held_to_the_open_file_limit(self, capsys: pytest.CaptureFixture[str]
                                                   ) -> None:
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        doctor._check_watcher(doctor._Screen(), limit, 0, "KqueueObserver")
        (line,) = _lines(capsys)
        assert line.startswith("warn watcher: kqueue holds an open file per watched file")
        assert line.endswith("raise it (ulimit -n) before storyd starts")
        doctor._check_watcher(doctor._Screen(), 3, 0, "KqueueObserver")
        assert _lines(capsys)[0].startswith("ok   watcher: kqueue")

    def test_polling_warns(self, capsys: pytest.CaptureFixture[str]) -> None:
        doctor._check_watcher(doctor._Screen(), 4, 0, "PollingObserver")
        assert _lines(capsys)[0].startswith("warn watcher: no file events here (PollingObserver)")

    def test_linux_keeps_inotify(self, capsys: pytest.CaptureFixture[str]) -> None:
        doctor._check_watcher(doctor._Screen(), None, 3, "InotifyObserver")
        lines = _lines(capsys)
        assert lines and all("inotify" in line for line in lines)
        assert not any("watcher" in line for line in lines)


class TestDesktop:
    """The notifier there is, or the platform's way to get one."""

    def test_macos_with_osascript(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
        found = _tool(tmp_path / "bin", "osascript")
        monkeypatch.setenv("PATH", str(tmp_path / "bin"))
        doctor._check_desktop(doctor._Screen(), None, "darwin")
        (line,) = _lines(capsys)
        assert line.startswith(f"ok   desktop: osascript at {found}: macOS shows")
        assert "libnotify" not in line and "D-Bus" not in line

    def test_macos_without_osascript(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
        doctor._check_desktop(doctor._Screen(), None, "darwin")
        (line,) = _lines(capsys)
        assert line.startswith("warn desktop: osascript is not on PATH (macOS has it in /usr/bin)")
        assert "libnotify" not in line

    def test_linux_without_notify_send(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
        doctor._check_desktop(doctor._Screen(), None, "linux")
        assert "install libnotify-bin or libnotify" in _lines(capsys)[0]

    def test_linux_with_notify_send_checks_the_bus(self, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
        fake_notify_send(tmp_path / "bin", tmp_path / "record")
        monkeypatch.setenv("PATH", str(tmp_path / "bin"))
        monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
        doctor._check_desktop(doctor._Screen(), None, "linux")
        assert "but no D-Bus session bus" in _lines(capsys)[0]


@pytest.mark.parametrize(("platform", "fix"), [("darwin", "(brew install socat)"),
                                               ("linux", "(install netcat-openbsd or socat)")])
def test_fast_path_advice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str], platform: str, fix: str) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    doctor._check_fast_path(doctor._Screen(), platform)
    assert _lines(capsys) == [
        "warn fast path: neither nc nor socat is on PATH: storyd-resume always starts "
        f"Python {fix}"]
