"""The cache: workspaces and their per-file snapshots, composed from one part per job.

    reads.py        Reads        reading a file now: its lock, its latest and last good read
    install.py      Installer    a file's new snapshot, built off to the side and installed
    forward.py      Forwarder    what changed, as unit events on the event log
    workspaces.py   Workspaces   the tracked workspaces and the passes over them
    queries.py      Queries      what the ops read (entries that may answer now, lists)
    operations.py   Operations   which git operation is under way now, for every answer

`Engine` builds them around one map of workspaces, one lock and one event log, and
offers their methods as its own: the refresher, the daemon and the ops call the engine.

One refresher thread calls `refresh`, `scan`, `verify`, `recheck`, `check` and
`remove_workspace`; the server's event loop and the direct-read pool only read
(`serve`, `known_absent`, `epic_file`, `summaries`) and, for a miss, `read_now`.

Three rules keep every answer one a direct read would give (docs/design.md):
- A file's units change all at once: the installer builds a new `Snapshot` off to the
  side and installs it with one assignment (store.py).
- A cached entry answers only while the files it was read from still match `os.stat`
  and its read was not racy (`Snapshot.serves`); else the query reads directly.
- The last good read of a file is never lost: every read of a file, the refresher's
  and the pool's, runs under that file's lock and a good one becomes the file's last
  good read (`read_now`), which a torn file's answers then come from.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from storyd.core.formats import Adapter, all_adapters
from storyd.core.pipeline import FileRead, Options
from storyd.server.events import EventLog
from storyd.server.forward import Forwarder
from storyd.server.install import Installer
from storyd.server.listeners import Listeners
from storyd.server.queries import Queries
from storyd.server.reads import Reads, unreadable_finding
from storyd.server.store import Entry, Workspace
from storyd.server.workspaces import Look, Workspaces

if TYPE_CHECKING:
    from storyd.core.pipeline import Detect
    from storyd.server.changes import Changes
    from storyd.server.install import Regressed

__all__ = ["Engine", "Entry", "Look", "Workspace"]


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
        regressed: Regressed | None = None,
    ) -> None:
        """`detect` checks a unit (None: no detectors); `changes` is the daemon's kernel
        change queue (None: every check is a stat); `git_busy` says a workspace's git is
        mid-operation (its detectors wait); `hold_tips` is called with True before a
        pass over a workspace's units and False after it (detection.tips_held_by);
        `regressed` gives a unit's lost progress (server/recorder.py; None: no history)."""
        self.options = options or Options()
        self.changes = changes
        self.adapters = adapters if adapters is not None else all_adapters()
        self.log = events if events is not None else EventLog()
        # hear each workspace's first look end (what it found) and its last (unwatched)
        self.looks: Listeners[Callable[[Look], None]] = Listeners("looks")
        self.workspaces: dict[str, Workspace] = {}
        self.counters = {"refreshes": 0, "unreadable": 0, "checked": 0}
        lock = threading.Lock()
        expected: set[str] = set()
        tracked = self.workspaces

        def keeps(path: str) -> bool:  # a read of a tracked or expected workspace is kept
            return path in tracked or path in expected

        self.reads = Reads(self.options, changes, keeps)
        self.forward = Forwarder(self.log, self.workspaces)
        self.installer = Installer(
            self.options, changes, self.reads, self.forward, self.log, lock, self.counters,
            detect=detect, git_busy=git_busy or (lambda _workspace: False),
            hold_tips=hold_tips or (lambda _on: None), regressed=regressed,
        )  # fmt: skip
        self.queries = Queries(self.workspaces, changes, self.log, self.counters)
        self.tracking = Workspaces(
            self.workspaces, expected, self.adapters, changes, lock, reads=self.reads,
            installer=self.installer, forward=self.forward, log=self.log, looks=self.looks,
        )  # fmt: skip

        # The engine's face: each part's own methods, bound here (no call in between).
        queries, tracking, installer = self.queries, self.tracking, self.installer
        self.lookup = queries.lookup
        self.serve = queries.serve
        self.epic_file = queries.epic_file
        self.sole_unit = queries.sole_unit
        self.known_absent = queries.known_absent
        self.stale_files = queries.stale_files
        self.behind_git = queries.behind_git
        self.unreadable = queries.unreadable
        self.unreadable_since = queries.unreadable_since
        self.summaries = queries.summaries
        self.workspace_count = queries.workspace_count
        self.stats = queries.stats
        self.entries = queries.entries
        self.expect = tracking.expect
        self.expected = tracking.expected
        self.add_workspace = tracking.add
        self.remove_workspace = tracking.remove
        self.check = tracking.check
        self.scan = tracking.scan
        self.touch = tracking.touch
        self.verify = tracking.verify
        self.racy = tracking.racy
        self.owners = tracking.owners
        self.find_state_files = tracking.find_state_files
        self.in_first_look = tracking.in_first_look
        self.in_last_look = tracking.in_last_look
        self.refresh = installer.refresh
        self.recheck = installer.recheck
        self.take_deferred = installer.take_deferred
        self.use_detectors = installer.use_detectors
        self.read = self.reads.read
        self.unreadable_finding = unreadable_finding

    @property
    def detect(self) -> Detect | None:
        """The detectors' callback in force (a reload may change it: `use_detectors`)."""
        return self.installer.detect

    def read_now(
        self, workspace: str, relpath: str, adapter: Adapter, since: int | None = None
    ) -> tuple[FileRead, str | None]:
        """A cache miss's read (Reads.read_now), against the file's cached snapshot."""
        ws = self.workspaces.get(workspace)
        snap = ws.files.get(relpath) if ws is not None else None
        return self.reads.read_now(workspace, relpath, adapter, snap, since)
