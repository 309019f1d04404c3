"""Hook plumbing: read Claude Code's JSON from stdin and find the workspace a path is in.

Nothing here raises on bad input: no stdin, a terminal, invalid JSON, a payload that is
not an object, a folder that does not exist or is not trusted (`Trust`) all come back as
None, so an informational hook exits 0 and prints nothing.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.config import Config
    from storyd.core.formats.base import Adapter

__all__ = [
    "MAX_INPUT", "Trust", "explain", "find_workspace", "locate_state_file", "parse_payload",
    "read_payload",
]  # fmt: skip

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
    return parse_payload(b"".join(chunks))


def parse_payload(data: bytes) -> dict[str, object] | None:
    """A hook's JSON object from its bytes, or None (too big, not JSON, not an object)."""
    if len(data) > MAX_INPUT:
        return None
    # storyd's lean reader: the C scanner json.loads uses, without `json`'s import of re
    # (and enum, functools...: 5-6 ms of a hook in an install without an editable finder)
    from storyd.core.jsonio import loads

    try:
        value = loads(data)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


class Trust:
    """Which folders hooks and MCP may read a workspace in.

    Without `[hooks] roots`: any folder the user owns (same uid), wherever it is (a dev
    container's /workspaces, /srv, /tmp): the agent runtime names it, and it runs as the
    user. With `roots`: only folders inside them. The configured workspaces and `also`
    (the MCP server's own project folder) always.
    """

    __slots__ = ("owned", "roots")

    def __init__(self, cfg: Config, also: tuple[str, ...] = ()) -> None:
        restricted = cfg.hooks.roots
        self.owned = restricted is None
        extra = [os.path.realpath(w) for w in (*cfg.workspaces, *also)]
        self.roots = [*(restricted or ()), *extra]

    def __call__(self, folder: str) -> bool:
        if _within(folder, self.roots):
            return True
        if not self.owned:
            return False
        try:
            return os.stat(folder).st_uid == os.getuid()
        except OSError:
            return False

    def why_not(self, folder: str) -> str:
        """Why `folder` is not trusted, in words for `storyd doctor` and MCP's errors."""
        if not self.owned:
            return f"outside [hooks] roots ({', '.join(self.roots)})"
        return "owned by another user (hooks read only folders you own)"


def _within(path: str, roots: list[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def _adapters() -> list[Adapter]:
    from storyd.core.formats import all_adapters

    return list(all_adapters(plugins=False))


_WALK_DEPTH = 4  # folders below a format root looked at for a state file
_WALK_FILES = 400  # names looked at, per root, before giving up


def _holds_state(folder: str, adapter: Adapter, root: str) -> bool:
    """Whether `folder/root` holds a state file of `adapter`'s format: a walk bounded
    in depth and names, so that a big `tasks/` package of source files costs little."""
    top = os.path.join(folder, root)
    seen = 0
    for here, dirs, files in os.walk(top):
        depth = here[len(top):].count(os.sep)
        dirs[:] = [] if depth >= _WALK_DEPTH else [d for d in dirs if not d.startswith(".")]
        rel = os.path.relpath(here, folder).replace(os.sep, "/")
        for name in files:
            if adapter.matches(f"{rel}/{name}"):
                return True
            seen += 1
            if seen >= _WALK_FILES:
                return False
    return False


def explain(cwd: object, trust: Trust) -> tuple[str | None, str]:
    """(the workspace holding `cwd`, "") or (None, why there is none), climbing from
    `cwd` only through trusted folders: the nearest folder with a `.git`, or with a
    format's root (plans/, specs/, tasks/, ...) that holds a state file of that format.
    A root with none (a source package named `tasks`, an empty `specs/`) does not stop
    the climb; where nothing else is found, the nearest folder with one is taken."""
    if not isinstance(cwd, str) or not cwd or "\0" in cwd:
        return None, "the agent named no folder"
    start = os.path.realpath(cwd)
    if not os.path.isdir(start):
        return None, f"{start} is not a folder"
    if not trust(start):
        return None, f"{start} is {trust.why_not(start)}"
    adapters: list[Adapter] | None = None  # loaded at the first folder without a .git
    loose: str | None = None  # the nearest folder with a format root and no state file
    folder = start
    while trust(folder):
        if any(os.path.exists(os.path.join(folder, m)) for m in _MARKERS):
            return folder, ""
        adapters = _adapters() if adapters is None else adapters
        for adapter in adapters:
            for root in adapter.roots:
                if os.path.isdir(os.path.join(folder, root)):
                    if _holds_state(folder, adapter, root):
                        return folder, ""
                    loose = loose or folder
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    if loose is not None:
        return loose, ""
    shown = ", ".join(sorted({r for a in _adapters() for r in a.roots} | set(_MARKERS)))
    return None, f"no workspace at or above {start} (none of {shown})"


def find_workspace(cwd: object, trust: Trust) -> str | None:
    """The workspace holding `cwd` (see `explain`), else None."""
    return explain(cwd, trust)[0]


def locate_state_file(path: object, trust: Trust) -> tuple[str, str] | None:
    """(workspace, workspace-relative path) when `path` is a state file (or a companion
    such as execution.json: its state file) of a known convention in a trusted folder."""
    from storyd.core.formats import claiming

    if not isinstance(path, str) or not path or "\0" in path or not os.path.isabs(path):
        return None
    full = os.path.realpath(path)
    folder = os.path.dirname(full)
    while trust(folder):
        rel = os.path.relpath(full, folder).replace(os.sep, "/")
        for adapter in claiming(rel, plugins=False):  # only the formats it may belong to
            owner = adapter.owner(rel)
            if owner is not None:
                return folder, owner
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return None
