"""The one adapter between the agent integration and the rest of storyd.

Hooks and the MCP server read units through these functions and storyd.api, the same
functions the command line calls (`storyd.api.units` for status and check,
`storyd.api.resume`, `storyd.api.epic`, `storyd.api.reconciling`): no door drives
another, and nothing here captures a command's output.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.api.units import Units
    from storyd.config import Config
    from storyd.core.model import Unit

__all__ = ["committed_units", "load_config", "state_file_units", "units"]


def load_config(path: str | None) -> Config:
    """The configuration (`path`, else the default file); ConfigError when it is broken."""
    from storyd import config

    return config.load(path)


def units(
    workspace: str,
    *,
    in_flight: bool,
    socket: str | None = None,
    config: str | None = None,
    timeout_ms: int = 2000,
    codes: frozenset[str] | None = None,
) -> Units:
    """One workspace's unit summaries with their findings (the daemon's `list`, else a
    direct scan with the detectors), and which path answered: what `storyd status`
    shows. A workspace the daemon declines is noted on stderr, as the command does.
    `codes`: only findings of these codes are read (a direct scan runs only the
    detectors that declare one)."""
    import sys

    from storyd.api.units import units as listed

    found = listed([workspace], in_flight=in_flight, socket=socket, config=config,
                   timeout=timeout_ms / 1000, codes=codes)  # fmt: skip
    for note in found.notes:
        sys.stderr.write(note + "\n")
    return found


def state_file_units(workspace: str, relpath: str, lock_timeout: float) -> list[Unit]:
    """Every unit of one state file, read now under its writers' lock (DataError when it
    does not parse)."""
    from storyd.core.formats import adapter_for
    from storyd.core.pipeline import Options, read_units  # not api.answers: 0.35 ms of imports

    return read_units(workspace, adapter_for(relpath), relpath, Options(lock_timeout))


def committed_units(workspace: str, relpath: str) -> int | None:
    """How many units the file holds as committed at HEAD; None when git does not track it
    (or that version does not parse either)."""
    import os
    import subprocess
    import tempfile

    from storyd.core.children import group  # git ends with this process
    from storyd.core.errors import StorydError

    try:
        done = subprocess.run(
            ["git", "-C", workspace, "show", f"HEAD:{relpath}"],
            capture_output=True, timeout=5, check=False, process_group=group(),
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
