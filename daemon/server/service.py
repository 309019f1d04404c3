"""The daemon's state without the socket: engine, refresher, watcher and workspaces.

A workspace that is gone (rm -rf of a git worktree) is unwatched at the next
verification tick, freeing its `max_workspaces` slot; one a query started watching
(auto-watch) is unwatched once nobody asked about it for `limits.auto_watch_idle`
seconds. Configured workspaces and those `storyd watch` named never expire.
`watch_counts()` is what `stats` reports of them.

`ops.py` and `transport.py` speak the protocol; this module decides what is watched and how a query
that misses the cache is read. Direct reads run on a small thread pool so a writer
holding its lock never stalls the event loop.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING

from storyd.api import answers
from storyd.config.values import DEFAULT_STALENESS, Limits
from storyd.core import log, switches, target
from storyd.core.errors import StateFileMissing, UsageError
from storyd.core.formats.base import nameable
from storyd.core.gitstate import is_work_tree
from storyd.core.query import checked_workspace
from storyd.server import misses
from storyd.server.quietgc import give_back_freed_memory
from storyd.server.store import folder_identity
from storyd.server.warmup import Warmup

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from storyd.core.model import Finding, Unit
    from storyd.core.query import Query
    from storyd.server.engine import Engine
    from storyd.server.refresher import Refresher
    from storyd.server.store import Snapshot, Workspace
    from storyd.server.watcher import Watcher

__all__ = ["STOP_GRACE", "Daemon", "Settings", "exit_now"]

_MAX_ALIASES = 4096
STOP_GRACE = 5.0  # seconds stop() waits for its threads; then they are left behind


def stuck_threads() -> list[str]:
    """The names of live non-daemon threads other than this one (they keep a process
    alive at exit: a thread-pool worker stuck in a system call, say)."""
    me = threading.current_thread()
    return sorted(t.name for t in threading.enumerate() if t is not me and not t.daemon)


def exit_now(code: int, grace: float = STOP_GRACE) -> None:
    """End the process with `code` when threads are still stuck after `grace` seconds.

    Python joins every thread-pool worker at exit; one blocked for ever in open(2) or
    read(2) would keep a stopped daemon alive, deaf to SIGTERM. Everything of ours is
    already released when this is called; the log says which threads were left.
    Children still running (a git a worker waits on) are killed first.
    """
    from storyd.core.children import kill_all

    kill_all()
    deadline = time.monotonic() + grace
    while stuck_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    left = stuck_threads()
    if left:
        log.get("daemon").warning("exit_forced", threads=left, code=code)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


class Settings:
    """What the daemon runs with: one frozen `Limits` and the knobs that are no limit.

    limits       config.Limits; a reload swaps it whole (`use`), so every reader sees
                 the old set or the new one, and looks it up on each use
    staleness    "git" or "mtime", fixed for the run
    auto_watch   a query for an unwatched workspace starts watching it

    `Settings(staleness=..., verify_interval=...)`: keyword limits override `limits`
    (default: config.LIMITS's defaults).
    """

    __slots__ = ("auto_watch", "limits", "staleness")

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        staleness: str = DEFAULT_STALENESS,
        auto_watch: bool = True,
        **overrides: float,
    ) -> None:
        base = Limits() if limits is None else limits
        self.limits = base.replace(**overrides) if overrides else base
        self.staleness = staleness
        self.auto_watch = auto_watch

    @property
    def settle(self) -> float:
        """limits.settle_ms in seconds (the refresher's settle window)."""
        return self.limits.settle_ms / 1000

    def use(self, limits: Limits, *, auto_watch: bool) -> None:
        """A reload's values: the new limits in one assignment."""
        self.limits = limits
        self.auto_watch = auto_watch


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


class Daemon:
    """Everything the daemon knows and does, minus the socket."""

    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        refresher: Refresher,
        watcher: Watcher,
        executor: ThreadPoolExecutor,
    ) -> None:
        """The parts, built by assembly.assemble; `executor` runs the direct reads."""
        self.settings = settings
        self.engine = engine
        self.options = engine.options
        self.changes = engine.changes
        self.refresher = refresher
        self.watcher = watcher
        self.executor = executor
        # spellings of workspace paths -> (canonical path, the folder's identity when it
        # was resolved); the event loop adds (canonical), the refresher removes (unwatch):
        # both under the lock
        self.aliases: dict[str, tuple[str, tuple[int, int]]] = {}
        self._targets: dict[tuple[str, str, str], target.Target] = {}  # see `target`
        self._aliases_lock = threading.Lock()
        self._rewatching: set[Workspace] = set()  # moved caches with a rewatch queued
        self.counters = {"queries": 0, "hits": 0, "misses": 0}
        self.started = time.monotonic()
        self.log = log.get("daemon")
        self._cap_warned = False
        self.warm = Warmup()
        # workspaces a query started watching, and when each workspace was last asked
        # about (monotonic; written by the event loop in `canonical`, read by the tick)
        self.auto_watched: set[str] = set()
        self.last_asked: dict[str, float] = {}
        self.forgotten = {"gone": 0, "expired": 0}
        # watches queued on the refresher, by workspace: a second ask joins the first
        self._pending_watches: dict[str, Future[int]] = {}
        self._warm_paths: list[str] | None = None  # registered, warm-up not queued yet
        # a miss's `regressed` findings (the history recorder's `peek`; None: no history)
        self.lost_now: Callable[[str, Unit], tuple[Finding, ...]] | None = None

    # -- lifecycle -----------------------------------------------------------

    def start(self, workspaces: list[str], *, warm: bool = True) -> None:
        """Register the configured workspaces and start the threads; warming runs behind
        (queued now, or with `warm=False` when `warm_up` is called: `storyd serve` calls
        it a moment after its socket serves, so the first queries read alone).

        Nothing here reads a state file: the socket serves at once, and queries that
        the cache cannot answer yet are read directly on the pool (see `Warmup`).
        """
        self.watcher.start()
        paths = []
        for path in workspaces:
            try:
                canonical = self.canonical(path)
            except (UsageError, StateFileMissing) as exc:
                self.log.warning("workspace_skipped", workspace=path, error=exc.message)
                continue
            if canonical not in self.engine.workspaces:
                self.engine.add_workspace(canonical, checked=False)
                paths.append(canonical)
        self.warm.begin(len(paths))
        self._warm_paths = paths
        if warm:
            self.warm_up()
        self.refresher.start()

    def warm_up(self) -> None:
        """Queue the start-up warm-up on the refresher (once; later calls do nothing)."""
        paths, self._warm_paths = self._warm_paths, None
        if paths is not None:
            self._warm(paths)

    def _warm(self, paths: list[str]) -> None:
        """Queue the start-up on the refresher thread: read every workspace, then run the
        detectors, one call per workspace and pass, so a query's urgent sync or a write
        between them waits for one workspace at most, not the whole warm-up."""
        started = time.perf_counter()
        timing: dict[str, float] = {}
        for path in paths:
            self.refresher.call(partial(self._warm_read, path))
        self.refresher.call(lambda: timing.update(read_ms=_ms(started)))
        for path in paths:
            self.refresher.call(partial(self._warm_check, path))

        def done() -> None:
            # the warm-up built each big file's snapshot beside the old one and freed
            # the old one after the swap: glibc keeps that high-water mark until asked
            give_back_freed_memory()
            self.warm.done = True
            self.log.info(
                "warm",
                workspaces=len(paths),
                units=sum(ws.units for ws in list(self.engine.workspaces.values())),
                read_ms=timing.get("read_ms"),
                duration_ms=_ms(started),
            )

        self.refresher.call(done)

    def _warm_read(self, path: str) -> None:
        self.engine.reads.priority.give_way()  # a query reading now goes first (bounded)
        if self.refresher.should_keep_running() and path in self.engine.workspaces:
            self._warm_step("warm_failed", path, lambda: self._watch_now(path))
        self.warm.read += 1

    def _warm_check(self, path: str) -> None:
        ws = self.engine.workspaces.get(path)
        if ws is not None and self.refresher.should_keep_running():
            check = partial(self.refresher.against_git, ws, partial(self.engine.check, ws))
            self._warm_step("warm_check_failed", path, check)
        self.warm.checked += 1

    def _warm_step(self, failed: str, path: str, step: Callable[[], object]) -> None:
        """One warm-up step: an error is logged as `failed`, unless the daemon began to
        stop meanwhile (its detectors closed under the step): then it ends, and says so."""
        try:
            step()
        except Exception:
            if self.refresher.should_keep_running():
                self.log.exception(failed, workspace=path)
            else:
                self.log.info("warm_stopped", workspace=path)

    def stop(self, grace: float = STOP_GRACE) -> None:
        """Stop the threads (the socket is the server's business), within `grace` seconds.

        A thread stuck in a system call (a read nothing answers) is left behind rather
        than waited on: SIGTERM must end the daemon whatever a worker is doing, and
        `exit_now` ends a process such a thread would keep alive.
        """
        deadline = time.monotonic() + grace
        self.refresher.stop()
        self.watcher.stop()
        self.refresher.join(timeout=max(0.0, deadline - time.monotonic()))
        self.executor.shutdown(wait=False, cancel_futures=True)
        for thread in list(getattr(self.executor, "_threads", ())):
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if self.changes is not None:
            self.changes.close()

    def use_limits(self, limits: Limits, *, auto_watch: bool) -> None:
        """A reload: swap the settings' limits, then tell the parts that keep a copy.

        Every other reader looks the limits up on each use (the transport per request
        line or connection, the tick per verification), so they take effect at the next
        read, line or wait without a restart; the engine's read options and the
        refresher's windows are told here."""
        self.settings.use(limits, auto_watch=auto_watch)
        self.options.lock_timeout = limits.lock_timeout
        self.options.max_answer_bytes = limits.max_answer_bytes
        switches.configure(max_state_bytes=limits.max_state_bytes)
        self.refresher.configure(
            settle=self.settings.settle, verify_interval=limits.verify_interval
        )

    def roots_changed(self, path: str) -> None:
        """Before a scan the watcher asked for (a folder came or went in a watched tree):
        watch format roots that appeared, drop vanished ones, count again (refresher)."""
        self.watcher.ensure_roots(path)
        self.watcher.recount()

    def tick(self) -> None:
        """The refresher's verification tick: workspaces gone or idle too long, new or
        vanished format roots, and the watch count (recounted here, off the event loop:
        `stats` only reads it)."""
        self._forget_stale()
        for path, ws in list(self.engine.workspaces.items()):
            if ws.moved or ws.identity != folder_identity(path):
                self._moved(path)  # no query asked: the tick sees it
            self.watcher.ensure_roots(path)
        self.watcher.recount()
        for path in self.watcher.polled():  # what inotify cannot watch is polled
            polled = self.engine.workspaces.get(path)
            if polled is not None:
                self.engine.scan(polled, reread=False)

    def _forget_stale(self) -> None:
        """Unwatch workspaces that are gone, and auto-watched ones idle past the limit."""
        idle = self.settings.limits.auto_watch_idle
        now = time.monotonic()
        for path in list(self.engine.workspaces):
            if not os.path.isdir(path):
                self._forget(path, "gone")
            elif (
                idle > 0
                and path in self.auto_watched
                and now - self.last_asked.get(path, now) > idle
            ):
                self._forget(path, "expired")

    def _forget(self, path: str, reason: str) -> None:
        """Unwatch on the refresher thread (the tick's), then count it and say why once:
        a `stats` that sees the count sees the workspace gone too."""
        units = self.engine.workspaces[path].units if path in self.engine.workspaces else 0
        self._unwatch_now(path)
        self.forgotten[reason] += 1
        self.log.info("workspace_forgotten", workspace=path, reason=reason, units=units)

    def watch_counts(self) -> dict[str, object]:
        """`stats`' view of the workspaces: how many are watched and auto-watched, how
        many were unwatched as gone or idle, and the idle limit."""
        watched = list(self.engine.workspaces)
        return {
            "watched": len(watched),
            "auto": sum(1 for p in watched if p in self.auto_watched),
            "expired": self.forgotten["expired"],
            "gone": self.forgotten["gone"],
            "autoWatchIdle": self.settings.limits.auto_watch_idle,
        }

    # -- workspaces ----------------------------------------------------------

    def canonical(self, raw: object) -> str:
        """A workspace path as the engine keys it (absolute, symlinks resolved)."""
        raw = checked_workspace(raw)
        # the folder `raw` names now (one stat): a spelling is trusted while it names the
        # same folder, and a watched workspace's cache answers only while its path does
        identity = folder_identity(raw)
        known = self.aliases.get(raw)  # a lone dict read: atomic under the GIL
        if known is not None and identity is not None and known[1] == identity:
            path = known[0]
        else:
            path = os.path.realpath(raw)  # a retargeted link is followed afresh
            if identity is None or not os.path.isdir(path):
                raise StateFileMissing(f"workspace {raw} does not exist")
            if not nameable(path):  # a link to one: its events could not name it
                raise UsageError(f"workspace {raw} resolves to a path that is not valid "
                                 "UTF-8; storyd names workspaces in UTF-8")  # fmt: skip
            with self._aliases_lock:
                if len(self.aliases) >= _MAX_ALIASES:
                    self.aliases.clear()
                self.aliases[raw] = (path, identity)
        self.last_asked[path] = time.monotonic()  # for auto_watch_idle
        ws = self.engine.workspaces.get(path)
        if ws is not None and (ws.moved or ws.identity != identity):
            self._moved(path)
        return path

    def _moved(self, path: str) -> None:
        """The folder at a watched workspace's path is another one now (exchanged, moved
        away and replaced): its cache stops answering at once, and the refresher watches
        the path afresh (a new scan, the detectors on the new folder)."""
        ws = self.engine.workspaces.get(path)
        if ws is None or ws in self._rewatching:
            return
        ws.moved = True  # one assignment: queries read directly from now on
        self._rewatching.add(ws)  # one rewatch queued per moved cache
        self.log.info("workspace_moved", workspace=path)
        self.refresher.call(lambda: self._rewatch(path))

    def _rewatch(self, path: str) -> None:
        """Watch a moved workspace afresh (on the refresher thread)."""
        ws = self.engine.workspaces.get(path)
        if ws is None or not ws.moved:
            return
        self._rewatching.discard(ws)
        auto = path in self.auto_watched
        self._unwatch_now(path)
        if os.path.isdir(path):
            if auto:
                self.auto_watched.add(path)
            self._watch_now(path)

    # -- answering a resume query ---------------------------------------------

    def target(self, path: str, query: Query) -> target.Target:
        """What a query names, from the cache's view of the workspace (no disk read but
        for an epic folder in a workspace not read yet)."""
        if query.state_file is None:
            epic, story = str(query.epic), str(query.story)
            relpath = self.engine.epic_file(path, epic)
            if relpath is None:  # not read yet: found on disk
                return target.for_epic(path, epic, story)
            key = (path, relpath, story)
            found = self._targets.get(key)  # an epic's Target is never changed: kept
            if found is None:
                if len(self._targets) >= _MAX_ALIASES:
                    self._targets.clear()
                found = self._targets[key] = target.for_epic(path, epic, story, relpath)
            return found
        found = target.for_state_file(path, query.state_file, query.unit, lexical=True)
        if found.key is None:
            found.key = self.engine.sole_unit(path, found.relpath)
        return found

    def read_answer(self, path: str, query: Query, since: int | None = None) -> answers.Answer:
        """A cache miss, read now (on the pool): the file as it is, or while it is torn
        its last good read, with a finding saying so. Detectors for --detail and `resume`.
        The background's passes give way while it reads (server/priority.py)."""
        with self.engine.reads.priority.asking():
            return misses.answer(self, path, query, since)

    def sync(self, stale: list[tuple[str, Snapshot]], also: Iterable[str] = (),
             arrived: int | None = None) -> Future[None]:  # fmt: skip
        """Have the refresher read these files again now, and the workspaces `also`
        (nothing stale in them, but git may have moved unseen) checked too; resolves
        when all are in. With `arrived` (a query's arrival, wall-clock ns), every file of
        those workspaces read before it and changed since is read again as well
        (Refresher.sync): what a watch installed meanwhile is as new as the query."""
        by_workspace: dict[str, list[str]] = {path: [] for path in also}
        for path, snap in stale:
            by_workspace.setdefault(path, []).append(snap.relpath)
        futures = [self.refresher.sync(path, rels, arrived)
                   for path, rels in by_workspace.items()]  # fmt: skip
        if len(futures) == 1:
            return futures[0]
        joined: Future[None] = Future()
        left = [len(futures)]
        lock = threading.Lock()

        def one_done(_f: Future[None]) -> None:
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    joined.set_result(None)

        for future in futures:
            future.add_done_callback(one_done)
        return joined

    def _forget_aliases(self, path: str) -> None:
        """Drop every spelling of a workspace (from the refresher, while the loop adds)."""
        with self._aliases_lock:
            for alias in [a for a, (p, _) in self.aliases.items() if p == path]:
                del self.aliases[alias]

    def watching(self, path: str) -> bool:
        """Whether a canonical workspace path is watched."""
        return path in self.engine.workspaces

    def _watch_now(self, path: str) -> int:
        started = time.perf_counter()
        ws = self.engine.add_workspace(path)  # takes the folder's identity first
        self.watcher.watch(path)
        files = self.refresher.against_git(ws, partial(self.engine.scan, ws))
        if folder_identity(path) != ws.identity:  # swapped while it was read
            self._moved(path)
        self.log.info("watch", workspace=path, files=files, units=ws.units,
                      duration_ms=_ms(started))
        return ws.units

    def not_a_workspace(self, path: str) -> str | None:
        """Why a folder is no workspace to watch (None: it is one): a workspace is a git
        work tree or holds a folder where a format keeps its files. The file system's
        root, a home folder of loose files, are not (a same-user client could otherwise
        make the daemon walk anything)."""
        if path == os.path.dirname(path):
            return f"{path} is the file system's root, not a workspace"
        if is_work_tree(path):
            return None
        for adapter in self.engine.adapters:
            for root in adapter.roots:
                if os.path.isdir(os.path.join(path, root)):
                    return None
        roots = sorted({r for a in self.engine.adapters for r in a.roots})
        return (f"{path} is not a workspace: no .git and none of {', '.join(roots)}; "
                "create one of them first")

    def watch(self, path: str, *, auto: bool = False) -> Future[int]:
        """Start watching (on the refresher thread); the future gives the unit count.
        `auto`: a query asked, not the configuration or `storyd watch`: it may expire."""
        future: Future[int] = Future()
        if not auto:
            self.auto_watched.discard(path)  # named on purpose now: never expires
        if self.watching(path):
            future.set_result(self.engine.workspaces[path].units)
            return future
        refused = self.not_a_workspace(path)
        if refused is not None:
            future.set_exception(UsageError(refused))
            return future
        cap = self.settings.limits.max_workspaces
        if len(self.engine.workspaces) >= cap:
            msg = (
                f"already watching {cap} workspaces (the cap); "
                "unwatch one or raise limits.max_workspaces"
            )
            future.set_exception(UsageError(msg))
            return future

        pending = self._pending_watches.get(path)
        if pending is not None:  # one watch on its way is enough: it answers all
            return pending
        self._pending_watches[path] = future
        self.engine.expect(path)  # its reads count as last good ones from now on

        def run() -> None:
            try:
                if auto:
                    self.auto_watched.add(path)
                self.last_asked[path] = time.monotonic()
                future.set_result(self._watch_now(path))
            except Exception as exc:
                self.auto_watched.discard(path)
                self.engine.remove_workspace(path)  # and what its reads remembered
                future.set_exception(exc)
            finally:
                self._pending_watches.pop(path, None)

        self.refresher.call(run)
        return future

    def unwatch(self, path: str) -> Future[bool]:
        """Stop watching a workspace and forget its entries."""
        future: Future[bool] = Future()

        def run() -> None:
            future.set_result(self._unwatch_now(path))

        self.refresher.call(run)
        return future

    def _unwatch_now(self, path: str) -> bool:
        """Stop watching and forget (on the refresher thread); True if it was watched."""
        self.watcher.unwatch(path)
        removed = self.engine.remove_workspace(path)
        self.refresher.git_seen.forget(path)
        self._forget_aliases(path)
        self.auto_watched.discard(path)
        self.last_asked.pop(path, None)
        return removed

    def auto_watch(self, path: str) -> None:
        """A query for an unwatched workspace: start watching it when allowed."""
        if not self.settings.auto_watch or self.watching(path):
            return
        if self.not_a_workspace(path) is not None:
            return
        cap = self.settings.limits.max_workspaces
        if len(self.engine.workspaces) >= cap:
            if not self._cap_warned:
                self._cap_warned = True
                self.log.warning("workspace_cap", cap=cap, workspace=path)
            return
        self.watch(path, auto=True)

    def warm_progress(self) -> dict[str, object]:
        """How far the start-up warm-up has got (for `stats` and `status`)."""
        spaces = list(self.engine.workspaces.values())
        return {
            "warming": not self.warm.done,
            "workspaces": self.warm.total,
            "workspacesRead": self.warm.read,
            "workspacesChecked": self.warm.checked,
            "unitsRead": sum(ws.units for ws in spaces),
            "unitsChecked": sum(ws.units for ws in spaces if ws.checked),
        }

    def uptime(self) -> float:
        """Seconds since start."""
        return round(time.monotonic() - self.started, 3)
