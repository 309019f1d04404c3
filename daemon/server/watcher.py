"""Watch the format roots and git directories with watchdog and feed the refresher.

watchdog's threads (its observer, and one emitter per scheduled watch: a workspace
takes 2 to 6) turn inotify events into `Refresher.request*()` calls
(server/refresher.py), which debounces them and reads the files.

Never the whole work tree: each workspace gets a non-recursive watch on its root (to
see a format root appear) and a recursive watch on each format root that exists (not
one linked out of the workspace), asking inotify only for the events that matter
(EVENT_FILTER). An overflow costs one rescan per workspace and one JSON log line
(_WatchdogLog); a periodic verification (inode, size, mtime of every known state file,
plus a slower full rescan) keeps the cache honest whatever was missed, and polls what
the kernel refused to watch (inotify limits: `polled`, `unwatched_dirs`).

Where events cannot be trusted, the verification tick polls (`polled`): a workspace on
a mount whose writes may come from outside this kernel (WSL2's drvfs over 9p, network
and FUSE file systems: storyd.core.mounts; its answers are also checked by stat, in
server/changes.py), and every workspace when the observer is not inotify's (macOS's
FSEvents drops its "must rescan" flags in watchdog; kqueue and polling observers
coalesce), so a lost event waits one tick, not the full rescan. On FSEvents the flags
that say events were dropped ask for a rescan too (server/observers.py).

The watches are the refresher's: only that thread schedules and unschedules them, and
only it walks the watched trees to count their folders. watchdog's dispatcher thread
calls our handlers while it holds the observer's lock, so a lock of ours taken there
and held around `schedule` on the refresher deadlocked the two threads; the handlers
therefore touch no watch state and only queue work for the refresher.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
import time
from typing import TYPE_CHECKING

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirModifiedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers.api import BaseObserver, ObservedWatch

from storyd.core import log
from storyd.core.gitstate import locate
from storyd.core.mounts import Table
from storyd.server import inotify
from storyd.server.observers import LIMIT_ERRORS, NoObserver, is_inotify, new_observer

if TYPE_CHECKING:
    from storyd.core.formats import Adapter
    from storyd.server.refresher import Refresher

__all__ = ["Watcher"]

_IGNORED_EVENTS = frozenset(("opened", "closed_no_write"))
# what the watches ask inotify for: never IN_OPEN or IN_CLOSE_NOWRITE, which every read
# (ours, os.walk's, a reader's) makes, and which made each overflow's re-walk overflow again
EVENT_FILTER = [
    FileCreatedEvent,
    DirCreatedEvent,
    FileDeletedEvent,
    DirDeletedEvent,
    FileModifiedEvent,
    DirModifiedEvent,
    FileMovedEvent,
    DirMovedEvent,
    FileClosedEvent,
]
_OVERFLOW_LOG_EVERY = 60.0  # seconds between two `inotify_overflow` lines
_WATCH_RETRY = 30.0  # seconds before a watch the kernel refused is tried again
# a write has ended: closed after writing, renamed or moved into place, or created
# (a file moved in from outside the watch arrives as created)
_WRITE_ENDED_EVENTS = frozenset(("closed", "moved", "created"))



class _Handler(FileSystemEventHandler):
    """Routes one workspace's watchdog events to the refresher."""

    def __init__(self, watcher: Watcher, workspace: str) -> None:
        self.watcher = watcher
        self.workspace = workspace
        self.prefix = workspace.rstrip("/") + "/"

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in _IGNORED_EVENTS:
            return
        for raw in (event.src_path, getattr(event, "dest_path", "")):
            path = os.fsdecode(raw)
            if path and (path == self.workspace or path.startswith(self.prefix)):
                self.watcher.route(self.workspace, path[len(self.prefix) :], event)


class _GitHandler(FileSystemEventHandler):
    """Routes a workspace's git-directory events (HEAD, index, refs) to a recheck."""

    def __init__(self, refresher: Refresher, workspace: str) -> None:
        self.refresher = refresher
        self.workspace = workspace

    def on_any_event(self, event: FileSystemEvent) -> None:
        if git_event_matters(event):
            self.refresher.request_git(self.workspace)


def git_event_matters(event: FileSystemEvent) -> bool:
    """Whether a git-directory event can change what a recheck reads (refs, HEAD, index),
    or says a git operation began or ended.

    Judged by the path the event leaves behind: a lock renamed onto `refs/heads/main` is
    the ref's update. Not: ref lock files coming and going inside an update, and a
    folder's own `modified` (watchdog adds one beside each child's event).
    """
    if event.event_type in _IGNORED_EVENTS:
        return False
    if event.is_directory and event.event_type == "modified":
        return False
    moved_to = getattr(event, "dest_path", "") if event.event_type == "moved" else ""
    leaf = os.fsdecode(moved_to or event.src_path).rsplit("/", 1)[-1]
    return leaf == "index.lock" or not leaf.endswith(".lock")


