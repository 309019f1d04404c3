"""The composition root: every part of the daemon, built from its constructor's
arguments, in the order data flows from the disk to the socket (docs/design.md draws
the same picture).

    Changes         the kernel's change queue that every query drains
    EventLog        generations, the replay history, the sinks (frozen below)
    Engine          the cache: snapshots per state file, read through the pipeline
    Refresher       the cache's only writer (a thread)
    Watcher         watchdog's watches, feeding the refresher
    Daemon          workspaces, warm-up, direct reads on a thread pool
    Notifications   drift to the log, the desktop, a hook        } optional parts,
    AutoReconciler  [reconcile] auto                              } each an event
    FleetSink       [fleet], to NATS JetStream                    } sink
    Recorder        [history], every version into SQLite          }
    Server          the protocol's ops, on a Transport (the socket)

Nothing is configured after this function returns: the event sinks and the engine's
look listeners are frozen here (listeners.py), before any thread starts. One late
binding remains, said where it is made: the refresher runs the daemon's upkeep, and
the daemon needs the refresher it runs on.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from storyd.core import storytime, switches
from storyd.core.gitstate import git_operation_in_progress
from storyd.core.pipeline import Options
from storyd.server import fastjson, notify
from storyd.server.changes import Changes
from storyd.server.engine import Engine
from storyd.server.events import EventLog
from storyd.server.ops import Server
from storyd.server.quietgc import fix_malloc_thresholds
from storyd.server.refresher import GIT_SETTLE, Refresher
from storyd.server.service import Daemon, Settings
from storyd.server.watcher import Watcher

if TYPE_CHECKING:
    from storyd.config import Config
    from storyd.core.pipeline import Detect
    from storyd.server.fleet_sink import FleetSink
    from storyd.server.install import Regressed
    from storyd.server.reconciler import AutoReconciler
    from storyd.server.recorder import Recorder

__all__ = ["DIRECT_READERS", "Assembly", "assemble", "build_daemon"]

DIRECT_READERS = 4  # threads of the pool that reads what the cache cannot answer


@dataclass(frozen=True, slots=True)
class Assembly:
    """The parts of one daemon, as `assemble` built them."""

    daemon: Daemon
    server: Server
    notifications: notify.Notifications
    auto: AutoReconciler | None
    fleet: FleetSink | None
    history: Recorder | None = None

    def close_optional_parts(self) -> None:
        """Stop the threads of the optional parts (after the daemon has stopped)."""
        self.notifications.close()
        if self.auto is not None:
            self.auto.close()
        if self.fleet is not None:
            self.fleet.close()
        if self.history is not None:
            self.history.close()


def assemble(
    settings: Settings,
    cfg: Config,
    detect: Detect | None,
    hold_tips: Callable[[bool], None],
    socket: str,
    instance: str | None = None,
) -> Assembly:
    """Build the daemon for `settings` and `cfg`: `detect` checks a unit (None: no
    detectors), `hold_tips` brackets a pass over a workspace's units, `socket` is the
    path the notification hook is told, `instance` the clock's (the early door's).
    Starts only the optional parts' threads; the daemon's own start with `Daemon.start`."""

    history = _history(cfg)
    regressed = history.regressed if history is not None else None
    daemon = build_daemon(settings, detect, hold_tips, regressed, instance)
    engine = daemon.engine
    events = engine.log
    notifications = notify.Notifications(
        **notify.settings_of(cfg), socket=socket,
        in_first_look=engine.in_first_look, in_last_look=engine.in_last_look,
    )  # fmt: skip
    auto = _auto_reconciler(engine, cfg)
    fleet = _fleet(engine, cfg)
    reports: dict[str, Callable[[], object]] = {"fleet": fleet.state} if fleet else {}
    if history is not None:
        reports["history"] = history.state
    server = Server(daemon, cfg, reports, history=history)

    events.sinks.append(server.transport.sink)  # subscribers, once the loop serves
    events.sinks.append(notifications)
    engine.looks.append(notifications.looked)
    if auto is not None:
        events.sinks.append(auto)
    if fleet is not None:
        events.sinks.append(fleet)
    if history is not None:
        events.sinks.append(history)
        history.give_way = engine.reads.priority.give_way  # queries' reads first
        daemon.lost_now = history.peek  # a miss tells the progress lost, as a hit does
        history.start()
    events.sinks.freeze()
    engine.looks.freeze()
    return Assembly(daemon, server, notifications, auto, fleet, history)


def build_daemon(
    settings: Settings,
    detect: Detect | None = None,
    hold_tips: Callable[[bool], None] | None = None,
    regressed: Regressed | None = None,
    instance: str | None = None,
) -> Daemon:
    """The daemon's core, from the disk to the cache: change queue, event log, engine,
    refresher, watcher, direct readers (what `assemble` builds on; tests use it alone).
    `instance`: the event log's (None: a new one)."""

    def git_busy(workspace: str) -> bool:  # limits.git_lock_wait as a reload leaves it
        return git_operation_in_progress(workspace, settings.limits.git_lock_wait)

    def git_writing(workspace: str) -> bool:
        """git_busy, or a work tree git wrote within the git settle window: a state file
        git has just written is checked once git settles (its refs may not have moved
        yet), not in between (the recheck itself comes a settle window later)."""
        return git_operation_in_progress(workspace, settings.limits.git_lock_wait,
                                         GIT_SETTLE)  # fmt: skip

    options = Options(settings.limits.lock_timeout, settings.staleness,
                      settings.limits.max_answer_bytes)
    engine = Engine(
        options, detect=detect, changes=Changes(), events=EventLog(instance=instance),
        git_busy=git_writing, hold_tips=hold_tips, regressed=regressed,
    )  # fmt: skip
    # the process-wide switches, thrown here and nowhere else: state files parse with
    # orjson (never in the CLI; a big one with the collector held off,
    # server/quietgc.py), the socket's JSON is orjson's (server/protocol.py), and git
    # mode dates story files from one git pass per workspace
    switches.configure(fast_parse=engine.reads.quiet.parsing(fastjson.loads, fastjson.loads_big),
                       fast_dump=orjson.dumps, max_state_bytes=settings.limits.max_state_bytes)
    fix_malloc_thresholds()  # a big read's blocks go back to the system when freed
    if settings.staleness == storytime.GIT:
        switches.configure(git_batching=True)
    refresher = Refresher(
        engine, settle=settings.settle, verify_interval=settings.limits.verify_interval,
        git_busy=git_busy,
    )  # fmt: skip
    watcher = Watcher(engine.adapters, refresher)
    readers = ThreadPoolExecutor(DIRECT_READERS, thread_name_prefix="storyd-direct")
    daemon = Daemon(settings, engine, refresher, watcher, readers)
    # the one late binding: the daemon's upkeep runs on the refresher it holds
    refresher.on_tick, refresher.before_scan = daemon.tick, daemon.roots_changed
    return daemon


def _auto_reconciler(engine: Engine, cfg: Config) -> AutoReconciler | None:
    """Auto-apply when `[reconcile] auto` lists any class."""
    if not cfg.reconcile_auto:
        return None
    from storyd.server.reconciler import AutoReconciler

    return AutoReconciler(engine, cfg)


def _fleet(engine: Engine, cfg: Config) -> FleetSink | None:
    """Publish to NATS when [fleet] is configured (`nats` is imported only then)."""
    if cfg.fleet is None:
        return None
    from storyd.server import fleet_sink

    return fleet_sink.start(engine, cfg)


def _history(cfg: Config) -> Recorder | None:
    """Record every version when [history] is enabled (the default) and the database
    can be written by this daemon."""
    from storyd.server import recorder

    return recorder.start(cfg.history)
