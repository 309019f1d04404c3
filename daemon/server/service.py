"""The daemon's state without the socket: engine, refresher, watcher and workspaces.

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

from daemon import answers, storytime
from daemon.config.values import DEFAULT_STALENESS, LIMITS
from daemon.errors import StateFileMissing, UsageError
from daemon.server import log
from daemon.server.engine import Detect, Engine
from daemon.server.watcher import Refresher, Watcher, git_operation_in_progress

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
    """
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
    """The knobs the daemon runs with (from flags and the configuration file)."""

    __slots__ = (
        "auto_watch",
        "git_lock_wait",
        "lock_timeout",
        "max_line_bytes",
        "max_subscribers",
        "max_workspaces",
        "settle",
        "staleness",
        "subscriber_buffer",
        "verify_interval",
    )

    def __init__(
        self,
        *,
        staleness: str = DEFAULT_STALENESS,
        lock_timeout: float = float(LIMITS["lock_timeout"][1]),
        max_workspaces: int = int(LIMITS["max_workspaces"][1]),
        auto_watch: bool = True,
        max_line_bytes: int = int(LIMITS["max_line_bytes"][1]),
        settle: float = LIMITS["settle_ms"][1] / 1000,
        verify_interval: float = float(LIMITS["verify_interval"][1]),
        max_subscribers: int = int(LIMITS["max_subscribers"][1]),
        subscriber_buffer: int = int(LIMITS["subscriber_buffer"][1]),
        git_lock_wait: float = float(LIMITS["git_lock_wait"][1]),
    ) -> None:
        """Defaults: config.LIMITS, the one table of every limit's default and range."""
        self.staleness = staleness
        self.lock_timeout = lock_timeout
        self.max_workspaces = max_workspaces
        self.auto_watch = auto_watch
        self.max_line_bytes = max_line_bytes
        self.settle = settle
        self.verify_interval = verify_interval
        self.max_subscribers = max_subscribers
        self.subscriber_buffer = subscriber_buffer
        self.git_lock_wait = git_lock_wait


class Warmup:
    """Progress of the start-up warm-up: workspaces read, then checked by detectors."""

    __slots__ = ("checked", "done", "read", "total")

    def __init__(self) -> None:
        self.total = self.read = self.checked = 0
        self.done = False

    def begin(self, total: int) -> None:
        """A warm-up of `total` workspaces starts (done at once when there are none)."""
        self.total = total
        self.done = total == 0


