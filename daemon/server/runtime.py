"""The daemon's life: socket, threads, systemd notifications, reload and shutdown.

Start: take systemd's socket (LISTEN_FDS), launchd's (launchd.py) or bind our own,
register the workspaces and READY=1 as soon as the socket serves; the workspaces are
read and checked behind (docs/service.md says why READY=1 means "serving", not "warm"). While
serving: STATUS= lines, WATCHDOG=1 at half of WATCHDOG_USEC, SIGHUP reloads the
configuration. Stop (SIGTERM, SIGINT): STOPPING=1, stop accepting, finish
the replies in flight, stop the threads, and unlink the socket only if it is still
the one we bound (same inode), so a successor's socket is never removed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from typing import TYPE_CHECKING

from storyd.core.errors import StorydError
from storyd.server import systemd
from storyd.server.assembly import Assembly, assemble
from storyd.server.bind import Bound, take_socket
from storyd.server.lazydetect import Detectors

if TYPE_CHECKING:
    from structlog.typing import FilteringBoundLogger

    from storyd.config import Config
    from storyd.server.door import EarlyDoor
    from storyd.server.early import Answered, EarlyAnswers
    from storyd.server.ops import Server
    from storyd.server.service import Daemon, Settings

__all__ = ["FIRST_QUERY_GRACE", "Runtime"]

FIRST_QUERY_GRACE = 0.05  # seconds after serving before the warm-up's reads are queued


class Runtime:
    """One run of `storyd serve`: the assembled daemon, its socket and its signals.

    Every signal is handled here, on the event loop: SIGTERM and SIGINT stop the
    transport's serving, SIGHUP reloads the configuration.
    """

    def __init__(
        self,
        settings: Settings,
        cfg: Config,
        config_file: str | None,
        logger: FilteringBoundLogger,
    ) -> None:
        self.settings = settings
        self.cfg = cfg
        self.config_file = config_file
        self.log = logger
        self.notifier = systemd.Notifier()
        self._serving: dict[str, object] = {}  # what the "serving" line says, once ready
        self.parts: Assembly | None = None
        self.detectors: Detectors | None = None

    @property
    def daemon(self) -> Daemon | None:
        """The assembled daemon (None before `run` builds it)."""
        return self.parts.daemon if self.parts is not None else None

    def run(self, socket_flag: str | Bound, workspaces: list[str],
            door: EarlyDoor | None = None, early: EarlyAnswers | None = None) -> int:
        """Serve until stopped; the exit code. `socket_flag`: the socket `storyd serve`
        took already (bind.take_socket), or the path to take it at. `door`: the early
        door answering on it meanwhile with `early` (server/door.py), closed once the
        daemon serves; the daemon takes their instance and detectors over."""
        bound = socket_flag if isinstance(socket_flag, Bound) else take_socket(socket_flag)
        # the detectors and their plugins load at their first use, after the socket serves
        # (lazydetect.py), or the early door's; a plugin that fails to load is skipped then
        self.detectors = detectors = (early.detectors if early is not None
                                      else Detectors(self.cfg, self.settings.staleness))
        try:
            self.parts = parts = assemble(
                self.settings, self.cfg, detectors.detect, detectors.hold_tips, bound.path,
                early.instance if early is not None else None,
            )
            daemon = parts.daemon
            try:
                daemon.start(workspaces, warm=False)  # warm_up: once serving (`ready`)
                # said once the socket accepts and SIGTERM is handled (`ready` below): a
                # supervisor that stops the daemon on seeing this line gets a clean stop
                self._serving = {
                    "socket": bound.path,
                    "workspaces": len(daemon.engine.workspaces),
                    "activated": bound.inherited,
                    "pid": os.getpid(),
                }
                asyncio.run(self._serve(parts.server, bound.sock, door, early))
            finally:
                self.notifier.stopping()
                daemon.stop()
                parts.close_optional_parts()
        finally:
            if door is not None:  # never served (assembly failed, say): what it handed is closed
                door.close(lambda sock, _data: sock.close())
            self.detectors.close()  # the one _swap_detectors may have put in its place
            bound.close()
            self.log.info("stopped")
        return 0

    async def _serve(self, server: Server, sock: socket.socket,
                     door: EarlyDoor | None, early: EarlyAnswers | None) -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        loop.add_signal_handler(signal.SIGHUP, self.reload)
        if door is not None and door.stop_asked.is_set():  # while the daemon was built
            stop.set()
        tasks = []

        def ready() -> None:
            assert self.daemon is not None
            if early is not None:  # first: what it answered is known before what it handed
                early.hand_over(lambda got: loop.call_soon_threadsafe(self._answered, got))
            if door is not None:
                door.close(server.transport.adopt)
                self.log.info("early_door", answered=door.answered, handed=door.handed)
            # the warm-up's whole-file reads start a moment after the socket serves: the
            # first queries (a client waiting in the backlog) read their unit alone first
            loop.call_later(FIRST_QUERY_GRACE, self.daemon.warm_up)
            self.log.info("serving", **self._serving)
            self.notifier.ready()
            self._status()
            interval = self.notifier.watchdog_interval()
            if interval:
                tasks.append(loop.create_task(self._watchdog(interval)))
            tasks.append(loop.create_task(self._status_loop()))

        try:
            await server.transport.serve(sock, stop, ready)
        finally:
            for task in tasks:
                task.cancel()

    def _answered(self, got: Answered) -> None:
        """What the early door answered from one file: misses, its workspace asked
        (auto-watch), its read kept as a miss's is (a torn file answers from it)."""
        daemon = self.daemon
        assert daemon is not None
        daemon.counters["queries"] += got.count
        daemon.counters["misses"] += got.count
        try:
            path = daemon.canonical(got.workspace)
        except StorydError:  # gone since: nothing to watch or keep
            return
        daemon.auto_watch(path)
        if got.data is not None:
            daemon.engine.reads.keep_newer(path, got.relpath, got.data, got.sig, got.read_ns)

    def _status(self) -> None:
        assert self.daemon is not None
        engine = self.daemon.engine
        entries = engine.entries()
        findings = sum(len(e.findings) for e in entries)
        warm = self.daemon.warm_progress()
        warming = (
            f"warming ({warm['workspacesRead']}/{warm['workspaces']} workspaces read, "
            f"{warm['unitsChecked']} units checked), "
            if warm["warming"]
            else ""
        )
        unwatched = self.daemon.watcher.unwatched_dirs()
        polled = f"; {unwatched} folders polled, not watched (inotify limit)" if unwatched else ""
        self.notifier.status(
            f"{warming}{len(engine.workspaces)} workspaces, {len(entries)} units, "
            f"{findings} findings{polled}"
        )

    async def _status_loop(self) -> None:
        while True:
            warming = self.daemon is not None and self.daemon.warm_progress()["warming"]
            await asyncio.sleep(1 if warming else 10)  # warm-up progress, once a second
            self._status()

    async def _watchdog(self, interval: float) -> None:
        while True:
            self.notifier.watchdog()
            await asyncio.sleep(interval)

    def reload(self) -> None:
        """SIGHUP: re-read the configuration; keep the old one if the new one is bad."""
        from storyd import config

        self.notifier.reloading()
        try:
            new = config.load(self.config_file)
        except Exception as exc:
            message = getattr(exc, "message", str(exc))
            self.log.error("reload_rejected", error=message)
            self.notifier.ready()
            return
        assert self.daemon is not None
        old_workspaces = set(self.cfg.workspaces)
        new_workspaces = set(new.workspaces)
        for path in sorted(new_workspaces - old_workspaces):
            if os.path.isdir(path):
                self.daemon.watch(os.path.realpath(path))
        for path in sorted(old_workspaces - new_workspaces):
            self.daemon.unwatch(os.path.realpath(path))
        old, self.cfg = self.cfg, new
        for key in ("socket", "staleness", "reconcile_auto", "fleet"):
            if getattr(new, key) != getattr(old, key):
                self.log.warning("reload_needs_restart", key=key.replace("_", "."))
        self._apply(new)
        if new.detectors != old.detectors:
            self._swap_detectors(new)
        self.log.info(
            "reloaded",
            added=sorted(new_workspaces - old_workspaces),
            removed=sorted(old_workspaces - new_workspaces),
        )
        self.notifier.ready()

    def _swap_detectors(self, cfg: Config) -> None:
        """New detector settings: rebuild the runner, recheck every unit, keep the files cached."""
        assert self.daemon is not None
        engine = self.daemon.engine
        detectors = Detectors(cfg, self.settings.staleness)
        try:
            detectors.build()  # a reload's failure is said now, the old ones kept
        except Exception as exc:
            self.log.error("detectors_reload_failed", error=getattr(exc, "message", str(exc)))
            return
        old, self.detectors = self.detectors, detectors

        def swap() -> None:
            engine.use_detectors(detectors.detect, detectors.hold_tips)
            for ws in list(engine.workspaces.values()):
                engine.recheck(ws)
            if old is not None:
                old.close()

        self.daemon.refresher.call(swap)

    def _apply(self, cfg: Config) -> None:
        """Settings that can change without a restart: the limits, swapped whole."""
        from storyd.server import notify

        assert self.daemon is not None and self.parts is not None
        self.daemon.use_limits(cfg.limits, auto_watch=cfg.auto_watch)
        self.parts.notifications.configure(**notify.settings_of(cfg))
