"""Hook plumbing: read Claude Code's JSON from stdin and find the workspace a path is in.

Nothing here raises on bad input: no stdin, a terminal, invalid JSON, a payload that is
not an object, a `cwd` that does not exist or lies outside the allowed roots all come
back as None, so an informational hook exits 0 and prints nothing.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.config import Config

__all__ = ["MAX_INPUT", "allowed_roots", "find_workspace", "locate_state_file", "read_payload"]

MAX_INPUT = 4 << 20  # a hook's JSON (a Write's content included) larger than this is ignored
_READ_TIMEOUT = 5.0  # a stdin left open without data never holds the agent longer than this
_MARKERS = (".git",)


def read_payload(fd: int = 0, timeout: float = _READ_TIMEOUT) -> dict[str, object] | None:
    """The hook's JSON object from `fd`, or None (no input, a tty, too big, not an object)."""
    import select
    import time

    try:
        if os.isatty(fd):
            return None
    except OSError:
        return None
    chunks: list[bytes] = []
    size = 0
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_INPUT:
                return None
            chunks.append(chunk)
    except (OSError, ValueError):
        return None
    import json  # orjson's import costs a hook more than the parse saves

    try:
        value = json.loads(b"".join(chunks))
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def allowed_roots(cfg: Config) -> list[str]:
    """Folders whose workspaces hooks and MCP may read: `[hooks] roots`, else the home
    folder; the configured workspaces always."""
    roots = cfg.hooks.roots
    if roots is None:
        roots = [os.path.realpath(os.path.expanduser("~"))]
    return [*roots, *(os.path.realpath(w) for w in cfg.workspaces)]


def _within(path: str, roots: list[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def _format_roots() -> tuple[str, ...]:
    from storyd.core.formats import all_adapters

    return tuple(root for adapter in all_adapters(plugins=False) for root in adapter.roots)


def find_workspace(cwd: object, roots: list[str]) -> str | None:
    """The workspace holding `cwd`: the nearest folder up from it with a format's root
    (plans/, agent-output/, ...) or a `.git`, never above the allowed roots; else None."""
    if not isinstance(cwd, str) or not cwd or "\0" in cwd:
        return None
    start = os.path.realpath(cwd)
    if not os.path.isdir(start) or not _within(start, roots):
        return None
    markers = (*_format_roots(), *_MARKERS)
    folder = start
    while _within(folder, roots):
        if any(os.path.exists(os.path.join(folder, m)) for m in markers):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return None


def locate_state_file(path: object, roots: list[str]) -> tuple[str, str] | None:
    """(workspace, workspace-relative path) when `path` is a state file of a known
    convention inside the allowed roots; else None."""
    from storyd.core.formats import all_adapters

    if not isinstance(path, str) or not path or "\0" in path or not os.path.isabs(path):
        return None
    full = os.path.realpath(path)
    if not _within(full, roots):
        return None
    adapters = all_adapters(plugins=False)
    folder = os.path.dirname(full)
    while _within(folder, roots):
        rel = os.path.relpath(full, folder).replace(os.sep, "/")
        if any(a.matches(rel) for a in adapters):
            return folder, rel
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return None
