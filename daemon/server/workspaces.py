"""Which workspaces the cache tracks, and the passes over them: a watch's first look
(`add`, `scan`, the warm-up's `check`), a changed path (`touch`), the verification
tick (`verify`), an unwatch's last look (`remove`).

Only the refresher thread calls these, but for `expect`, `expected`, `in_first_look`
and `in_last_look` (any thread).
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from storyd.core import storytime
from storyd.core.formats.base import nameable
from storyd.core.pipeline import find_state_files
from storyd.server.store import Workspace

if TYPE_CHECKING:
    from storyd.core.formats import Adapter
    from storyd.server.changes import Changes
    from storyd.server.events import EventLog
    from storyd.server.forward import Forwarder
    from storyd.server.install import Installer
    from storyd.server.listeners import Listeners
    from storyd.server.reads import Reads
    from storyd.server.store import Entry

__all__ = ["Look", "Workspaces"]

_OUT_OF_STEP = frozenset(("warning", "error"))  # the severities a first look sums up


@dataclass(frozen=True, slots=True)
class Look:
    """What a workspace's first look (or, with `last`, its last: an unwatch) found: its
    units, how many are out of step (have a warning or an error), the findings by
    severity (`error`, `warning`, `info`), and whether it was the start-up's warm-up
    (not a workspace watched later)."""

    workspace: str
    units: int
    units_out_of_step: int
    severities: dict[str, int]
    at_start: bool = False
    last: bool = False


def _look(ws: Workspace, entries: list[Entry], at_start: bool, *, last: bool = False) -> Look:
    severities = Counter(f.severity for e in entries for f in e.findings)
    out_of_step = sum(1 for e in entries if any(f.severity in _OUT_OF_STEP for f in e.findings))
    return Look(ws.path, len(entries), out_of_step, dict(severities), at_start, last)


class Workspaces:
    """The tracked workspaces (`tracked`, the engine's map, written only here and under
    `lock`) and the passes that read their files (through `installer`)."""

    def __init__(
        self,
        tracked: dict[str, Workspace],
        expected: set[str],
        adapters: list[Adapter],
        changes: Changes | None,
        lock: threading.Lock,
        *,
        reads: Reads,
        installer: Installer,
        forward: Forwarder,
        log: EventLog,
        looks: Listeners[Callable[[Look], None]],
    ) -> None:
        self.tracked = tracked
        self._expected = expected  # to be watched: their reads are remembered
        self.adapters = adapters
        self.changes = changes
        self.lock = lock
        self.reads = reads
        self.installer = installer
        self.forward = forward
        self.log = log
        self.looks = looks
        self._leaving: dict[str, Workspace] = {}  # unwatched, their units still leaving

    def expect(self, path: str) -> None:
        """A watch of `path` is on its way (queued on the refresher): a good answer read
        from it meanwhile is remembered as the file's last good read already."""
        with self.lock:
            self._expected.add(path)

    def expected(self, path: str) -> bool:
        """Whether a watch of `path` is on its way."""
        return path in self._expected

    def add(self, path: str, *, checked: bool = True) -> Workspace:
        """Start tracking a workspace (call `scan` next; `checked=False`: `check` after)."""
        if self.changes is not None:  # git's stamp files: staleness answers depend on them
            for stamp, _sig in storytime.stamp_files(path):
                self.changes.watch(os.path.dirname(stamp))
        with self.lock:
            self._expected.discard(path)
            return self.tracked.setdefault(path, Workspace(path, checked=checked))

    def check(self, ws: Workspace) -> None:
        """The warm-up's second pass: run the detectors on every unit, then serve them."""
        if self.installer.detect is not None and not ws.checked:
            ws.checking = True  # the installer runs the detectors from now on
            try:
                self.installer.recheck(ws)
            finally:
                ws.checked = True  # a failing detector must not leave it uncached for good
        ws.checked = True
        self._end_first_look(ws, at_start=True)

    def in_first_look(self, workspace: str) -> bool:
        """Whether a workspace's first look is under way: its events report what storyd
        found there (the state at start-up or at a new watch), not a change as it happens."""
        ws = self.tracked.get(workspace)
        return ws is not None and ws.first_look

    def in_last_look(self, workspace: str) -> bool:
        """Whether an unwatch is removing a workspace's units: its events say the units
        leave the view, not that anything was resolved."""
        return workspace in self._leaving

    def _looked(self, found: Look) -> None:
        for listener in self.looks:
            listener(found)

    def _end_first_look(self, ws: Workspace, *, at_start: bool = False) -> None:
        if not ws.first_look:
            return
        ws.first_look = False
        entries = [e for snap in list(ws.files.values()) for e in snap.entries.values()]
        self._looked(_look(ws, entries, at_start))

    def remove(self, path: str) -> bool:
        """Forget a workspace and its entries; True if it was tracked.

        The workspace leaves the view at once (one assignment: queries read directly
        from then on); then each unit leaves as a deleted file's units do: a `removed`
        event (and `resolved` for each of its findings) at a generation of its own, so a
        `subscribe {since}` client replays them and drops the units too.
        """
        with self.lock:
            self._expected.discard(path)
            ws = self.tracked.pop(path, None)
            if ws is None:
                self.reads.forget_workspace(path, latest=False)
                return False
            ws.last_look = True
            self._leaving[path] = ws
        try:
            entries = [e for snap in list(ws.files.values()) for e in snap.entries.values()]
            for entry in sorted(entries, key=lambda e: (e.state_file, e.key)):
                self.forward.removed(entry)
            self.reads.forget_workspace(path)
        finally:
            self._leaving.pop(path, None)
        self._looked(_look(ws, entries, False, last=True))
        return True

    def find_state_files(self, ws: Workspace) -> dict[str, Adapter]:
        """Every state file of every format in a workspace."""
        return find_state_files(ws.path, self.adapters)

    def scan(self, ws: Workspace, *, lost: bool = False, reread: bool = True) -> int:
        """Find every state file of a workspace, read them, and drop those that vanished.

        `lost` says events may have been missed (an overflow, a vanished folder), so
        subscribers asking to replay from before now get a fresh list instead. Without
        `reread` (the periodic rescan), a known file is read again only when it changed
        since its read (or the read was racy), or when its format's findings depend on
        the clock.
        """
        found = self.find_state_files(ws)
        for relpath in [r for r in ws.files if r not in found]:
            self.installer.drop_file(ws, relpath)
        for relpath, adapter in found.items():
            snap = ws.files.get(relpath)
            if reread or snap is None or adapter.time_sensitive or not snap.fresh(None):
                self.installer.refresh(ws, relpath, adapter, reuse=not reread)
        if lost:
            self.log.mark_lost()
        if ws.checked:  # a warm-up's first look ends with its detectors' pass (`check`)
            self._end_first_look(ws)
        return len(found)

    def owners(self, ws: Workspace, relpath: str) -> list[tuple[str, Adapter]]:
        """The state files a changed path affects (itself, or a companion's owner); never
        one whose name is not UTF-8 (formats.base.nameable: no scan finds it either)."""
        owners = []
        for adapter in self.adapters:
            owner = adapter.owner(relpath)
            if owner is not None and nameable(owner):
                owners.append((owner, adapter))
        for state_file, _key in ws.story_index.get(relpath, ()):
            snap = ws.files.get(state_file)
            if snap is not None:
                owners.append((state_file, snap.adapter))
        return owners

    def touch(self, ws: Workspace, relpath: str, *, tentative: bool = False) -> bool:
        """A path changed: refresh the state files it belongs to.

        `tentative` (a read at the very end of a write): a state file that does not
        parse is left as it was and False returned, so the caller reads it again once
        the write has settled instead of marking it unreadable at once.
        """
        seen = set()
        complete = True
        for state_file, adapter in self.owners(ws, relpath):
            if state_file not in seen:
                seen.add(state_file)
                # the state file itself: unchanged units keep their entries; a companion
                # (story file, journal) can change answers without changing unit data
                complete &= self.installer.refresh(
                    ws, state_file, adapter, reuse=state_file == relpath, tentative=tentative
                )
        return complete

    def verify(self, ws: Workspace) -> int:
        """Cheap check of every known state file (its files' stat, not the change queue);
        refresh on change."""
        changed = 0
        for relpath, snap in list(ws.files.items()):
            # by stat, not by the change queue: what the kernel never reports (a write
            # from another machine on a network file system, through mmap) shows here
            if not snap.fresh(None):
                changed += 1
                self.installer.refresh(ws, relpath, snap.adapter, reuse=True)
        return changed

    def racy(self, ws: Workspace, relpath: str) -> bool:
        """Whether a changed path's state files were read racily (read them again soon)."""
        for state_file, _adapter in self.owners(ws, relpath):
            snap = ws.files.get(state_file)
            if snap is not None and snap.racy:
                return True
        return False
