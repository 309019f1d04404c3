"""Durable writes reach the disk on macOS too: fcntl(F_FULLFSYNC) wherever the system has
it (recorded through a monkeypatched fcntl: this is not macOS), fsync(2) where it does
not or where the file system refuses it, for every write of a state file or record."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

import pytest

from storyd.api.reconcile import atomic
from storyd.core import durable

F_FULLFSYNC = 51  # macOS's value (<sys/fcntl.h>)


class Calls:
    """What a write asked of the system: ("full", fd) and ("fsync", fd) in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, refuse: int | None = None) -> None:
        self.seen: list[tuple[str, int]] = []
        real_fcntl, real_fsync = fcntl.fcntl, os.fsync

        def fake_fcntl(fd: int, cmd: int, arg: int = 0) -> int:
            if cmd != F_FULLFSYNC:
                return real_fcntl(fd, cmd, arg)
            self.seen.append(("full", fd))
            if refuse is not None:
                raise OSError(refuse, os.strerror(refuse))
            real_fsync(fd)  # what the drive would be asked, done the Linux way
            return 0

        def fake_fsync(fd: int) -> None:
            self.seen.append(("fsync", fd))
            real_fsync(fd)

        monkeypatch.setattr(fcntl, "F_FULLFSYNC", F_FULLFSYNC, raising=False)
        monkeypatch.setattr(fcntl, "fcntl", fake_fcntl)
        monkeypatch.setattr(os, "fsync", fake_fsync)

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.seen]


class TestFullFsync:
    """Where F_FULLFSYNC exists, it is the call; fsync(2) is only its fallback."""

    def test_replace_uses_full_fsync(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        calls = Calls(monkeypatch)
        target = tmp_path / "state.json"
        target.write_bytes(b"{}")
        atomic.replace(str(target), b'{"a": 1}', hooked=False)
        assert target.read_bytes() == b'{"a": 1}'
        assert calls.kinds() == ["full", "full"]  # the temp file, then its folder

    def test_overwrite_and_redo_record(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
        calls = Calls(monkeypatch)
        target = tmp_path / "state.json"
        target.write_bytes(b'{"status": "in-progress"}')
        fd = os.open(target, os.O_RDWR)
        try:
            assert atomic.overwrite(fd, str(target), b'{"status": "done"}')
        finally:
            os.close(fd)
        assert target.read_bytes() == b'{"status": "done"}'
        kinds = calls.kinds()
        assert "fsync" not in kinds and kinds.count("full") >= 4  # record, folder, file x2

    @pytest.mark.parametrize("refusal", [errno.ENOTSUP, errno.EINVAL])
    def test_refused_falls_back(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, refusal: int
    ) -> None:
        calls = Calls(monkeypatch, refuse=refusal)
        target = tmp_path / "f"
        fd = os.open(target, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            durable.fsync(fd)
        finally:
            os.close(fd)
        assert calls.seen == [("full", fd), ("fsync", fd)]

    def test_without_it_plain_fsync(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        calls = Calls(monkeypatch)
        monkeypatch.delattr(fcntl, "F_FULLFSYNC")
        durable.fsync_dir(str(tmp_path))
        assert calls.kinds() == ["fsync"]


def test_no_plain_fsync_left() -> None:
    """Every durable write goes through storyd.core.durable.fsync (grep of the sources)."""
    root = Path(durable.__file__).resolve().parents[1]
    offenders = [
        f"{path.relative_to(root)}:{n}"
        for folder in ("daemon", "detectors")
        for path in (root / folder).rglob("*.py")
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "os.fsync(" in line and path.name != "durable.py"
    ]
    assert offenders == []