class Watcher:
    """watchdog watches for the workspaces' format roots and git directories.

    Owned by the refresher thread: `watch`, `ensure_roots`, `unwatch` and `recount` run
    there and nowhere else (`stop`, on the thread that stops the daemon, only sets a flag
    under `_stop_lock`). `route` runs on watchdog's dispatcher thread and only marks a
    workspace (under `_marks_lock`, which is held for nothing else) and queues a scan;
    `watched_dirs` runs on the event loop and reads one int.
    """

    def __init__(self, adapters: list[Adapter], refresher: Refresher) -> None:
        """Watches for the roots of `adapters`' formats; events go to `refresher`."""
        self.refresher = refresher
        self.observer: BaseObserver | NoObserver = new_observer(on_lost=self.overflowed)
        self._started = False
        self.log = log.get("watcher")
        self._watches: dict[str, dict[str, ObservedWatch]] = {}
        self._counts: dict[str, set[int]] = {}  # inodes of the folders to watch (recount)
        self._total = 0  # directories really watched (the kernel's count): what `stats` reads
        self._wanted = 0  # directories under the watches asked for (watched or not)
        self._failed: dict[tuple[str, str], float] = {}  # (workspace, key) -> last try
        self._inodes: dict[tuple[str, str], int] = {}  # (workspace, key) -> folder watched
        self._limit_said = False  # `inotify_limit` logged for the current shortfall
        self._short = 0  # folders without a watch at the last count
        self._missing = 0  # ... at the last two counts (what is reported and polled)
        self._dirty: set[str] = set()  # workspaces whose count is out of date
        self._marks_lock = threading.Lock()  # guards _dirty only; never held around a call
        # a watch scheduled on a stopped observer would start a thread nobody stops:
        # `stop` (main thread) sets _stopped, and the refresher schedules, under
        # _stop_lock (never taken on watchdog's dispatcher thread)
        self._stopped = False
        self._stop_lock = threading.Lock()
        self._outside: set[tuple[str, str]] = set()  # (workspace, root) refused, said once
        self.roots = sorted({root for a in adapters for root in a.roots})
        self._top = {root.split("/")[0] for root in self.roots}
        self._watchdog_log = _WatchdogLog(self)  # watchdog's lines, while this one runs
        self._mounts = Table()
        self._untrusted: dict[str, str] = {}  # workspace -> why its events are not trusted
        self.native = is_inotify(self.observer)  # else every workspace is polled

    def start(self) -> None:
        """Start watchdog's observer thread (its log lines and overflows come to us)."""
        if not self.native:
            self.log.info(
                "watch_polled",
                observer=type(self.observer).__name__,
                note="not inotify: each workspace is also checked every verify_interval",
            )
        self._watchdog_log.attach()
        self._started = True
        self.observer.start()

    def stop(self) -> None:
        """Stop watching everything; later `watch` calls schedule nothing."""
        self._watchdog_log.detach()
        with self._stop_lock:
            self._stopped = True
        self.observer.stop()
        self.observer.join(timeout=5)

    def watched_dirs(self) -> int:
        """How many directories carry an inotify watch (for `doctor` and `stats`).

        The last count: no tree is walked and no lock is taken here, so `stats` on the
        event loop never waits for a walk, nor for the refresher changing watches.
        Counts are made by `recount` on the refresher.
        """
        return self._total

    def _mark(self, workspace: str) -> None:
        """The workspace's watched trees changed: count them again at the next recount."""
        with self._marks_lock:
            self._dirty.add(workspace)

    def unwatched_dirs(self) -> int:
        """Directories that should carry a watch and have not had one for two counts in a
        row (inotify limits; a folder just made gets its watch from watchdog's thread a
        moment later): they are polled every verification tick instead (`polled`)."""
        return self._missing

    def polled(self) -> list[str]:
        """The workspaces whose trees are not all watched, or whose events cannot be
        trusted: every one while the kernel holds fewer watches than asked for (which
        folders is not known) or the observer is not inotify's, else those with a watch
        that failed and those on an untrusted mount."""
        if self.unwatched_dirs() or not self.native:
            return list(self._watches.copy())
        return sorted({w for w, _ in self._failed.copy()} | set(self._untrusted.copy()))

    def untrusted(self) -> dict[str, str]:
        """The watched workspaces on a mount whose events cannot be trusted, and why."""
        return dict(self._untrusted.copy())

    def recount(self, workspace: str | None = None) -> None:
        """Count the directories asked for of `workspace`, or of every workspace whose
        watched trees gained or lost a directory since the last count, and the ones the
        kernel really watches (refresher). A shortfall is logged once."""
        with self._marks_lock:
            names = [workspace] if workspace is not None else sorted(self._dirty)
            self._dirty.difference_update(names)
        for w in names:
            keys = self._watches.get(w)
            if keys is not None:
                failed = [k for ws, k in self._failed if ws == w]
                self._counts[w] = _count_watched_dirs(w, [*keys, *failed])
        wanted: set[int] = set().union(*self._counts.values())
        # the kernel's own count of inotify watches; another observer's are not in it
        real = inotify.kernel_watches() if self.native else None
        self._wanted = len(wanted)
        self._total = self._wanted if real is None else len(wanted & real)
        short = self._wanted - self._total
        self._missing = min(short, self._short) if short > 0 else 0  # seen twice running
        self._short = short
        self._say_shortfall()

    def _say_shortfall(self) -> None:
        missing = self.unwatched_dirs()
        if missing and not self._limit_said:
            self._limit_said = True
            self.log.warning(
                "inotify_limit",
                watched=self._total,
                wanted=self._wanted,
                unwatched=missing,
                max_user_watches=inotify.max_user_watches(),
                note="the unwatched folders are polled every verify_interval; raise "
                "fs.inotify.max_user_watches (sysctl) to watch them",
            )
        elif not missing and self._limit_said:
            self._limit_said = False
            self.log.info("inotify_limit_cleared", watched=self._total)

    def watch(self, workspace: str) -> None:
        """Watch a workspace's root (non-recursive), its format roots and its git refs."""
        with self._stop_lock:
            if self._stopped:
                return
            watches = self._watches.setdefault(workspace, {})
            self._judge_mount(workspace)
            handler = _Handler(self, workspace)
            self._schedule(workspace, watches, "top", handler, workspace, recursive=False)
            self._ensure_roots(workspace, watches, handler)
            self._ensure_git(workspace, watches, handler)
        self.recount(workspace)

    def _judge_mount(self, workspace: str) -> None:
        """Whether the workspace's events can be trusted (its mount); said once."""
        reason = self._mounts.untrusted(workspace)
        if reason is None:
            self._untrusted.pop(workspace, None)
            return
        if workspace not in self._untrusted:
            self.log.warning("untrusted_mount", workspace=workspace, reason=reason)
        self._untrusted[workspace] = reason

    def ensure_roots(self, workspace: str) -> None:
        """Add watches for format roots created since the last look (nested ones included)
        and drop those of roots that vanished (refresher); a change is counted again at
        the next `recount`."""
        with self._stop_lock:
            watches = self._watches.get(workspace)
            if watches is not None and not self._stopped:
                before = set(watches)
                handler = _Handler(self, workspace)
                self._schedule(workspace, watches, "top", handler, workspace, recursive=False)
                self._ensure_roots(workspace, watches, handler)
                self._ensure_git(workspace, watches, handler)
                if set(watches) != before:
                    self._mark(workspace)

    def _schedule(
        self,
        workspace: str,
        watches: dict[str, ObservedWatch],
        key: str,
        handler: FileSystemEventHandler,
        path: str,
        recursive: bool,
    ) -> None:
        """Watch `path` unless it is watched; a watch the kernel refuses (max_user_watches,
        max_user_instances) is said once, polled meanwhile, and tried again later."""
        if key in watches or not os.path.isdir(path):
            return
        failed = (workspace, key)
        last = self._failed.get(failed)
        if last is not None and time.monotonic() - last < _WATCH_RETRY:
            return
        try:
            if isinstance(self.observer, NoObserver):  # no inotify instance yet: try again
                self.observer = new_observer(raising=True)
                if self._started:
                    self.observer.start()
            watches[key] = self.observer.schedule(
                handler, path, recursive=recursive, event_filter=EVENT_FILTER
            )
        except OSError as exc:
            if exc.errno not in LIMIT_ERRORS:  # gone meanwhile, say: tried at the next look
                self.log.warning("watch_failed", path=path, error=exc.strerror or str(exc))
                return
            self._failed[failed] = time.monotonic()
            if last is None:
                self.log.warning(
                    "watch_failed",
                    path=path,
                    error=exc.strerror or str(exc),
                    note="polled every verify_interval instead; tried again every "
                    f"{_WATCH_RETRY:g} s",
                )
            return
        with contextlib.suppress(OSError):
            self._inodes[failed] = os.stat(path).st_ino
        if self._failed.pop(failed, None) is not None:
            self.log.info("watch_restored", path=path)
            self._mark(workspace)

    def _ensure_roots(
        self, workspace: str, watches: dict[str, ObservedWatch], handler: _Handler
    ) -> None:
        for root in self.roots:
            key = f"root:{root}"
            path = os.path.join(workspace, root)
            watch = watches.get(key)
            outside = os.path.isdir(path) and not _inside(workspace, path)
            if watch is not None and (
                outside or self._replaced(workspace, key, path) or self._dead(watch)
            ):
                self._unschedule(watches, key)  # vanished (or replaced): re-added when back
            if outside:
                self._refuse_outside(workspace, root, path)
                continue
            self._schedule(workspace, watches, key, handler, path, recursive=True)
            if "/" in root:
                self._watch_parent(workspace, watches, handler, root)

    def _watch_parent(
        self, workspace: str, watches: dict[str, ObservedWatch], handler: _Handler, root: str
    ) -> None:
        """A nested root (docs/stories, .claude/plans) whose top folder exists first: watch
        that folder's own entries (not its tree), so the root's creation is an event and
        not a wait for the next verification tick."""
        key = f"parent:{root}"
        parent = os.path.join(workspace, root.rsplit("/", 1)[0])
        if os.path.isdir(os.path.join(workspace, root)) or not os.path.isdir(parent):
            self._unschedule(watches, key)  # the root's own watch covers it now (or no parent)
            return
        if not _inside(workspace, parent):
            return  # a folder that leads out of the workspace is never watched
        self._schedule(workspace, watches, key, handler, parent, recursive=False)

    def _dead(self, watch: ObservedWatch) -> bool:
        """Whether watchdog stopped the watch's emitter: its folder was deleted (inotify's
        IN_DELETE_SELF). A folder removed and made again often gets the same inode number
        back, so `_replaced` alone would keep the dead watch and the new folder would go
        unwatched."""
        emitters = getattr(self.observer, "emitters", ())  # none without an inotify instance
        return any(e.watch == watch and e.stopped_event.is_set() for e in emitters)

    def _replaced(self, workspace: str, key: str, path: str) -> bool:
        """Whether the folder a watch was put on is gone, or another folder now has its
        path (removed and made again between two looks: the old watch went with it)."""
        try:
            inode = os.stat(path).st_ino
        except OSError:
            return True
        return self._inodes.get((workspace, key), inode) != inode

    def _refuse_outside(self, workspace: str, root: str, path: str) -> None:
        """A format root that is a symlink out of the workspace: never watched (a link to
        /usr would put a watch on each of its folders); said once per root."""
        if (workspace, root) in self._outside:
            return
        self._outside.add((workspace, root))
        self.log.warning(
            "root_outside_workspace",
            workspace=workspace,
            root=root,
            target=os.path.realpath(path),
            note="a format root that leads out of the workspace is not watched",
        )

    def _ensure_git(
        self, workspace: str, watches: dict[str, ObservedWatch], handler: _Handler
    ) -> None:
        dirs = locate(workspace)
        if dirs is None:
            return
        gitdir, common = dirs.gitdir, dirs.common
        git_handler = _GitHandler(self.refresher, workspace)
        refs = os.path.join(common, "refs")
        self._schedule(workspace, watches, "git", git_handler, gitdir, recursive=False)
        if common != gitdir:  # a linked worktree: its refs and packed-refs live in the common dir
            self._schedule(workspace, watches, "git-common", git_handler, common, recursive=False)
        self._schedule(workspace, watches, "git-refs", git_handler, refs, recursive=True)

    def _unschedule(self, watches: dict[str, ObservedWatch], key: str) -> None:
        watch = watches.pop(key, None)
        if watch is not None:
            with contextlib.suppress(KeyError, OSError):  # already gone with its folder
                self.observer.unschedule(watch)

    def unwatch(self, workspace: str) -> None:
        """Remove every watch of a workspace (refresher)."""
        watches = self._watches.pop(workspace, {})
        for key in list(watches):
            self._unschedule(watches, key)
        self._counts.pop(workspace, None)
        self._untrusted.pop(workspace, None)
        for failed in [f for f in self._failed if f[0] == workspace]:
            del self._failed[failed]
        for known in [k for k in self._inodes if k[0] == workspace]:
            del self._inodes[known]
        self.recount()
        with self._marks_lock:
            self._dirty.discard(workspace)

    def overflowed(self) -> None:
        """inotify dropped events (watchdog's thread): rescan each workspace once."""
        for workspace in self._watches.copy():  # one C call: safe beside the refresher
            self.refresher.request_scan(workspace, lost=True)

    def route(self, workspace: str, relpath: str, event: FileSystemEvent) -> None:
        """Send one event to the refresher: a state path, a git change, or a root change.

        On watchdog's dispatcher thread, inside the observer's lock: queue, never wait
        for the refresher (which may be waiting for that lock in `schedule`)."""
        if relpath == ".git" or relpath.startswith(".git/"):
            return  # the git directories have their own handler
        top = relpath.split("/", 1)[0]
        if (
            event.is_directory
            and top in self._top
            and event.event_type in ("created", "deleted", "moved")
        ):
            self._mark(workspace)  # a watched tree gained or lost a directory
            # the refresher fixes the watches (`before_scan`), then scans
            self.refresher.request_scan(
                workspace, lost=event.event_type != "created" or "/" not in relpath
            )
            return
        if relpath:
            self.refresher.request(
                workspace, relpath, complete=event.event_type in _WRITE_ENDED_EVENTS
            )


