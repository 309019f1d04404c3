"""The refresher: the one thread that writes the cache.

Producer, queue, consumer (watchdog's own shape): the watcher's handlers turn inotify
events into `request*` calls; the refresher waits on a Condition for a short settle
window (debounce), then refreshes only the affected state files, rescans, rechecks a
workspace once git settles, runs the calls queued on it (a watch, the warm-up, a
query's sync) one per turn, and verifies every state file by stat each
`verify_interval`. It is the only thread that reads files into the cache and asks for
detector runs; the detectors themselves, and every git view they use, run on
the detectors' owner thread (detectors/runner.py), which the refresher waits on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import TYPE_CHECKING

from storyd.core import log
from storyd.core.gitstate import operation_under_way
from storyd.core.worker import Worker
from storyd.server.gitseen import GitSeen

if TYPE_CHECKING:
    from storyd.server.engine import Engine
    from storyd.server.store import Workspace

__all__ = ["GIT_SETTLE", "Refresher"]

# how often to look whether a git operation has finished: a fallback, as the end is an
# event (the marker's removal) that watchdog delivers
_BUSY_POLL = 1.0
GIT_SETTLE = 0.05  # seconds of quiet in git's files before a workspace is checked again
_OPERATION_NOTE = 2.0  # seconds an operation is under way before its answers say so
_RACY_RETRIES = 5  # re-reads of a racy file before the verification tick takes over
# due paths (workspace, relpath, early), scans, git rechecks, calls, verify
_Batch = tuple[
    list[tuple[str, str, bool]], dict[str, bool], list[str], list[Callable[[], None]], bool
]


class Refresher(Worker):
    """The single consumer: debounced refreshes, scans, git rechecks and verification."""

    def __init__(
        self,
        engine: Engine,
        *,
        settle: float = 0.02,
        verify_interval: float = 2.0,
        rescan_every: int = 15,
        git_settle: float = GIT_SETTLE,
        git_busy: Callable[[str], bool] | None = None,
    ) -> None:
        """`git_busy` says a workspace's git is mid-operation: its recheck waits."""
        super().__init__("refresher")
        self.engine = engine
        self.settle = settle
        self.git_settle = git_settle
        self.verify_interval = verify_interval
        self.rescan_every = rescan_every
        self.log = log.get("refresher")
        self._cond = threading.Condition()
        self._paths: dict[tuple[str, str], float] = {}
        self._early: set[tuple[str, str]] = set()  # due at once, on a write's end
        self._scans: dict[str, bool] = {}
        self._git: dict[str, float] = {}
        self._git_busy_at: dict[str, float] = {}  # when a workspace was last seen mid-operation
        self._git_busy_since: dict[str, float] = {}  # when its operation was first seen
        self._git_noted: set[str] = set()  # rechecked once as its operation stopped
        self.operation_note = _OPERATION_NOTE
        self.busy_poll = _BUSY_POLL
        self._calls: list[Callable[[], None]] = []
        self._racy: dict[tuple[str, str], int] = {}  # racy re-reads in a row, per path
        # git as each workspace's last check against it found it: a sync finds a commit
        # its file events have not told yet (macOS's FSEvents and the polling observers
        # tell late; inotify's event may be queued or settling)
        self.git_seen = GitSeen(engine.changes)
        self.git_moved = self.git_seen.moved
        self.against_git = self.git_seen.against
        self._ticks = 0
        self._busy_mark: tuple[int, int] = (-1, -1)  # misses and big parses at the last tick
        self.git_busy: Callable[[str], bool] = git_busy or (lambda _ws: False)
        self.on_git_change: Callable[[Workspace], None] = engine.recheck
        # The daemon's upkeep, bound once by assembly.assemble (it runs on this thread
        # and needs it): at each verification tick, and before a scan of a workspace
        # whose watched trees gained or lost a folder (fix its watches first).
        self.on_tick: Callable[[], None] = lambda: None
        self.before_scan: Callable[[str], None] = lambda _ws: None

    def request(self, workspace: str, relpath: str, *, complete: bool = False) -> None:
        """A path changed; refresh its state files after the settle window.

        `complete`: the event says a write ended (the file was closed after writing, or
        renamed or moved into place), so the refresh is due at once, tentatively: if
        the file does not parse, it is read again after the settle window as usual,
        and only then marked unreadable. A later plain change waits the window again.
        """
        key = (workspace, relpath)
        with self._cond:
            now = time.monotonic()
            if complete:
                self._paths[key] = now - self.settle
                self._early.add(key)
            else:
                self._paths[key] = now
                self._early.discard(key)
            self._cond.notify()

    def nudge(self, workspace: str, relpath: str) -> None:
        """A query read a file the cache could not answer for: refresh it after the
        settle window, unless a refresh is already due (a stream of queries must not
        keep pushing a pending refresh back, as `request` does for a burst of writes)."""
        with self._cond:
            if (workspace, relpath) not in self._paths:
                self._paths[(workspace, relpath)] = time.monotonic()
                self._cond.notify()

    def request_scan(self, workspace: str, *, lost: bool = False) -> None:
        """Rescan a workspace (lost: events may have been missed)."""
        with self._cond:
            self._scans[workspace] = self._scans.get(workspace, False) or lost
            self._cond.notify()

    def request_git(self, workspace: str) -> None:
        """Git state changed (refs, HEAD): recheck the workspace's units once git settles."""
        with self._cond:
            self._git[workspace] = time.monotonic()
            self._cond.notify()

    def call(self, func: Callable[[], None], *, urgent: bool = False) -> None:
        """Run `func` on this thread (the owner of the cache and of the git views).

        Calls run one per turn of the loop, between which due refreshes run too, so a
        long warm-up made of many calls never holds a write back. `urgent` goes first
        (a query waiting on it)."""
        with self._cond:
            if urgent:
                self._calls.insert(0, func)
            else:
                self._calls.append(func)
            self._cond.notify()

    def sync(self, workspace: str, relpaths: list[str],
             arrived: int | None = None) -> Future[None]:  # fmt: skip
        """Read these state files again now, before anything else queued, and check the
        workspace again if a git operation its answers were built under has ended; the
        future resolves once their new snapshots are installed (watchman's sync, by stat).

        With `arrived` (a query's arrival, wall-clock ns), any other file of the
        workspace whose snapshot was read before it and has changed since is read again
        too: a watch's first read that began before a write and was installed after the
        query looked (its workspace had no files then) never answers it."""
        future: Future[None] = Future()
        priority = self.engine.reads.priority

        def run() -> None:
            # a query waits on these reads, so they read as one: a miss in flight does
            # not hold them back (up to priority.MAX_WAIT), and passes give way to them
            try:
                priority.awaited(-1)
                with priority.asking():
                    self._sync_now(workspace, relpaths, arrived)
            finally:
                future.set_result(None)

        priority.awaited(+1)  # the pass this thread runs now gives way no more
        self.call(run, urgent=True)
        return future

    def _sync_now(self, workspace: str, relpaths: list[str], arrived: int | None) -> None:
        """sync's reads, on this thread."""
        ws = self.engine.workspaces.get(workspace)
        if ws is None:
            return
        for relpath in relpaths:
            self._touch(ws, relpath, early=False)
        if arrived is not None:
            for relpath in self.engine.queries.read_before(ws, arrived):
                self._touch(ws, relpath, early=False)
        # a git operation ended, or git moved (a commit) unseen by the watches: check it
        # now, as a direct read would (not once git settles)
        if self.engine.behind_git(ws) or self.git_moved(workspace):
            self._git_changed(ws)

    def configure(self, *, settle: float, verify_interval: float) -> None:
        """New settle window and verification interval (SIGHUP), in force from the next
        wait: a thread waiting out a long interval is woken to wait the new one."""
        with self._cond:
            self.settle = settle
            self.verify_interval = verify_interval
            self._cond.notify()

    def wake(self) -> None:
        """Wake the wait: `stopping` is set, the current batch is the last."""
        with self._cond:
            self._cond.notify()

    def _next_batch(self) -> _Batch:
        """Wait until something is due; return it (paths with their `early` flag, scans,
        git, calls, verify)."""
        began = time.monotonic()
        with self._cond:
            while not self.stopping:
                now = time.monotonic()
                next_verify = began + self.verify_interval  # read afresh: reload may change it
                due_paths = [k for k, t in self._paths.items() if now - t >= self.settle]
                due_git, busy = self._settled_git(now)
                verify = now >= next_verify
                if due_paths or self._scans or due_git or self._calls or verify:
                    paths = []
                    for key in due_paths:
                        del self._paths[key]
                        early = key in self._early
                        self._early.discard(key)
                        paths.append((*key, early))
                    for ws in due_git:
                        del self._git[ws]
                    scans, self._scans = self._scans, {}
                    calls = self._calls[:1]  # one a turn: due writes go between calls
                    del self._calls[:1]
                    return paths, scans, due_git, calls, verify
                deadlines = [t + self.settle for t in self._paths.values()]
                deadlines += [
                    now + self.busy_poll if w in busy else t + self.git_settle
                    for w, t in self._git.items()
                ]
                deadlines.append(next_verify)
                self._cond.wait(max(0.001, min(deadlines) - now))
        return [], {}, [], [], False

    def _settled_git(self, now: float) -> tuple[list[str], set[str]]:
        """Workspaces due for a recheck, and those mid-operation (under `_cond`).

        A workspace found mid-operation (rebase, merge, ...) waits for its end; once the
        operation has been under way `operation_note` seconds (stopped on a conflict, a
        bisect: a rebase running through is over sooner, and stays one change), it is
        rechecked once, and its answers carry the operation-in-progress finding. The end is
        an event (the marker's removal), due one settle window later like any other; when
        the poll sees the end before that event arrives, it waits one settle window from
        then, so the late event joins the same recheck instead of causing a second.
        """
        settled = [w for w, t in self._git.items() if now - t >= self.git_settle]
        busy = {w for w in settled if self.git_busy(w)}
        due = []
        for ws in settled:
            looked = self._git_busy_at.pop(ws, None)
            if ws in busy:
                self._git_busy_at[ws] = now
                since = self._git_busy_since.setdefault(ws, now)
                if (ws not in self._git_noted and now - since >= self.operation_note
                        and operation_under_way(ws) is not None):
                    # stopped mid-way (a conflict, a bisect), not a rebase running
                    # through: recheck once, and the answers say it is under way
                    self._git_noted.add(ws)
                    due.append(ws)
                continue
            self._git_busy_since.pop(ws, None)
            self._git_noted.discard(ws)
            if looked is not None and self._git[ws] <= looked:  # ended, no event yet
                self._git[ws] = now
            else:
                due.append(ws)
        return due, busy

    def _watch_end(self, workspace: str) -> None:
        """After a recheck as an operation began: poll for its end, dated from the look
        that saw it (so that only a later event counts as one)."""
        with self._cond:
            looked = self._git_busy_at.get(workspace)
            if looked is not None:
                self._git.setdefault(workspace, looked)

    def run(self) -> None:
        while self.should_keep_running():
            paths, scans, git, calls, verify = self._next_batch()
            for func in calls:
                self._guard("call", func)
            for workspace, lost in scans.items():
                self._guard("scan", partial(self._scan, workspace, lost))
            for workspace, relpath, early in paths:
                ws = self.engine.workspaces.get(workspace)
                if ws is not None and workspace not in scans:
                    self._guard("refresh", partial(self._touch, ws, relpath, early))
            for workspace in git:
                ws = self.engine.workspaces.get(workspace)
                if ws is not None:
                    self._guard("git", partial(self._git_changed, ws))
                self._watch_end(workspace)
            if verify:
                self._guard("verify", self._verify)
            for workspace in self.engine.take_deferred():  # its detectors waited for git
                self.request_git(workspace)

    def _guard(self, what: str, func: Callable[[], object]) -> None:
        try:
            func()
        except Exception:  # one bad file or plugin must never stop the refresher
            self.log.exception("refresher_error", step=what)

    def _scan(self, workspace: str, lost: bool) -> None:
        ws = self.engine.workspaces.get(workspace)
        if ws is None:
            return
        self.before_scan(workspace)
        started = time.perf_counter()
        files = self.engine.scan(ws, lost=lost)
        self.log.info(
            "scan",
            workspace=workspace,
            files=files,
            lost=lost,
            units=ws.units,
            duration_ms=_ms(started),
        )

    def _touch(self, ws: Workspace, relpath: str, early: bool) -> None:
        started = time.perf_counter()
        generation = self.engine.log.generation
        complete = self.engine.touch(ws, relpath, tentative=early)
        quiet = self.engine.reads.quiet
        quiet.freeze()  # what the read left alive leaves the collector's view
        quiet.trim()  # a big read's freed heap (server/quietgc.py)
        if not complete:
            self.request(ws.path, relpath)  # torn at a write's end: again once it settles
        elif self.engine.racy(ws, relpath):
            # read too soon after a write to trust its stat: read it again shortly (a
            # few times; a file stamped in the future is left to the verification tick)
            tries = self._racy.get((ws.path, relpath), 0)
            if tries < _RACY_RETRIES:
                self._racy[(ws.path, relpath)] = tries + 1
                self.request(ws.path, relpath)
        else:
            self._racy.pop((ws.path, relpath), None)
        if self.engine.log.generation != generation:
            self.log.info(
                "refresh",
                workspace=ws.path,
                path=relpath,
                generation=self.engine.log.generation,
                duration_ms=_ms(started),
            )

    def _git_changed(self, ws: Workspace) -> None:
        started = time.perf_counter()
        self.git_seen.against(ws, partial(self.on_git_change, ws))
        self.log.info("git_recheck", workspace=ws.path, duration_ms=_ms(started))

    def _verify(self) -> None:
        self._ticks += 1
        full = self.rescan_every > 0 and self._ticks % self.rescan_every == 0
        for ws in list(self.engine.workspaces.values()):
            if full:
                self.engine.scan(ws, reread=False)
            elif self.engine.verify(ws):
                self.log.info("verify_caught_change", workspace=ws.path)
        reads = self.engine.reads
        reads.quiet.offers.expire()  # a miss's tree kept too long (offered.py)
        reads.quiet.trim(force=True)  # the big reads since the last trim
        mark = (reads.priority.started, reads.quiet.held)
        reads.quiet.collect_idle(idle=mark == self._busy_mark)  # quietgc.py
        self._busy_mark = mark
        self.on_tick()


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