class Daemon:
    """Everything the daemon knows and does, minus the socket."""

    def __init__(self, settings: Settings, detect: Detect | None = None) -> None:
        self.settings = settings
        self.options = answers.Options(settings.lock_timeout, settings.staleness)
        self.engine = Engine(self.options, detect=detect)
        self.refresher = Refresher(
            self.engine, settle=settings.settle, verify_interval=settings.verify_interval
        )
        self.refresher.git_busy = self.git_busy
        self.engine.git_busy = self.git_busy
        self.engine.on_git_busy = self.refresher.request_git
        self.watcher = Watcher(self.engine, self.refresher)
        self.refresher.on_tick = self._tick
        self.refresher.before_scan = self._roots_changed
        self.executor = ThreadPoolExecutor(4, thread_name_prefix="storyd-direct")
        # spellings of workspace paths -> canonical path; the event loop adds (canonical),
        # the refresher removes (unwatch): both under the lock
        self.aliases: dict[str, str] = {}
        self._aliases_lock = threading.Lock()
        self.counters = {"queries": 0, "hits": 0, "misses": 0}
        self.started = time.monotonic()
        self.log = log.get("daemon")
        self._cap_warned = False
        self.warm = Warmup()

    def git_busy(self, workspace: str) -> bool:
        """Whether to defer a workspace's detectors: git is mid-operation, or wrote its
        index.lock less than `limits.git_lock_wait` seconds ago (a stale lock defers
        them no longer than that; see daemon/gitstate.py)."""
        return git_operation_in_progress(workspace, self.settings.git_lock_wait)

    # -- lifecycle -----------------------------------------------------------

    def start(self, workspaces: list[str]) -> None:
        """Register the configured workspaces and start the threads; warming runs behind.

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
        self.refresher.call(lambda: self._warm(paths))
        self.refresher.start()

    def _warm(self, paths: list[str]) -> None:
        """Start-up on the refresher thread: read every workspace, then run the detectors."""
        started = time.perf_counter()
        if self.settings.staleness == storytime.GIT:
            storytime.enable_batching()
        for path in paths:
            if not self.refresher.should_keep_running():
                return  # stopped mid-way: watch nothing more
            if path not in self.engine.workspaces:
                continue  # unwatched meanwhile
            try:
                self._watch_now(path)
            except Exception:
                self.log.exception("warm_failed", workspace=path)
            self.warm.read += 1
        read_ms = round((time.perf_counter() - started) * 1000, 3)
        for path in paths:
            if not self.refresher.should_keep_running():
                return
            ws = self.engine.workspaces.get(path)
            if ws is not None:
                try:
                    self.engine.check(ws)
                except Exception:
                    self.log.exception("warm_check_failed", workspace=path)
            self.warm.checked += 1
        self.warm.done = True
        self.log.info(
            "warm",
            workspaces=len(paths),
            units=sum(len(ws.entries) for ws in list(self.engine.workspaces.values())),
            read_ms=read_ms,
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
        )

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

    def _roots_changed(self, path: str) -> None:
        """Before a scan the watcher asked for (a folder came or went in a watched tree):
        watch format roots that appeared, drop vanished ones, count again (refresher)."""
        self.watcher.ensure_roots(path)
        self.watcher.recount()

    def _tick(self) -> None:
        """The refresher's verification tick: new or vanished format roots, and the
        watch count (recounted here, off the event loop: `stats` only reads it)."""
        for path in list(self.engine.workspaces):
            self.watcher.ensure_roots(path)
        self.watcher.recount()
        for path in self.watcher.polled():  # what inotify cannot watch is polled
            ws = self.engine.workspaces.get(path)
            if ws is not None:
                self.engine.scan(ws, reread=False)

    # -- workspaces ----------------------------------------------------------

    def canonical(self, raw: object) -> str:
        """A workspace path as the engine keys it (absolute, symlinks resolved)."""
        if not isinstance(raw, str) or not raw:
            raise UsageError("field 'workspace' must be a non-empty string")
        known = self.aliases.get(raw)  # a lone dict read: atomic under the GIL
        if known is not None:
            return known
        if not os.path.isabs(raw):
            raise UsageError(f"workspace {raw!r} must be an absolute path")
        path = os.path.realpath(raw)
        if not os.path.isdir(path):
            raise StateFileMissing(f"workspace {raw} does not exist")
        with self._aliases_lock:
            if len(self.aliases) >= _MAX_ALIASES:
                self.aliases.clear()
            self.aliases[raw] = path
        return path

    def _forget_aliases(self, path: str) -> None:
        """Drop every spelling of a workspace (from the refresher, while the loop adds)."""
        with self._aliases_lock:
            for alias in [a for a, p in self.aliases.items() if p == path]:
                del self.aliases[alias]

    def watching(self, path: str) -> bool:
        """Whether a canonical workspace path is watched."""
        return path in self.engine.workspaces

    def _watch_now(self, path: str) -> int:
        started = time.perf_counter()
        ws = self.engine.add_workspace(path)
        self.watcher.watch(path)
        files = self.engine.scan(ws)
        self.log.info(
            "watch",
            workspace=path,
            files=files,
            units=len(ws.entries),
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
        )
        return len(ws.entries)

    def watch(self, path: str) -> Future[int]:
        """Start watching (on the refresher thread); the future gives the unit count."""
        future: Future[int] = Future()
        if self.watching(path):
            future.set_result(len(self.engine.workspaces[path].entries))
            return future
        if len(self.engine.workspaces) >= self.settings.max_workspaces:
            msg = (
                f"already watching {self.settings.max_workspaces} workspaces (the cap); "
                "unwatch one or raise limits.max_workspaces"
            )
            future.set_exception(UsageError(msg))
            return future

        def run() -> None:
            try:
                future.set_result(self._watch_now(path))
            except Exception as exc:
                future.set_exception(exc)

        self.refresher.call(run)
        return future

    def unwatch(self, path: str) -> Future[bool]:
        """Stop watching a workspace and forget its entries."""
        future: Future[bool] = Future()

        def run() -> None:
            self.watcher.unwatch(path)
            removed = self.engine.remove_workspace(path)
            self._forget_aliases(path)
            future.set_result(removed)

        self.refresher.call(run)
        return future

    def auto_watch(self, path: str) -> None:
        """A query for an unwatched workspace: start watching it when allowed."""
        if not self.settings.auto_watch or self.watching(path):
            return
        if len(self.engine.workspaces) >= self.settings.max_workspaces:
            if not self._cap_warned:
                self._cap_warned = True
                self.log.warning("workspace_cap", cap=self.settings.max_workspaces, workspace=path)
            return
        self.watch(path)

    def warm_progress(self) -> dict[str, object]:
        """How far the start-up warm-up has got (for `stats` and `status`)."""
        spaces = list(self.engine.workspaces.values())
        return {
            "warming": not self.warm.done,
            "workspaces": self.warm.total,
            "workspacesRead": self.warm.read,
            "workspacesChecked": self.warm.checked,
            "unitsRead": sum(len(ws.entries) for ws in spaces),
            "unitsChecked": sum(len(ws.entries) for ws in spaces if ws.checked),
        }

    def uptime(self) -> float:
        """Seconds since start."""
        return round(time.monotonic() - self.started, 3)
