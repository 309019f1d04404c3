"""`storyd install` and `storyd uninstall` as processes, in a private environment."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_harness import STORYD

Run = Callable[..., subprocess.CompletedProcess[bytes]]
UNITS = ("storyd.socket", "storyd.service")


def out(done: subprocess.CompletedProcess[bytes]) -> list[str]:
    """stdout lines of a run that must not have crashed."""
    assert b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    return done.stdout.decode().splitlines()


@pytest.fixture
def no_manager_env(isolated_env: dict[str, str]) -> dict[str, str]:
    """The isolated environment with no way to reach a user manager, checked, not assumed.

    XDG_RUNTIME_DIR is a fresh directory and there is no session bus address, so
    `systemctl --user` has nothing to connect to. If it connects anyway, the test is
    skipped rather than enabling anything in a real session.
    """
    env = {k: v for k, v in isolated_env.items() if k != "DBUS_SESSION_BUS_ADDRESS"}
    if shutil.which("systemctl", path=env.get("PATH")):
        probe = subprocess.run(["systemctl", "--user", "show-environment"], env=env,
                               capture_output=True, timeout=30, check=False)
        if probe.returncode == 0:
            pytest.skip("a systemd user manager answers even in the isolated environment")
    return env


class TestInstall:
    """install writes both units with this environment's storyd and says what to run."""

    def test_writes_units_and_prints_commands(self, run_storyd: Run, tmp_path: Path) -> None:
        """Both files are listed as written; the systemctl commands follow, link included."""
        units = tmp_path / "units"
        lines = out(run_storyd("install", "--unit-dir", str(units)))
        assert lines[:2] == [f"wrote: {units / u}" for u in UNITS]
        assert f"ExecStart={STORYD} serve" in lines
        commands = [line.strip() for line in lines[lines.index("to enable, run:") + 1:]]
        assert commands == [
            "systemctl --user daemon-reload",
            f"systemctl --user link {units}/storyd.socket {units}/storyd.service",
            "systemctl --user enable --now storyd.socket",
            "systemctl --user status --no-pager storyd.socket storyd.service",
        ]

    def test_files_hold_the_absolute_storyd(self, run_storyd: Run, tmp_path: Path) -> None:
        """ExecStart is the absolute path of the storyd beside this interpreter."""
        units = tmp_path / "units"
        run_storyd("install", "--unit-dir", str(units))
        service = (units / "storyd.service").read_text()
        socket_unit = (units / "storyd.socket").read_text()
        exe = STORYD
        assert os.path.isabs(exe)
        assert f"\nExecStart={exe} serve\n" in service
        assert "@STORYD_BIN@" not in service
        assert "\nListenStream=%t/storyd/storyd.sock\n" in socket_unit
        assert oct((units / "storyd.service").stat().st_mode & 0o777) == "0o644"

    def test_rerun_is_unchanged(self, run_storyd: Run, tmp_path: Path) -> None:
        """A second install changes nothing and says so."""
        units = tmp_path / "units"
        run_storyd("install", "--unit-dir", str(units))
        before = {u: (units / u).stat().st_mtime_ns for u in UNITS}
        lines = out(run_storyd("install", "--unit-dir", str(units)))
        assert lines[:2] == [f"unchanged: {units / u}" for u in UNITS]
        assert not any("try-restart" in line for line in lines)
        assert {u: (units / u).stat().st_mtime_ns for u in UNITS} == before

    def test_stale_unit_is_updated(self, run_storyd: Run, tmp_path: Path) -> None:
        """A unit pointing at an old storyd is rewritten, and the restart is suggested."""
        units = tmp_path / "units"
        run_storyd("install", "--unit-dir", str(units))
        service = units / "storyd.service"
        service.write_text(service.read_text().replace(STORYD, "/old/venv/bin/storyd"))
        lines = out(run_storyd("install", "--unit-dir", str(units)))
        assert lines[:2] == [f"unchanged: {units / 'storyd.socket'}", f"updated: {service}"]
        assert "  systemctl --user try-restart storyd.service" in lines
        assert "/old/venv" not in service.read_text()

    def test_dry_run_writes_nothing(self, run_storyd: Run, tmp_path: Path) -> None:
        """--dry-run says what it would write and run, and touches nothing."""
        units = tmp_path / "units"
        done = run_storyd("install", "--unit-dir", str(units), "--dry-run", "--enable")
        lines = out(done)
        assert done.returncode == 0
        assert lines[:2] == [f"would write: {units / u}" for u in UNITS]
        assert "would run:" in lines
        assert not units.exists()

    def test_default_unit_dir(self, run_storyd: Run, isolated_env: dict[str, str]) -> None:
        """Without --unit-dir: $XDG_CONFIG_HOME/systemd/user, which needs no link."""
        units = Path(isolated_env["XDG_CONFIG_HOME"]) / "systemd" / "user"
        lines = out(run_storyd("install"))
        assert lines[:2] == [f"wrote: {units / u}" for u in UNITS]
        assert all((units / u).is_file() for u in UNITS)
        assert not any("--user link" in line for line in lines)

    def test_usage(self, run_storyd: Run) -> None:
        """An unknown flag is a usage error, exit 64."""
        done = run_storyd("install", "--now")
        assert done.returncode == 64
        assert b"usage: storyd install" in done.stderr

    def test_enable_without_user_manager(self, run_storyd: Run, tmp_path: Path,
                                         no_manager_env: dict[str, str]) -> None:
        """--enable with no reachable user manager: exit 69, why, and the commands to run."""
        units = tmp_path / "units"
        done = run_storyd("install", "--unit-dir", str(units), "--enable", env=no_manager_env)
        lines = out(done)
        assert done.returncode == 69
        failure = next(line for line in lines if line.startswith("fail:"))
        assert "no systemd user manager is reachable" in failure
        assert "  systemctl --user enable --now storyd.socket" in lines
        assert all((units / u).is_file() for u in UNITS)


class TestUninstall:
    """uninstall removes what install wrote, and any enablement links beside it."""

    def test_removes_units(self, run_storyd: Run, tmp_path: Path,
                           no_manager_env: dict[str, str]) -> None:
        """Both files go; it says there was nothing to stop; a second run finds them absent."""
        units = tmp_path / "units"
        run_storyd("install", "--unit-dir", str(units))
        wants = units / "sockets.target.wants"
        wants.mkdir()
        (wants / "storyd.socket").symlink_to("../storyd.socket")
        done = run_storyd("uninstall", "--unit-dir", str(units), env=no_manager_env)
        lines = out(done)
        assert done.returncode == 0
        assert lines[0].startswith("note: no systemd user manager is reachable")
        assert lines[1:] == [
            f"removed: {units / 'storyd.socket'}",
            f"removed: {units / 'storyd.service'}",
            f"removed: {wants / 'storyd.socket'}",
        ]
        assert sorted(p.name for p in units.rglob("*")) == ["sockets.target.wants"]
        again = out(run_storyd("uninstall", "--unit-dir", str(units), env=no_manager_env))
        assert again[1:] == [f"absent: {units / u}" for u in UNITS]

    def test_leaves_other_units(self, run_storyd: Run, tmp_path: Path,
                                no_manager_env: dict[str, str]) -> None:
        """Units of other programs in the same directory stay."""
        units = tmp_path / "units"
        run_storyd("install", "--unit-dir", str(units))
        (units / "other.service").write_text("[Service]\nExecStart=/bin/true\n")
        run_storyd("uninstall", "--unit-dir", str(units), env=no_manager_env)
        assert sorted(p.name for p in units.iterdir()) == ["other.service"]
