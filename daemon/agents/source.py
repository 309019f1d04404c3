"""The one adapter between the agent integration and the rest of storyd.

Hooks and the MCP server read units only through these functions, which call the same
code the CLI runs (`storyd.cli.common.units` for status and check, the resume
command's daemon-then-direct path, `storyd.cli.main.main` for the other commands). When the
client, answers or resume modules change shape, this file is the one place to follow.
"""

from __future__ import annotations

import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.config import Config
    from storyd.core.model import Unit
    from storyd.core.query import Output

__all__ = [
    "Captured",
    "committed_units",
    "load_config",
    "resume",
    "run_cli",
    "state_file_units",
    "summaries",
]

_capture_lock = threading.Lock()


def load_config(path: str | None) -> Config:
    """The configuration (`path`, else the default file); ConfigError when it is broken."""
    from storyd import config

    return config.load(path)


def summaries(
    workspace: str,
    *,
    in_flight: bool,
    socket: str | None = None,
    config: str | None = None,
    timeout_ms: int = 2000,
) -> tuple[list[dict[str, object]], str]:
    """One workspace's unit summaries with their findings (the daemon's `list`, else a
    direct scan with the detectors), and which path answered: what `storyd status` shows."""
    from storyd.cli.common import units

    flags: dict[str, object] = {"workspace": [workspace], "timeout": str(timeout_ms)}
    if in_flight:
        flags["in-flight"] = True
    if socket is not None:
        flags["socket"] = socket
    if config is not None:
        flags["config"] = config
    found = units(flags)
    return found.units, found.source


def state_file_units(workspace: str, relpath: str, lock_timeout: float) -> list[Unit]:
    """Every unit of one state file, read now under its writers' lock (DataError when it
    does not parse)."""
    from storyd.api import answers
    from storyd.core.formats import adapter_for

    options = answers.Options(lock_timeout)
    return answers.read_units(workspace, adapter_for(relpath), relpath, options)


def committed_units(workspace: str, relpath: str) -> int | None:
    """How many units the file holds as committed at HEAD; None when git does not track it
    (or that version does not parse either)."""
    import os
    import subprocess
    import tempfile

    from storyd.core.errors import StorydError

    try:
        done = subprocess.run(
            ["git", "-C", workspace, "show", f"HEAD:{relpath}"],
            capture_output=True, timeout=5, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    with tempfile.TemporaryDirectory(prefix="storyd-head-") as copy:
        path = os.path.join(copy, relpath)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(done.stdout)
        try:
            return len(state_file_units(copy, relpath, 1.0))
        except StorydError:
            return None


def resume(argv: list[str], cwd: str) -> Output:
    """What `storyd resume ARGV` run in `cwd` prints and returns, without printing it."""
    from storyd.cli.commands.resume import output

    return output(argv, cwd)


class Captured:
    """A command's exit code, stdout bytes and stderr text."""

    __slots__ = ("code", "stderr", "stdout")

    def __init__(self, code: int, stdout: bytes, stderr: str) -> None:
        self.code = code
        self.stdout = stdout
        self.stderr = stderr


def run_cli(argv: list[str]) -> Captured:
    """`storyd ARGV` run in this process with its sys.stdout and sys.stderr captured.

    For commands that print through sys.stdout (status, check, epic, reconcile), not
    `resume` (it writes to fd 1). One at a time: the streams are the process's.
    """
    import contextlib
    import io

    from storyd.cli.main import main

    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    err = io.StringIO()
    with _capture_lock, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # a command that exits instead of returning
            code = exc.code if isinstance(exc.code, int) else 1
        out.flush()
    raw = out.buffer
    assert isinstance(raw, io.BytesIO)
    return Captured(code, raw.getvalue(), err.getvalue())
