"""The contract every format adapter meets, and the helpers adapters share."""

from __future__ import annotations

import os

from daemon.errors import DataError
from daemon.jsonio import JSONError, kind, loads
from daemon.locking import DEFAULT_LOCK_TIMEOUT, read_locked
from daemon.model import Unit

__all__ = ["Adapter", "Source", "load_json_object"]


class Source:
    """Where an adapter reads from: one workspace, with the lock bound to use."""

    __slots__ = ("lock_timeout", "workspace")

    def __init__(self, workspace: str, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> None:
        self.workspace = workspace
        self.lock_timeout = lock_timeout

    def path(self, relpath: str) -> str:
        """The absolute path of a workspace-relative path."""
        return os.path.join(self.workspace, relpath)

    def read(self, relpath: str, name: str = "") -> bytes:
        """The file's bytes, read under the writers' shared flock(2) lock."""
        return read_locked(self.path(relpath), self.lock_timeout, name).data

    def exists(self, relpath: str) -> bool:
        """Whether a workspace-relative path exists."""
        return os.path.exists(self.path(relpath))


def load_json_object(data: bytes, relpath: str) -> dict[str, object]:
    """Parse a state file that must hold a JSON object; DataError names file and position."""
    try:
        value = loads(data)
    except JSONError as exc:
        msg = f"{relpath}: invalid JSON: {exc}"
        raise DataError(msg) from None
    if not isinstance(value, dict):
        msg = f"{relpath}: the top level must be a JSON object, not {kind(value)}"
        raise DataError(msg)
    return value


class Adapter:
    """One state-file convention. Subclasses set the class attributes and `load`.

    name        the format's name (`epic`, `session`, ...), as in docs/formats.md
    convention  the seed convention and where its files live, for error messages
    roots       workspace-relative folders where its files live: the only places watched
    time_sensitive  its findings depend on the clock (ancient or future timestamps), so
                the daemon re-reads its files on the periodic rescan even when unchanged
    """

    name = ""
    convention = ""
    roots: tuple[str, ...] = ()
    time_sensitive = False

    def matches(self, relpath: str) -> bool:
        """Whether a workspace-relative path is one of this format's state files."""
        raise NotImplementedError

    def owner(self, relpath: str) -> str | None:
        """The state file whose units a changed companion file (story, journal) affects."""
        return relpath if self.matches(relpath) else None

    def find(self, source: Source) -> list[str]:
        """Every state file of this format in the workspace, workspace-relative."""
        found = []
        for root in self.roots:
            top = source.path(root)
            for folder, dirs, files in os.walk(top):
                dirs[:] = [d for d in dirs if not d.startswith(".")]
                rel_folder = os.path.relpath(folder, source.workspace)
                found.extend(
                    rel
                    for f in files
                    if self.matches(rel := os.path.normpath(os.path.join(rel_folder, f)))
                )
        return sorted(found)

    def load(self, source: Source, relpath: str) -> list[Unit]:
        """Read the state file (under the lock) and return its units in file order."""
        raise NotImplementedError
