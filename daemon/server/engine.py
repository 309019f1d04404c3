"""The cache's writer: reads state files through the pipeline, installs per-file snapshots
in the store, and publishes what changed to the event log.

One refresher thread calls `refresh`, `scan`, `verify`, `recheck`, `check` and
`remove_workspace`; the server's event loop and the direct-read pool only read
(`serve`, `known_absent`, `epic_file`, `summaries`) and, for a miss, `read_now`.

Three rules keep every answer one a direct read would give (docs/design.md):
- A file's units change all at once: the refresher builds a new `Snapshot` off to the
  side and installs it with one assignment (store.py).
- A cached entry answers only while the files it was read from still match `os.stat`
  and its read was not racy (`Snapshot.serves`); else the query reads directly.
- The last good read of a file is never lost: every read of a file, the refresher's
  and the pool's, runs under that file's lock and a good one becomes the file's last
  good read (`read_now`), which a torn file's answers then come from.

A write to a state file costs what changed, not the file: a unit whose node in the
parsed file is identical to the last read's (a 16-byte digest per unit,
`Snapshot.prints`) keeps its unit object, so it is neither built, nor answered, nor
checked again; any other unit whose data is the same as its cached entry's
(`model.same_data`) keeps its entry, rendered bytes and findings. A change to a
companion (story file, journal), a rescan or a git change rebuilds every unit of the
file.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from hashlib import blake2b
from typing import TYPE_CHECKING

from storyd.core import pipeline, storytime
from storyd.core.errors import DataError, StateFileMissing, StorydError
from storyd.core.formats import Adapter, all_adapters
from storyd.core.formats.epic import epic_file_among
from storyd.core.model import OWN_DETECTORS, Finding, Unit, same_data
from storyd.core.pipeline import Answer, FileRead, Options, find_state_files
from storyd.server.events import EventLog, Sink
from storyd.server.listeners import Listeners
from storyd.server.store import Entry, PassMark, Proof, Snapshot, StoryProof, Workspace

if TYPE_CHECKING:
    from collections import deque

    from storyd.core.formats.base import Reuse
    from storyd.core.pipeline import Detect
    from storyd.core.wire import EventKind, UnitEvent, UnitSummary
    from storyd.server.changes import Changes

__all__ = ["Engine", "Entry", "Look", "Workspace"]

_OUT_OF_STEP = frozenset(("warning", "error"))  # the severities a first look sums up
_FILE_LOCKS = 64


def _now_iso(stamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp))


class Draft:
    """A freshly computed answer, compared with the cached entry before it replaces it."""

    __slots__ = ("answer", "error", "findings", "proof", "racy", "unit")

    def __init__(
        self,
        unit: Unit,
        answer: Answer | None,
        error: StorydError | None,
        findings: tuple[Finding, ...],
        proof: StoryProof | None = None,
        racy: bool = False,
    ) -> None:
        self.unit = unit
        self.answer = answer
        self.error = error
        self.findings = findings
        self.proof = proof
        self.racy = racy

    def answers_as(self, entry: Entry) -> bool:
        """Whether this draft would answer exactly as `entry` does."""
        line = self.answer.line if self.answer else b""
        warnings = tuple(self.answer.warnings) if self.answer else ()
        return entry.answers_as(line, warnings, self.findings, self.error)


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


def _pass_mark(workspace: str, changes: Changes | None) -> tuple[PassMark, bool]:
    """The mark a pass over a file's units starts with, and whether git's stamp was
    too new to trust by stat (a unit that asks git is then racy)."""
    seq = changes.drain() if changes is not None else 0
    started = time.time_ns()
    git = Proof(storytime.stamp_files(workspace), seq, started)
    return PassMark(seq, started, git), git.racy(changes)


class Engine:
    """Workspaces and their snapshots, the event log, and the refresh policy."""

    def __init__(
        self,
        options: Options | None = None,
        adapters: list[Adapter] | None = None,
        detect: Detect | None = None,
        changes: Changes | None = None,
        *,
        events: EventLog | None = None,
        git_busy: Callable[[str], bool] | None = None,
        hold_tips: Callable[[bool], None] | None = None,
    ) -> None:
        """`detect` checks a unit (None: no detectors); `changes` is the daemon's kernel
        change queue (None: every check is a stat); `git_busy` says a workspace's git is
        mid-operation (its detectors wait); `hold_tips` is called with True before a
        pass over a workspace's units and False after it (detection.tips_held_by)."""
        self.options = options or Options()
        self.changes = changes
        self.adapters = adapters if adapters is not None else all_adapters()
        self.detect = detect
        self.git_busy: Callable[[str], bool] = git_busy or (lambda _workspace: False)
        self.hold_tips: Callable[[bool], None] = hold_tips or (lambda _on: None)
        # workspaces whose detectors waited for git: the refresher rechecks them once
        # git settles (`take_deferred`)
        self._deferred: set[str] = set()
        # hear each workspace's first look end (what it found) and its last (unwatched)
        self.looks: Listeners[Callable[[Look], None]] = Listeners("looks")
        self.log = events if events is not None else EventLog()
        self.workspaces: dict[str, Workspace] = {}
        self._leaving: dict[str, Workspace] = {}  # unwatched, their units still leaving
        self._expected: set[str] = set()  # to be watched: their reads are remembered
        self.counters = {"refreshes": 0, "unreadable": 0, "checked": 0}
        self._lock = threading.Lock()
        self._file_locks = [threading.Lock() for _ in range(_FILE_LOCKS)]
        self._last_good: dict[tuple[str, str], FileRead] = {}
        # each file's latest read and when it began (monotonic ns): shared by queries
        # that arrived before it began
        self._latest: dict[tuple[str, str], tuple[int, FileRead]] = {}

    # -- the event log's face (kept for callers of 0.1's engine) --------------

    @property
    def instance(self) -> str:
        """This run's identity, the first half of every clock."""
        return self.log.instance

    @property
    def generation(self) -> int:
        """The newest generation."""
        return self.log.generation

    @property
    def sinks(self) -> Listeners[Sink]:
        """Who receives every event (subscribers' transport, notifications, ...)."""
        return self.log.sinks

    @property
    def history(self) -> deque[tuple[int, str, bytes]]:
        """The lines kept for replay."""
        return self.log.history

    @history.setter
    def history(self, value: deque[tuple[int, str, bytes]]) -> None:
        self.log.history = value

    @property
    def lost_before(self) -> int:
        """The newest generation a replay cannot give."""
        return self.log.lost_before

    def clock(self) -> str:
        """`<instance>:<generation>`, carried by every answer and event."""
        return self.log.clock()

    def replay(self, since: str, workspace: str | None) -> list[bytes] | None:
        """Event lines after clock `since`, or None when they cannot all be replayed."""
        return self.log.replay(since, workspace)

    # -- reading (any thread) -------------------------------------------------

    def lookup(
        self, workspace: str, state_file: str, key: str, *, checked: bool = True
    ) -> Entry | None:
        """The cached entry of one unit, or None; no look at the disk (events, tests).

        With `checked` (the default) an entry whose detectors have not run yet (warm-up)
        is not an answer: the caller reads directly, findings included.
        """
        ws = self.workspaces.get(workspace)
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
        ws = self.workspaces.get(workspace)
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
        return entry if snap.serves(entry, changes) else None

    def epic_file(self, workspace: str, epic_id: str) -> str | None:
        """An epic's state file from the files the cache knows (no disk, for the query
        path), or None while the workspace has not been read. Two claimants: exit 64."""
        ws = self.workspaces.get(workspace)
        if ws is None or not ws.files:
            return None
        version = ws.files_version
        known = ws.epic_memo.get(epic_id)
        if known is not None and known[0] == version:
            return known[1]
        found = epic_file_among(list(ws.files), epic_id)
        if len(ws.epic_memo) > 1024:
            ws.epic_memo.clear()
        ws.epic_memo[epic_id] = (version, found)
        return found

    def sole_unit(self, workspace: str, state_file: str) -> str | None:
        """The key of a state file's only unit (a single-unit file needs no `unit`)."""
        ws = self.workspaces.get(workspace)
        snap = ws.files.get(state_file) if ws else None
        return snap.keys[0] if snap is not None and len(snap.keys) == 1 else None

    def known_absent(self, workspace: str, state_file: str, key: str) -> bool:
        """Whether the file surely lacks `key` now: read well, unchanged since, and its
        units (all installed at once) do not include it. Then the answer is
        STORY_NOT_IN_STATE with no disk read."""
        ws = self.workspaces.get(workspace)
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
        racy): a `list` reads them again before it answers."""
        spaces = self._spaces(workspace)
        if self.changes is not None:
            self.changes.drain()
        return [
            (ws.path, snap)
            for ws in spaces
            for snap in list(ws.files.values())
            if not snap.fresh(self.changes)
        ]

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
                    "since": _now_iso(since) if since is not None else None,
                    "units": len(snap.keys),
                })
        return found

    def summaries(
        self, workspace: str | None = None, *, detail: bool = False, in_flight: bool = False
    ) -> list[UnitSummary]:
        """Unit summaries in a stable order (workspace, state file, unit)."""
        units = [e.summary(detail=detail) for e in self.entries(workspace)]
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
            "generation": self.generation,
        }

    def _spaces(self, workspace: str | None) -> list[Workspace]:
        if workspace is None:
            return list(self.workspaces.values())
        ws = self.workspaces.get(workspace)
        return [ws] if ws is not None else []

    def entries(self, workspace: str | None = None) -> list[Entry]:
        """A snapshot of the entries, of one workspace or of all."""
        return [
            e
            for ws in self._spaces(workspace)
            for snap in list(ws.files.values())
            for e in snap.entries.values()
        ]

    # -- reading a file now (refresher and pool) ------------------------------

    def _file_lock(self, workspace: str, relpath: str) -> threading.Lock:
        return self._file_locks[hash((workspace, relpath)) % _FILE_LOCKS]

    def read(
        self,
        workspace: str,
        relpath: str,
        adapter: Adapter,
        reuse: Reuse | None = None,
        *,
        since: int | None = None,
    ) -> FileRead:
        """Read one state file under its lock; a good read becomes its last good read.

        Every read of a file, the refresher's and the pool's, runs under the same lock,
        so reads of one file end in the order of what they saw: the last good read is
        always the newest good one. With `since` (a query's arrival, monotonic ns), the
        file's latest read is shared when it began after the query arrived, or when the
        change queue says nothing it read changed since it began: queries arriving
        while the refresher reads a file wait for that read instead of making another.
        """
        changes = self.changes
        key = (workspace, relpath)
        with self._file_lock(workspace, relpath):
            if since is not None:
                began, latest = self._latest.get(key, (-1, None))
                if latest is not None and (began >= since or self._still(latest)):
                    return latest
            began = time.monotonic_ns()
            seq = 0
            if changes is not None:
                changes.watch(os.path.dirname(os.path.join(workspace, relpath)))
                seq = changes.drain()
            got = pipeline.read_file(workspace, adapter, relpath, self.options, reuse)
            got.seq = seq
            if changes is not None:  # the next read of what it read is covered
                for path, _sig in got.deps:
                    changes.watch(os.path.dirname(path))
            if workspace in self.workspaces or workspace in self._expected:
                self._latest[key] = (began, got)
                if got.error is None:
                    self._last_good[key] = got
            if isinstance(got.error, StateFileMissing):
                self._last_good.pop(key, None)
            return got

    def _still(self, got: FileRead) -> bool:
        """Whether nothing a read read has changed since it began (the change queue
        says so; never by stat alone, whose racy window a fresh read avoids)."""
        changes = self.changes
        if changes is None or not got.deps:
            return False
        changes.drain()
        return all(changes.changed(path, got.seq) is False for path, _sig in got.deps)

    def read_now(
        self, workspace: str, relpath: str, adapter: Adapter, since: int | None = None
    ) -> tuple[FileRead, str | None]:
        """A cache miss's read: the file as it is now (read after `since`, a query's
        arrival), or, when it does not parse or its lock is held past the bound, its
        last good read and why (None: read well). Units unchanged since the cached
        snapshot are that snapshot's, not built again."""
        ws = self.workspaces.get(workspace)
        snap = ws.files.get(relpath) if ws is not None else None
        healthy = snap is not None and snap.error is None and snap.unreadable_since is None
        reuse = self._reuser(snap, {}, reuse=True) if healthy else None
        got = self.read(workspace, relpath, adapter, reuse, since=since)
        if isinstance(got.error, DataError) or (got.error is not None and got.error.code == 75):
            good = self._last_good.get((workspace, relpath))
            if good is not None:
                return good, got.error.message
        return got, None

    def unreadable_finding(self, relpath: str, reason: str, since: float) -> Finding:
        """The finding a last good answer carries while its file is unreadable."""
        message = (
            f"{relpath} unreadable since {_now_iso(since)}: {reason}; "
            "serving the last good answer"
        )
        return Finding("engine", "state-unreadable", "error", message)

    def unreadable_since(self, workspace: str, relpath: str) -> float:
        """Since when a file has been unreadable, as the cache knows it (else now)."""
        ws = self.workspaces.get(workspace)
        snap = ws.files.get(relpath) if ws else None
        since = snap.unreadable_since if snap is not None else None
        return since if since is not None else time.time()

    # -- workspaces -----------------------------------------------------------

    def expect(self, path: str) -> None:
        """A watch of `path` is on its way (queued on the refresher): a good answer read
        from it meanwhile is remembered as the file's last good read already."""
        with self._lock:
            self._expected.add(path)

    def expected(self, path: str) -> bool:
        """Whether a watch of `path` is on its way."""
        return path in self._expected

    def add_workspace(self, path: str, *, checked: bool = True) -> Workspace:
        """Start tracking a workspace (call `scan` next; `checked=False`: `check` after)."""
        if self.changes is not None:  # git's stamp files: staleness answers depend on them
            for stamp, _sig in storytime.stamp_files(path):
                self.changes.watch(os.path.dirname(stamp))
        with self._lock:
            self._expected.discard(path)
            return self.workspaces.setdefault(path, Workspace(path, checked=checked))

    def check(self, ws: Workspace) -> None:
        """The warm-up's second pass: run the detectors on every unit, then serve them."""
        if self.detect is not None and not ws.checked:
            ws.checking = True  # _build runs the detectors from now on
            try:
                self.recheck(ws)
            finally:
                ws.checked = True  # a failing detector must not leave it uncached for good
        ws.checked = True
        self._end_first_look(ws, at_start=True)

    def in_first_look(self, workspace: str) -> bool:
        """Whether a workspace's first look is under way: its events report what storyd
        found there (the state at start-up or at a new watch), not a change as it happens."""
        ws = self.workspaces.get(workspace)
        return ws is not None and ws.first_look

    def in_last_look(self, workspace: str) -> bool:
        """Whether an unwatch is removing a workspace's units: its events say the units
        leave the view, not that anything was resolved."""
        return workspace in self._leaving

    def _looked(self, found: Look) -> None:
        for listener in self.looks:
            listener(found)

    def take_deferred(self) -> set[str]:
        """The workspaces whose detectors waited for git since the last call (refresher)."""
        deferred, self._deferred = self._deferred, set()
        return deferred

    def use_detectors(self, detect: Detect | None, hold_tips: Callable[[bool], None]) -> None:
        """New detectors (a reload), from the next unit built (refresher)."""
        self.detect = detect
        self.hold_tips = hold_tips

    def _end_first_look(self, ws: Workspace, *, at_start: bool = False) -> None:
        if not ws.first_look:
            return
        ws.first_look = False
        entries = [e for snap in list(ws.files.values()) for e in snap.entries.values()]
        self._looked(_look(ws, entries, at_start))

    def remove_workspace(self, path: str) -> bool:
        """Forget a workspace and its entries; True if it was tracked.

        The workspace leaves the view at once (one assignment: queries read directly
        from then on); then each unit leaves as a deleted file's units do: a `removed`
        event (and `resolved` for each of its findings) at a generation of its own, so a
        `subscribe {since}` client replays them and drops the units too.
        """
        with self._lock:
            self._expected.discard(path)
            ws = self.workspaces.pop(path, None)
            if ws is None:
                for key in [k for k in self._last_good if k[0] == path]:
                    self._last_good.pop(key, None)
                return False
            ws.last_look = True
            self._leaving[path] = ws
        try:
            entries = [e for snap in list(ws.files.values()) for e in snap.entries.values()]
            for entry in sorted(entries, key=lambda e: (e.state_file, e.key)):
                self._emit_removed(entry)
            for key in [k for k in self._last_good if k[0] == path]:
                self._last_good.pop(key, None)
            for key in [k for k in self._latest if k[0] == path]:
                self._latest.pop(key, None)
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
            self._drop_file(ws, relpath)
        for relpath, adapter in found.items():
            snap = ws.files.get(relpath)
            if reread or snap is None or adapter.time_sensitive or not snap.fresh(None):
                self.refresh(ws, relpath, adapter, reuse=not reread)
        if lost:
            self.log.mark_lost()
        if ws.checked:  # a warm-up's first look ends with its detectors' pass (`check`)
            self._end_first_look(ws)
        return len(found)

    def owners(self, ws: Workspace, relpath: str) -> list[tuple[str, Adapter]]:
        """The state files a changed path affects (itself, or a companion's owner)."""
        owners = []
        for adapter in self.adapters:
            owner = adapter.owner(relpath)
            if owner is not None:
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
                complete &= self.refresh(
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
                self.refresh(ws, relpath, snap.adapter, reuse=True)
        return changed

    def racy(self, ws: Workspace, relpath: str) -> bool:
        """Whether a changed path's state files were read racily (read them again soon)."""
        for state_file, _adapter in self.owners(ws, relpath):
            snap = ws.files.get(state_file)
            if snap is not None and snap.racy:
                return True
        return False

    # -- refreshing (the refresher thread) ------------------------------------

    def refresh(
        self,
        ws: Workspace,
        relpath: str,
        adapter: Adapter,
        *,
        reuse: bool = False,
        tentative: bool = False,
    ) -> bool:
        """Re-read one state file and install its new snapshot; emit what changed.

        With `reuse` (the state file itself changed, nothing else), a unit whose data is
        unchanged keeps its entry as it is: no staleness read, render or detectors.
        False when `tentative` and the file did not parse (nothing was changed).
        """
        self.counters["refreshes"] += 1
        old = ws.files.get(relpath)
        healthy = old is not None and old.error is None and old.unreadable_since is None
        prints: dict[str, bytes] = {}
        reuser = self._reuser(old, prints, reuse=reuse and healthy)
        got = self.read(ws.path, relpath, adapter, reuser)
        error = got.error
        if isinstance(error, StateFileMissing) or (error is not None and error.code == 64):
            self._drop_file(ws, relpath)  # gone, or a link out of the workspace
            return True
        if error is not None:
            if tentative and isinstance(error, DataError):
                return False
            self._mark_unreadable(ws, relpath, adapter, old, got)
            return True
        assert got.units is not None
        self._install(ws, relpath, adapter, self._proof(got), got.units, old,
                      reuse=reuse and healthy, prints=prints)
        return True

    @staticmethod
    def _proof(got: FileRead) -> Proof:
        return Proof(got.deps, got.seq, got.started_ns)

    @staticmethod
    def _reuser(old: Snapshot | None, prints: dict[str, bytes], *, reuse: bool) -> Reuse:
        """The `reuse` callback of one read: record each node's digest in `prints` and,
        with `reuse`, hand back the cached unit of a node that has not changed."""
        known = old.prints if old is not None else {}
        entries = old.entries if old is not None else {}

        def reuse_unit(key: str, node: dict[str, object]) -> Unit | None:
            # repr, not a JSON dump: exact for every value either parser yields
            # (1 and 1.0 and True differ; a float too large for JSON is not null)
            digest = blake2b(repr(node).encode("utf-8", "surrogatepass"), digest_size=16).digest()
            prints[key] = digest
            if not reuse or known.get(key) != digest:
                return None
            entry = entries.get(key)
            return entry.unit if entry is not None else None

        return reuse_unit

    def recheck(self, ws: Workspace) -> None:
        """Re-run staleness and detectors on every unit (after a git change); no file reads."""
        self.hold_tips(True)
        try:
            for relpath, snap in list(ws.files.items()):
                if snap.error is not None:
                    continue
                units = [snap.entries[k].unit for k in snap.keys]
                self._install(ws, relpath, snap.adapter, snap.proof, units, snap,
                              force=True, prints=snap.prints,
                              unreadable=(snap.unreadable_since, snap.unreadable_reason))
        finally:
            self.hold_tips(False)

    def _build(
        self,
        ws: Workspace,
        unit: Unit,
        extra: tuple[Finding, ...],
        git_busy: bool,
        force: bool,
        old: Entry | None,
        look: tuple[PassMark, bool],
    ) -> Draft:
        story = os.path.join(ws.path, unit.story_file) if unit.story_file else None
        story_sig = pipeline.signature(story) if story else None
        try:
            answer = pipeline.answer(ws.path, unit, self.options)
        except StorydError as exc:
            return Draft(unit, None, exc, unit.findings + extra)
        proof = None
        racy = False
        if story:
            mark, git_racy = look
            proof = StoryProof(story, story_sig, mark, answer.asked_git)
            changes = self.changes
            covered = changes is not None and changes.changed(story, mark.seq) is not None
            racy = (not covered and pipeline.is_racy(story_sig, mark.started)) or (
                answer.asked_git and git_racy
            )
        findings = unit.findings + extra
        if self.detect is None or not (ws.checked or ws.checking):
            return Draft(unit, answer, None, findings, proof, racy)
        kept = tuple(f for f in old.findings if f.detector not in OWN_DETECTORS) if old else ()
        if git_busy:
            # Mid-rebase every rewritten commit looks unreachable: keep the detectors'
            # last findings and recheck once the operation ends.
            findings += kept
            self._deferred.add(ws.path)
        elif (
            old is not None and not force and old.line == answer.line and same_data(old.unit, unit)
        ):
            findings += kept  # nothing a detector reads changed (git changes force a recheck)
        else:
            self.counters["checked"] += 1
            findings += self.detect(ws.path, unit, answer)
        return Draft(unit, answer, None, findings, proof, racy)

    def _install(
        self,
        ws: Workspace,
        relpath: str,
        adapter: Adapter,
        proof: Proof,
        units: Iterable[Unit],
        old: Snapshot | None,
        *,
        force: bool = False,
        reuse: bool = False,
        prints: Mapping[str, bytes] | None = None,
        unreadable: tuple[float | None, str | None] = (None, None),
    ) -> None:
        """Build a file's new snapshot off to the side, install it with one assignment,
        then publish what changed. `force` reruns the detectors on unchanged units too;
        `reuse` keeps the entry of a unit whose data is unchanged, untouched."""
        since, reason = unreadable
        extra = (self.unreadable_finding(relpath, str(reason), since),) if since else ()
        busy = self.detect is not None and self.git_busy(ws.path)
        previous = old.entries if old is not None else {}
        entries: dict[str, Entry] = {}
        changed: list[tuple[Entry, Entry | None]] = []
        racy = proof.racy(self.changes)
        # git's stamp files are looked at before git is (the pin): a commit in between
        # makes the proof fail, never an answer from before it pass for one after
        look = _pass_mark(ws.path, self.changes)
        storytime.pin(ws.path)  # one look at git for every unit of this file
        try:
            for unit in units:
                prev = previous.get(unit.key)
                if reuse and prev is not None and prev.error is None and not prev.racy and (
                    prev.unit is unit or same_data(prev.unit, unit)
                ):
                    entries[unit.key] = prev
                    continue
                draft = self._build(ws, unit, extra, busy, force, prev, look)
                racy |= draft.racy
                if prev is not None and draft.answers_as(prev):
                    if prev.unit is not unit:  # same answer from a re-read: keep units current
                        prev.unit = unit
                    same = (
                        draft.proof.same_as(prev.proof)
                        if draft.proof is not None
                        else prev.proof is None
                    )
                    if not same or prev.racy != draft.racy:
                        prev = _with_proof(prev, draft.proof, draft.racy)
                    entries[unit.key] = prev
                    continue
                entry = Entry(ws.path, unit, draft.answer, draft.error, draft.findings,
                              self.log.advance(), draft.proof, draft.racy)
                if prev is not None and prev.line == entry.line:
                    # the same envelope bytes (a detectors' pass changes findings only):
                    # share them, so a file's old and new snapshots do not hold two copies
                    entry.line = prev.line
                entries[unit.key] = entry
                changed.append((entry, prev))
        finally:
            storytime.unpin(ws.path)
        gone = [e for k, e in previous.items() if k not in entries]
        snap = Snapshot(relpath, adapter, proof, entries, racy=racy, prints=prints,
                        unreadable_since=since, unreadable_reason=reason)
        with self._lock:
            if relpath not in ws.files:
                ws.files_version += 1
            ws.files[relpath] = snap  # the one assignment: old units or new, never half
            self._index(ws, relpath, [e for e, _ in changed], gone)
        for entry, prev in changed:
            self._emit_change(entry, prev)
        for entry in gone:
            self._emit_removed(entry)

    @staticmethod
    def _index(ws: Workspace, relpath: str, added: list[Entry], gone: list[Entry]) -> None:
        """Keep the story-file index in step with a file's new snapshot (under the lock)."""
        for entry in added:
            story = entry.unit.story_file
            if story:
                pair = (relpath, entry.key)
                known = ws.story_index.get(story, ())
                if pair not in known:
                    ws.story_index[story] = (*known, pair)
        for entry in gone:
            story = entry.unit.story_file
            if story:
                pair = (relpath, entry.key)
                left = tuple(p for p in ws.story_index.get(story, ()) if p != pair)
                if left:
                    ws.story_index[story] = left
                else:
                    ws.story_index.pop(story, None)

    def _drop_file(self, ws: Workspace, relpath: str) -> None:
        with self._lock:
            snap = ws.files.pop(relpath, None)
            if snap is not None:
                ws.files_version += 1
                self._index(ws, relpath, [], list(snap.entries.values()))
        self._last_good.pop((ws.path, relpath), None)
        self._latest.pop((ws.path, relpath), None)
        if snap is not None:
            for key in snap.keys:
                self._emit_removed(snap.entries[key])

    def _mark_unreadable(
        self, ws: Workspace, relpath: str, adapter: Adapter, old: Snapshot | None, got: FileRead
    ) -> None:
        """The file's read failed: serve its last good read's units, each with a finding
        saying since when (or, never read well, nothing: queries read it and get the error)."""
        self.counters["unreadable"] += 1
        assert got.error is not None
        good = self._last_good.get((ws.path, relpath))
        if good is None or good.units is None:
            snap = Snapshot(relpath, adapter, self._proof(got), {}, error=got.error)
            with self._lock:
                if relpath not in ws.files:
                    ws.files_version += 1
                ws.files[relpath] = snap
            return
        since = old.unreadable_since if old is not None and old.unreadable_since else time.time()
        self._install(ws, relpath, adapter, self._proof(got), good.units, old,
                      prints=old.prints if old is not None else None,
                      unreadable=(since, got.error.message))

    # -- events --------------------------------------------------------------

    def _emit_change(self, entry: Entry, old: Entry | None) -> None:
        self._emit("changed", entry, entry.generation)
        before = set(old.findings) if old else set()
        after = set(entry.findings)
        for finding in entry.findings:
            if finding not in before:
                self._emit("drift", entry, entry.generation, finding)
        for finding in old.findings if old else ():
            if finding not in after:
                self._emit("resolved", entry, entry.generation, finding)

    def _emit_removed(self, entry: Entry) -> None:
        generation = self.log.advance()
        self._emit("removed", entry, generation)
        for finding in entry.findings:
            self._emit("resolved", entry, generation, finding)

    def _emit(
        self, kind: EventKind, entry: Entry, generation: int, finding: Finding | None = None
    ) -> None:
        event: UnitEvent = {
            "event": kind,
            "clock": "",
            "generation": generation,
            "workspace": entry.workspace,
            "stateFile": entry.state_file,
            "unit": entry.key,
            "format": entry.unit.format,
        }
        if kind == "changed":  # a changed event carries the unit's summary after its identity
            extra = {k: v for k, v in entry.summary().items() if k not in event}
            event.update(extra)  # type: ignore[typeddict-item]
        if finding is not None:
            event["finding"] = finding.as_dict()
        ws = self.workspaces.get(entry.workspace)
        # the start-up warm-up's first sight of every unit is not kept for replay
        self.log.publish(event, keep=ws is None or ws.checked)


def _with_proof(entry: Entry, proof: StoryProof | None, racy: bool) -> Entry:
    """The same entry (answer, findings, generation) read from files with new signatures."""
    fresh = Entry.__new__(Entry)
    for name in Entry.__slots__:
        setattr(fresh, name, getattr(entry, name))
    fresh.proof = proof
    fresh.racy = racy
    return fresh
