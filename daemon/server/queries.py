"""What the ops read from the cache: entries that may answer now, absent units, lists,
unreadable files and counts. No disk reads but one `stat` per file an entry was read
from (read your writes); any thread may call these.

Every answer gives the findings a direct read would give at that instant
(`findings_now`): while a git operation is under way (server/operations.py) the
direct read runs no detector and says so, and so does the answer, whatever the cache
was built under; an entry built under an operation that has since ended is not served
until its workspace is checked again (`serve` reads directly, `stale_files` makes a
`list` wait for it). Units served from the last good read of a file that no longer
parses are listed as `stale`, with no findings: nothing is built on them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from storyd.core import target
from storyd.core.formats.epic import epic_file_among
from storyd.core.gitstate import OPERATION_DETECTOR
from storyd.core.model import OWN_DETECTORS
from storyd.server.operations import Operations
from storyd.server.reads import iso_utc

if TYPE_CHECKING:
    from storyd.core.model import Finding
    from storyd.core.wire import UnitSummary
    from storyd.server.changes import Changes
    from storyd.server.events import EventLog
    from storyd.server.store import Entry, Snapshot, Workspace

__all__ = ["Queries", "findings_now"]

_EPIC_MEMO = 1024  # epic ids remembered per workspace before the memo starts afresh


def findings_now(entry: Entry, under_way: tuple[Finding, ...]) -> tuple[Finding, ...]:
    """The findings a direct read gives the entry's unit now, `under_way` being the
    workspace's operation-in-progress finding (or none): during an operation the unit's
    own findings (its format's, the engine's, its history's) and that one, the
    detectors' left out (they run on a transient HEAD); after it, the entry's less the
    operation's (the last detectors' findings, until its recheck lands). The entry's
    own tuple when that is what it holds."""
    if entry.error is not None:  # it never reached the detectors, nor would a direct read
        return entry.findings
    if under_way:
        now = tuple(f for f in entry.findings if f.detector in OWN_DETECTORS) + under_way
    elif entry.under_way:
        now = tuple(f for f in entry.findings if f.detector != OPERATION_DETECTOR)
    else:
        return entry.findings
    return entry.findings if now == entry.findings else now


class Queries:
    """The cache's query face over `workspaces` (the engine's map, read, never written)."""

    def __init__(
        self,
        workspaces: Mapping[str, Workspace],
        changes: Changes | None,
        log: EventLog,
        counters: Mapping[str, int],
    ) -> None:
        self.workspaces = workspaces
        self.changes = changes
        self.log = log
        self.counters = counters
        self.operations = Operations(changes)

    def lookup(
        self, workspace: str, state_file: str, key: str, *, checked: bool = True
    ) -> Entry | None:
        """The cached entry of one unit, or None; no look at the disk (events, tests).

        With `checked` (the default) an entry whose detectors have not run yet (warm-up)
        is not an answer: the caller reads directly, findings included.
        """
        ws = self._tracked(workspace)
        if ws is None or (checked and not ws.checked):
            return None
        return ws.entry(state_file, key)

    def serve(
        self, workspace: str, state_file: str, key: str, *, checked: bool = True
    ) -> Entry | None:
        """The entry that may answer a query now, or None: the query reads directly.

        Like `lookup`, and only while every file the entry was read from is unchanged
        since (one `stat` each) and its read was not racy: read your writes.
        """
        ws = self._tracked(workspace)
        if ws is None or (checked and not ws.checked):
            return None
        snap = ws.files.get(state_file)
        if snap is None:
            return None
        entry = snap.entries.get(key)
        if entry is None:
            return None
        changes = self.changes
        if changes is not None:
            changes.drain()
        if not snap.serves(entry, changes):
            return None
        under_way = self.operations.findings(workspace)
        if entry.under_way and not under_way:
            return None  # an operation it was built under ended: its recheck is due
        found = findings_now(entry, under_way)
        return entry if found is entry.findings else entry.with_findings(found)

    def epic_file(self, workspace: str, epic_id: str) -> str | None:
        """An epic's state file from the files the cache knows (no disk, for the query
        path), or None while the workspace has not been read. Two claimants: exit 64."""
        ws = self._tracked(workspace)
        if ws is None or not ws.files:
            return None
        version = ws.files_version
        known = ws.epic_memo.get(epic_id)
        if known is not None and known[0] == version:
            return known[1]
        found = epic_file_among(list(ws.files), epic_id)
        if len(ws.epic_memo) > _EPIC_MEMO:
            ws.epic_memo.clear()
        ws.epic_memo[epic_id] = (version, found)
        return found

    def sole_unit(self, workspace: str, state_file: str) -> str | None:
        """The key of a state file's only unit (a single-unit file needs no `unit`), or of
        the one its format calls current (target.current_unit)."""
        ws = self._tracked(workspace)
        snap = ws.files.get(state_file) if ws else None
        if snap is None or not snap.keys:
            return None
        if len(snap.keys) == 1:
            return snap.keys[0]
        current = target.current_unit([e.unit for e in snap.entries.values()])
        return None if current is None else current.key

    def known_absent(self, workspace: str, state_file: str, key: str) -> bool:
        """Whether the file surely lacks `key` now: read well, unchanged since, and its
        units (all installed at once) do not include it. Then the answer is
        STORY_NOT_IN_STATE with no disk read."""
        ws = self._tracked(workspace)
        snap = ws.files.get(state_file) if ws else None
        if self.changes is not None:
            self.changes.drain()
        return bool(
            snap is not None
            and snap.error is None
            and snap.unreadable_since is None
            and key not in snap.entries
            and snap.fresh(self.changes)
        )

    def stale_files(self, workspace: str | None = None) -> list[tuple[str, Snapshot]]:
        """The snapshots whose files changed since they were read (or whose read was
        racy), and those built under a git operation that has ended: a `list` reads
        them again (and checks their workspace again) before it answers."""
        spaces = self._spaces(workspace)
        if self.changes is not None:
            self.changes.drain()
        found = []
        for ws in spaces:
            ended: bool | None = None  # looked at once, for the first snapshot that asks
            for snap in list(ws.files.values()):
                if not snap.fresh(self.changes):
                    found.append((ws.path, snap))
                elif snap.under_way:
                    if ended is None:
                        ended = not self.operations.findings(ws.path)
                    if ended:
                        found.append((ws.path, snap))
        return found

    def read_before(self, ws: Workspace, arrived: int) -> list[str]:
        """A workspace's state files read before `arrived` (wall-clock ns) and changed
        since (a query's `sync` reads them again)."""
        if self.changes is not None:
            self.changes.drain()
        return [snap.relpath for snap in list(ws.files.values())
                if snap.proof.started < arrived and not snap.fresh(self.changes)]  # fmt: skip

    def behind_git(self, ws: Workspace) -> bool:
        """Whether some of a workspace's entries were built under a git operation that
        has ended (check it again: `Refresher.sync`)."""
        if not any(snap.under_way for snap in list(ws.files.values())):
            return False
        if self.changes is not None:
            self.changes.drain()
        return not self.operations.findings(ws.path)

    def unreadable(self, workspace: str | None = None) -> list[dict[str, object]]:
        """State files whose latest read failed: never read well, or torn since."""
        found: list[dict[str, object]] = []
        for ws in self._spaces(workspace):
            for relpath, snap in sorted(ws.files.items()):
                error = snap.error.message if snap.error else snap.unreadable_reason
                if error is None:
                    continue
                since = snap.unreadable_since
                found.append({
                    "workspace": ws.path,
                    "stateFile": relpath,
                    "format": snap.adapter.name,
                    "error": error,
                    "since": iso_utc(since) if since is not None else None,
                    "units": len(snap.keys),
                })
        return found

    def unreadable_since(self, workspace: str, relpath: str) -> float:
        """Since when a file has been unreadable, as the cache knows it (else now)."""
        ws = self._tracked(workspace)
        snap = ws.files.get(relpath) if ws else None
        since = snap.unreadable_since if snap is not None else None
        return since if since is not None else time.time()

    def summaries(
        self, workspace: str | None = None, *, detail: bool = False, in_flight: bool = False
    ) -> list[UnitSummary]:
        """Unit summaries in a stable order (workspace, state file, unit), with the
        findings a direct read would give now (`findings_now`); the units of a file
        that no longer parses marked `stale`, with none."""
        if self.changes is not None:
            self.changes.drain()
        units: list[UnitSummary] = []
        for ws in self._spaces(workspace):
            under_way = self.operations.findings(ws.path)
            for snap in list(ws.files.values()):
                stale = snap.stale
                units.extend(
                    e.summary(detail=detail, findings=findings_now(e, under_way), stale=stale)
                    for e in snap.entries.values()
                )
        if in_flight:
            units = [u for u in units if u["resumePoint"] != "all-done"]
        units.sort(key=lambda u: (str(u["workspace"]), str(u["stateFile"]), str(u["unit"])))
        return units

    def workspace_count(self) -> int:
        """How many workspaces are tracked."""
        return len(self.workspaces)

    def stats(self) -> dict[str, object]:
        """The cache's part of `stats`: counters, workspaces, units, the generation."""
        spaces = list(self.workspaces.items())
        return {
            "refreshes": self.counters["refreshes"],
            "unreadable": self.counters["unreadable"],
            "events": self.log.count,
            "workspaces": sorted(path for path, _ in spaces),
            "units": (units := sum(ws.units for _, ws in spaces)),
            "stories": units,  # the same count under its 0.1 name, kept for old clients
            "generation": self.log.generation,
        }

    def entries(self, workspace: str | None = None) -> list[Entry]:
        """A snapshot of the entries, of one workspace or of all."""
        return [
            e
            for ws in self._spaces(workspace)
            for snap in list(ws.files.values())
            for e in snap.entries.values()
        ]

    def _tracked(self, workspace: str) -> Workspace | None:
        """The workspace's cache, None while its folder is not the one it was read from
        (`Workspace.moved`: exchanged, moved away and replaced): read directly then."""
        ws = self.workspaces.get(workspace)
        return None if ws is None or ws.moved else ws

    def _spaces(self, workspace: str | None) -> list[Workspace]:
        if workspace is None:
            return [ws for ws in list(self.workspaces.values()) if not ws.moved]
        ws = self._tracked(workspace)
        return [ws] if ws is not None else []
