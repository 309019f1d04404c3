"""What git looked like when each workspace was last checked against it.

A pass that checks a workspace's units against git (a watch's first read, the warm-up's
detectors, a recheck after a commit) notes git's stamp files (storytime.stamp_files) as
they were before it began; `moved` says whether they changed since. `list`, the hook op
and a detailed `resume` ask it first: a commit no recheck has taken in yet (its watch's
event still settling, or told late by FSEvents and the polling observers) makes them
check the workspace against git before they answer, as a direct read would.

The note is kept only once the pass has ended: while a recheck runs, git reads as moved
and a query's sync waits for the recheck, instead of being served the findings of
before the commit the recheck is taking in. Where the change queue watches git's
folders, `moved` is a compare while no event came; elsewhere a few `stat`s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from storyd.core.storytime import stamp_files

if TYPE_CHECKING:
    from storyd.server.changes import Changes
    from storyd.server.store import Workspace

__all__ = ["GitSeen"]

_T = TypeVar("_T")
Stamp = tuple[tuple[str, tuple[int, int, int, int, int] | None], ...]


class _Note:
    """One workspace's note: the stamp, the change queue's seq taken before it, and the
    seq at which the queue last vouched that no stamp file changed since."""

    __slots__ = ("held_at", "seq", "stamp")

    def __init__(self, stamp: Stamp, seq: int) -> None:
        self.stamp = stamp
        self.seq = seq
        self.held_at = -1


class GitSeen:
    """Git's stamp files per workspace as its last check against git found them."""

    def __init__(self, changes: Changes | None) -> None:
        self.changes = changes
        self._notes: dict[str, _Note] = {}

    def moved(self, workspace: str) -> bool:
        """Whether git's stamp files changed since the workspace was last checked against
        git, or it never was (any thread)."""
        note = self._notes.get(workspace)
        if note is None:
            return True
        changes = self.changes
        if changes is not None:
            seq = changes.drain()
            if note.held_at == seq:
                return False
            if all(changes.changed(path, note.seq) is False for path, _sig in note.stamp):
                note.held_at = seq
                return False
        return note.stamp != stamp_files(workspace)

    def forget(self, workspace: str) -> None:
        """An unwatched workspace's note goes (a watch again notes it afresh)."""
        self._notes.pop(workspace, None)

    def against(self, ws: Workspace, check: Callable[[], _T]) -> _T:
        """Run `check`, a pass that checks `ws`'s units against git, then note git's stamp
        files as taken before it (a change meanwhile counts as a move); only when the
        workspace is checked (a warm-up's first read ran no detector)."""
        seq = self.changes.drain() if self.changes is not None else 0
        stamp = stamp_files(ws.path)
        result = check()
        if ws.checked:
            self._notes[ws.path] = _Note(stamp, seq)
        return result
