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
                   timeout=timeout_ms / 1000, codes=codes,
                   claude_lists=False)  # as the daemon's hook op: session-start adds its own
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
    from storyd.core.switches import CONFIG

    cap = CONFIG.max_state_bytes  # a committed blob is the repository's: read it bounded
    try:
        with subprocess.Popen(
            ["git", "-C", workspace, "show", f"HEAD:{relpath}"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, process_group=group(),
        ) as proc:  # fmt: skip
            assert proc.stdout is not None
            blob = _read_bounded(proc.stdout.fileno(), cap + 1, 5.0)
            if blob is None or len(blob) > cap:
                proc.kill()
            code = proc.wait(timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if blob is None:
        return None
    if code != 0 or len(blob) > cap:
        return None
    with tempfile.TemporaryDirectory(prefix="storyd-head-") as copy:
        path = os.path.join(copy, relpath)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(blob)
        try:
            return len(state_file_units(copy, relpath, 1.0))
        except StorydError:
            return None


def _read_bounded(fd: int, limit: int, seconds: float) -> bytes | None:
    """Up to `limit` bytes from a pipe until its end, within `seconds` (None: too slow)."""
    import os
    import select
    import time

    deadline = time.monotonic() + seconds
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, min(1 << 20, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