class _WatchdogLog(logging.Handler):
    """watchdog's own log lines, as JSON through storyd.core.log, never as plain text.

    watchdog logs "Inotify queue overflowed" (stdlib logging, which without a handler
    printed plain text into the JSON log) each time the kernel drops events, then
    re-walks its recursive watches. Here an overflow asks the watcher for one rescan
    (the refresher merges requests: one scan however many overflows arrive meanwhile)
    and is logged once, then at most every minute with the count since.

    Each watcher attaches its own handler while it runs: the "watchdog" logger's
    handler list (stdlib logging's, process-wide) is the only shared state.
    """

    def __init__(self, watcher: Watcher) -> None:
        super().__init__(logging.WARNING)
        self._watcher = watcher
        self._overflows = 0
        self._logged_at = -_OVERFLOW_LOG_EVERY
        self._lock = threading.Lock()

    def attach(self) -> None:
        source = logging.getLogger("watchdog")
        source.addHandler(self)
        source.propagate = False

    def detach(self) -> None:
        source = logging.getLogger("watchdog")
        source.removeHandler(self)
        if not any(isinstance(h, _WatchdogLog) for h in source.handlers):
            source.propagate = True

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "overflow" not in text.lower():
            log.get("watchdog").warning("watchdog", message=text[:300], level_name=record.levelname)
            return
        now = time.monotonic()
        with self._lock:
            self._overflows += 1
            say = now - self._logged_at >= _OVERFLOW_LOG_EVERY
            if say:
                count, self._overflows, self._logged_at = self._overflows, 0, now
        if say:
            log.get("watcher").warning(
                "inotify_overflow",
                overflows=count,
                note="events were lost; each workspace is rescanned once",
            )
        self._watcher.overflowed()


