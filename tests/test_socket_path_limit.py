"""A socket path too long for sun_path (104 bytes on macOS, 108 on Linux) is one clear
line naming the limit and the fix, never "AF_UNIX path too long" or a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from cli_harness import Run

from storyd.api.client import Client, DaemonUnavailable
from storyd.core import paths
from storyd.core.errors import UsageError
from storyd.server.bind import bind_socket


def _path_of(tmp_path: Path, size: int) -> str:
    """A path of exactly `size` bytes under `tmp_path`."""
    base = str(tmp_path) + "/"
    return base + "s" * (size - len(base))


class TestLimit:
    """The limit is the system's sun_path, less its NUL."""

    @pytest.mark.parametrize(
        ("platform", "longest"), [("linux", 107), ("darwin", 103), ("freebsd14", 103)]
    )
    def test_longest_fits(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, platform: str, longest: int
    ) -> None:
        monkeypatch.setattr(sys, "platform", platform)
        assert paths.socket_path_problem(_path_of(tmp_path, longest)) is None
        problem = paths.socket_path_problem(_path_of(tmp_path, longest + 1))
        assert problem is not None
        assert f"at most {longest}" in problem and f"is {longest + 1} bytes" in problem
        assert "\n" not in problem
        for fix in ("--socket", "STORYD_SOCKET", "XDG_RUNTIME_DIR"):
            assert fix in problem

    def test_macos_names_itself(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.setattr(sys, "platform", "darwin")
        with pytest.raises(UsageError, match=r"macOS .* at most 103 \(sun_path is 104 bytes\)"):
            paths.check_socket_path(_path_of(tmp_path, 104))


class TestBindAndConnect:
    """Where the path is used: the daemon's bind and a client's connect."""

    def test_bind_refuses_before_touching_anything(self, tmp_path: Path) -> None:
        path = _path_of(tmp_path / "run", 120)
        with pytest.raises(UsageError, match="is 120 bytes"):
            bind_socket(path)
        assert not (tmp_path / "run").exists()  # no folder made, no lock taken

    def test_client_says_why(self, tmp_path: Path) -> None:
        with pytest.raises(DaemonUnavailable, match="Linux allows at most 107"):
            Client(_path_of(tmp_path, 130), timeout=0.5).ping()


@pytest.mark.slow
def test_serve_says_one_line(run_storyd: Run, tmp_path: Path) -> None:
    """`storyd serve --socket TOO_LONG`: exit 64 and one line, no traceback."""
    done = run_storyd("serve", "--socket", _path_of(tmp_path, 140), timeout=60)
    err = done.stderr.decode()
    assert done.returncode == 64, err
    assert "Traceback" not in err and "AF_UNIX" not in err
    said = [line for line in err.splitlines() if not line.startswith("{")]  # not the log's
    assert len(said) == 1 and "sun_path is 108 bytes" in said[0], err
    assert said[0].startswith("storyd serve: socket path ") and "--socket" in said[0]
