"""Shared fixtures: real workspaces on disk, the installed `storyd`, and a thread-leak guard."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


REFERENCE = REPO / "bench" / "reference" / "story-resume.sh"


def run_reference(
    argv: list[str], cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[bytes]:
    """The seed's bash + jq reference (bench/reference/story-resume.sh) with `argv` in `cwd`."""
    return subprocess.run(
        ["bash", str(REFERENCE), *argv], cwd=cwd, env=env, capture_output=True, timeout=60,
        check=False,
    )


def storyd_path() -> str:
    """The `storyd` console script installed beside this interpreter."""
    found = shutil.which("storyd", path=str(BIN)) or shutil.which("storyd")
    if not found:
        pytest.fail("storyd is not installed: run the README's test command")
    return found


def leaked_threads(before: set[threading.Thread], grace: float = 2.0) -> list[str]:
    """Threads started since `before` that are still alive after `grace` seconds.

    Daemon threads count too: storyd's refresher, detector worker and watchdog's observer
    and emitters are daemon threads (only the read pool's, from concurrent.futures, are
    not), so skipping them would check almost nothing.
    """
    deadline = time.monotonic() + grace
    leaked = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    for thread in leaked:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    return [t.name for t in leaked if t.is_alive()]


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    """Fail a test that leaves a thread of its own running (watchdog's style)."""
    before = set(threading.enumerate())
    yield
    still = leaked_threads(before)
    assert not still, f"test leaked threads: {still}"


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


def write_epic_state(
    workspace: Path, epic: str, stories: dict[str, dict[str, dict[str, object]]]
) -> Path:
    """plans/epic-<epic>/execution-state.json with `stories.<id>.tasks.<taskId>` nodes."""
    folder = workspace / "plans" / f"epic-{epic}"
    folder.mkdir(parents=True, exist_ok=True)
    state = folder / "execution-state.json"
    body = {"epic": epic, "stories": {sid: {"tasks": tasks} for sid, tasks in stories.items()}}
    state.write_bytes(orjson.dumps(body))
    return state


@pytest.fixture
def run_storyd(isolated_env: dict[str, str]) -> Callable[..., subprocess.CompletedProcess[bytes]]:
    """Run the installed `storyd` with arguments in a directory; returns the finished process."""
    exe = storyd_path()

    def run(
        *args: str,
        cwd: Path | str = ".",
        timeout: float = 30,
        env: dict[str, str] | None = None,
        input: bytes | None = None,
    ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [exe, *args],
            cwd=cwd,
            capture_output=True,
            timeout=timeout,
            env=env or isolated_env,
            input=input,
            check=False,
        )

    return run