def _inside(workspace: str, path: str) -> bool:
    """Whether `path` (resolved) lies in the workspace (resolved)."""
    top = os.path.realpath(workspace)
    real = os.path.realpath(path)
    return real == top or real.startswith(top.rstrip("/") + "/")


def _count_watched_dirs(workspace: str, keys: list[str]) -> set[int]:
    """The inode numbers of the folders under a workspace's watches (a recursive watch
    covers its tree): a set, so that folders two watches share count once, as the
    kernel counts them."""
    inodes: set[int] = set()
    dirs = locate(workspace)
    for key in keys:
        if key.startswith("root:"):
            inodes.update(_tree_inodes(os.path.join(workspace, key[5:])))
        elif key == "git-refs":
            inodes.update(_tree_inodes(os.path.join(dirs.common, "refs")) if dirs else ())
        else:
            place = {"top": workspace, "git": dirs.gitdir if dirs else None}.get(key)
            if key == "git-common" and dirs:
                place = dirs.common
            inodes.update(_tree_inodes(place, recursive=False) if place else ())
    return inodes


def _tree_inodes(top: str, *, recursive: bool = True) -> list[int]:
    """Inode numbers of `top` and (recursive) the folders below it, links not followed."""
    try:
        found = [os.stat(top).st_ino]
    except OSError:
        return []
    if not recursive:
        return found
    for root, names, _ in os.walk(top):
        for name in names:
            with contextlib.suppress(OSError):
                st = os.stat(os.path.join(root, name), follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):  # watchdog does not watch linked folders
                    found.append(st.st_ino)
    return found
