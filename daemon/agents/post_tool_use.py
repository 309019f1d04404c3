"""`storyd hook post-tool-use`: a state file the agent just broke, told back to it.

For Claude Code's PostToolUse hook on `Write|Edit|MultiEdit`. When `tool_input.file_path`
is a state file of a known convention and it no longer parses, or it lost its units (the
version committed at HEAD had some, now none), the hook exits 2 with one stderr line naming
the cause and position: Claude Code feeds stderr back to the model, which repairs the
file. Anything else (another file, a writer holding the lock, no daemon to compare with,
no committed version to compare with, bad input): exit 0, silent.
"""

from __future__ import annotations

__all__ = ["problem"]

_LOCK_TIMEOUT = 1.0  # a writer holding the lock longer than this: say nothing


def problem(payload: dict[str, object], config: str | None, socket: str | None) -> str | None:
    """The one stderr line when the written file is a broken state file, else None."""
    from storyd.agents import hookio, source
    from storyd.core.errors import DataError, StorydError

    tool_input = payload.get("tool_input")
    if not isinstance(tool_input, dict):
        return None
    path = tool_input.get("file_path")
    cwd = payload.get("cwd")
    if isinstance(path, str) and not path.startswith("/") and isinstance(cwd, str):
        import os

        path = os.path.join(cwd, path)
    cfg = source.load_config(config)
    found = hookio.locate_state_file(path, hookio.allowed_roots(cfg))
    if found is None:
        return None
    workspace, relpath = found
    try:
        units = source.state_file_units(workspace, relpath, _LOCK_TIMEOUT)
    except DataError as exc:
        return f"storyd: {relpath} no longer parses: {exc.message}"
    except StorydError:
        return None  # gone, or a writer holds the lock: nothing to say with certainty
    broken = [u for u in units if u.error]
    if broken:
        unit = broken[0]
        return f"storyd: {relpath} unit {unit.key} no longer parses: {unit.error}"
    if not units:
        known = source.committed_units(workspace, relpath)
        if known:
            return (
                f"storyd: {relpath} holds no units any more ({known} at HEAD): "
                "the edit removed them; restore them"
            )
    return None
