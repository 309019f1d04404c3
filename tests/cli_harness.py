"""Running commands as a user does: the installed `storyd`, the seed's reference script.

    STORYD               the `storyd` console script installed beside this interpreter
    run_storyd_cli()     THE runner: `storyd ARGS` (no shell), everything captured
    run_reference()      the seed's bash + jq reference (bench/reference/story-resume.sh)
    run_in_pty()         a command with a pseudo-terminal as its stdout
    PipeLines            a child's stdout read line by line, each read bounded by a deadline
    path_without()       a $PATH on which a program is not found
    lean_pythonpath()    a PYTHONPATH under which `python -S` imports the installed storyd
    isolated_env         pytest fixture: an environment with its own runtime and config dirs
    run_storyd           pytest fixture: run_storyd_cli bound to `isolated_env`

Registered as a plugin by tests/conftest.py, so its fixtures reach every test module.
"""

from __future__ import annotations

import atexit
import functools
import os
import pty
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

__all__ = [
    "BIN",
    "REFERENCE",
    "REPO",
    "STORYD",
    "PipeLines",
    "Run",
    "lean_pythonpath",
    "path_without",
    "run_in_pty",
    "run_reference",
    "run_storyd_cli",
]

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
STORYD = str(BIN / "storyd")
REFERENCE = REPO / "bench" / "reference" / "story-resume.sh"

Run = Callable[..., subprocess.CompletedProcess[bytes]]


def run_storyd_cli(*args: str, env: dict[str, str], cwd: Path | str = ".",
                   timeout: float = 30,
                   input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run the installed `storyd` with `args` (no shell) and capture everything."""
    return subprocess.run([STORYD, *args], cwd=cwd, env=env, capture_output=True,
                          timeout=timeout, input=input, check=False)


def run_reference(
    argv: list[str], cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[bytes]:
    """The seed's bash + jq reference (bench/reference/story-resume.sh) with `argv` in `cwd`."""
    return subprocess.run(
        ["bash", str(REFERENCE), *argv], cwd=cwd, env=env, capture_output=True, timeout=60,
        check=False,
    )


@pytest.fixture
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """An environment with its own runtime and config dirs, so no real daemon is asked."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    config = tmp_path / "config"
    config.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    monkeypatch.delenv("STORYD_SOCKET", raising=False)
    return dict(os.environ)


@pytest.fixture
def run_storyd(isolated_env: dict[str, str]) -> Run:
    """`run_storyd(*args, cwd=".", timeout=30, env=None, input=None)`: run_storyd_cli with
    `isolated_env` unless another environment is given; returns the finished process."""

    def run(*args: str, cwd: Path | str = ".", timeout: float = 30,
            env: dict[str, str] | None = None,
            input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        return run_storyd_cli(*args, env=env or isolated_env, cwd=cwd, timeout=timeout,
                              input=input)

    return run


class PipeLines:
    """A child's stdout, read line by line with a deadline on each line."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.proc = proc
        self.fd = proc.stdout.fileno()
        os.set_blocking(self.fd, False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.fd, selectors.EVENT_READ)
        self.buffer = b""

    def readline(self, timeout: float = 5.0) -> bytes:
        """The next line (without its newline); fail the test at the deadline or on EOF."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail(f"no line within {timeout:g} s; partial: {self.buffer[:200]!r}")
            if not self.selector.select(remaining):
                continue
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                pytest.fail(f"EOF (exit {self.proc.poll()}); partial: {self.buffer[:200]!r}")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def close(self) -> None:
        """Unregister the pipe."""
        self.selector.close()


def run_in_pty(argv: list[str], *, env: dict[str, str], cwd: Path | str = ".",
               timeout: float = 30.0) -> tuple[int, bytes]:
    """Run `argv` with a pseudo-terminal as stdout (so `isatty()` holds); (exit code, output)."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave,
                                stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    finally:
        os.close(slave)
    chunks = []
    deadline = time.monotonic() + timeout
    selector = selectors.DefaultSelector()
    selector.register(master, selectors.EVENT_READ)
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                proc.kill()
                proc.wait()
                pytest.fail(f"{argv} did not finish within {timeout:g} s in a pty")
            if not selector.select(remaining):
                continue
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        selector.close()
        os.close(master)
    return proc.wait(timeout), b"".join(chunks)


def path_without(program: str, extra: Iterable[Path | str] = ()) -> str:
    """$PATH (after `extra`) with every folder that holds `program` left out."""
    folders = [str(p) for p in extra]
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if folder and not os.path.exists(os.path.join(folder, program)):
            folders.append(folder)
    found = shutil.which(program, path=os.pathsep.join(folders))
    assert found is None or any(found.startswith(str(e)) for e in extra), found
    return os.pathsep.join(folders)


@functools.cache
def lean_pythonpath() -> str:
    """A folder from which `python -S` (no site: no site-packages, no editable finder)
    imports the storyd these tests run, so -X importtime lists only storyd's imports.

    An installed wheel is site-packages/storyd: its parent serves. A checkout installed
    editable maps storyd to daemon/ and storyd.detectors to detectors/ through a finder
    that site loads; here a folder of symlinks stands in for that mapping.
    """
    import storyd
    from storyd import detectors

    package = Path(storyd.__file__).resolve().parent
    if package.name == "storyd":
        return str(package.parent)
    stage = Path(tempfile.mkdtemp(prefix="storyd-lean-"))
    atexit.register(shutil.rmtree, stage, True)
    (stage / "storyd").mkdir()
    for entry in package.iterdir():
        if entry.name != "__pycache__":
            (stage / "storyd" / entry.name).symlink_to(entry)
    (stage / "storyd" / "detectors").symlink_to(Path(detectors.__file__).resolve().parent)
    return str(stage)
