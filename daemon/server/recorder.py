"""The history recorder: every version of every unit into the history database, on a
thread of its own (storyd-history), and the `regressed` findings of a new version.

Two sides, both fed by the refresher thread, never by a query:

- `regressed(workspace, unit)`, called by the installer for each unit it builds (install.py),
  compares the unit with its held progress (api/history_rules.py: every task some version
  had finished) and gives one `regressed` warning per task lost. The marks move forward
  with the unit, but a lost task's mark stays until its progress comes back or the
  version is accepted (`accept`).
- `peek(workspace, unit)`, called by a cache miss (service.py) on a query's thread, gives
  what `regressed` would for the unit read now, moving nothing: the answer read directly
  tells the lost progress the cached one will.
- `__call__(event, line)`, a sink of the event log: a `changed` or `removed` unit event
  queues that version (the tasks `regressed` last saw) and the event's line, for the
  writer thread, which works out the rows and the envelope, prunes in the background
  ([history] limits) and gives way to queries' reads between versions.

What it holds is bounded per unit and small (issue 33's memory gap: 10,000 stories cost
~43 MB with history on): the marks, nested per state file; between a build and its event,
the build's tasks (the engine's own tuple, no copy), held only while the installer holds
its pass's keys (a weak reference: when it lets go, its events are all out); a queued
version holds the tasks and the event's line, never the Unit or the event's dict. Unit
ids are asked of the database when a version is written, not cached.

A failure to write (a full disk, a database gone bad) stops recording, with one log line,
and never stops serving: the findings go on from the marks in memory.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import orjson

from storyd.api import history_lineage as lineage
from storyd.api import history_marks
from storyd.api import history_rules as rules
from storyd.api import history_store as store
from storyd.api.history import on_branch
from storyd.api.history_db import Writer
from storyd.core import log
from storyd.core.worker import QueueWorker
from storyd.server import losses

if TYPE_CHECKING:
    from storyd.config.history import History
    from storyd.core.model import Finding, Task, Unit

__all__ = ["BACKLOG", "BATCH_WAIT", "BLOCK", "Recorder"]

BATCH_WAIT = 0.01  # seconds the writer lets a burst gather before one transaction
BACKLOG = 256  # versions queued beyond which their lines are held compressed
BLOCK = 256  # lines compressed together (one zlib call holds the lock ~0.5 ms)
MARKS_WAIT = 2.0  # seconds a miss waits for the marks' first read before answering without
PEEK_LOCK = 0.2  # seconds a miss's look waits for the writers' lock to read the file again

# what the event says besides the unit's summary (the database keys those by unit)
_IDENTITY = ("clock", "generation", "event", "workspace", "stateFile", "unit", "format")


def _held(value: object) -> Callable[[], object]:
    """A strong reference with a weak reference's call."""
    return lambda: value


def _weak(value: frozenset[str], gone: Callable[[object], None]) -> Callable[[], object]:
    """A weak reference to a pass's keys, calling `gone` when the installer lets go of
    them (a frozenset can be named weakly)."""
    return weakref.ref(value, gone)


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


class _Version:
    """One version queued for the writer: the event's line (which names the unit, its
    format, clock and kind, and whose summary is the envelope), when it was queued, the
    unit's tasks (None: gone) and its marks when they moved. Nothing else: ~10,000 of
    these wait at a warm-up's first sight."""

    __slots__ = ("at", "line", "marks", "stamp", "tasks")

    def __init__(
        self,
        line: bytes,
        tasks: tuple[Task, ...] | None,
        marks: rules.Packed | None,
        stamp: lineage.Stamp | None = None,
    ) -> None:
        self.at = time.time()
        self.line: bytes | _Held = line
        self.tasks = tasks
        self.marks = marks
        self.stamp = stamp  # the lineage the marks belong to

    def event(self) -> tuple[store.Key, str, dict[str, object]]:
        """The unit's key, its format and the event (parsed on the writer)."""
        line = self.line
        event = orjson.loads(line if isinstance(line, bytes) else line.text())
        key = (str(event["workspace"]), str(event["stateFile"]), str(event["unit"]))
        return key, str(event.get("format")), event

    def store(self, conn: sqlite3.Connection, uid: int, event: dict[str, object]) -> bool:
        """Write it (in the caller's transaction); False: the same tasks as the newest."""
        rows = rules.task_rows(self.tasks) if self.tasks is not None else None
        stored = store.record(conn, uid, self.at, str(event.get("clock", "")), "daemon",
                              str(event["event"]), rows, lambda: _envelope(event),
                              again=False)  # fmt: skip
        if self.marks is not None:
            store.save_marks(conn, uid, rules.expand(self.marks), self.stamp)
        return bool(stored)


class _Block:
    """BLOCK queued lines compressed together (one zlib call: the lines of one warm-up
    differ little, ~10x smaller), inflated once when the writer first reads one."""

    __slots__ = ("data", "ends", "text")

    def __init__(self, lines: list[bytes]) -> None:
        self.ends: list[int] = []
        end = 0
        for line in lines:
            end += len(line)
            self.ends.append(end)
        self.data = zlib.compress(b"".join(lines), 1)
        self.text: bytes | None = None

    def line(self, index: int) -> bytes:
        """The `index`th line, as it was queued. The writer reads them in order: the
        inflated text goes with the last (a transaction of a whole warm-up would
        otherwise hold every block inflated at its end)."""
        text = self.text if self.text is not None else zlib.decompress(self.data)
        self.text = None if index == len(self.ends) - 1 else text
        return text[self.ends[index - 1] if index else 0 : self.ends[index]]


class _Held:
    """A queued line held in a block: the block and its place there."""

    __slots__ = ("block", "index")

    def __init__(self, block: _Block, index: int) -> None:
        self.block = block
        self.index = index

    def text(self) -> bytes:
        return self.block.line(self.index)


def _envelope(event: Mapping[str, object]) -> str:
    """The event's summary, its identity left out, as JSON ("" when there is none)."""
    summary = {k: v for k, v in event.items() if k not in _IDENTITY}
    return orjson.dumps(summary).decode() if summary else ""


def _accepted(key: store.Key, fmt: str) -> bytes:
    """The line of a version the user accepted (no event announces it)."""
    return orjson.dumps({"event": "accepted", "workspace": key[0], "stateFile": key[1],
                         "unit": key[2], "format": fmt})  # fmt: skip


class Recorder:
    """The marks (held progress) per unit, and the writer thread of the database."""

    def __init__(self, writer: Writer, limits: History) -> None:
        self.writer = writer
        self.limits = limits
        self.log = log.get("history")
        self.recording = True
        # versions stored; `same`: a unit's tasks unchanged (a restart, findings alone)
        names = ("versions", "same", "fromGit", "dropped", "pruned", "failed")
        self.counters = dict.fromkeys(names, 0)
        self._backfilled: set[tuple[str, str]] = set()
        # the marks per (workspace, state file), then per unit key, packed
        self.marks: dict[tuple[str, str], dict[str, rules.Packed]] = {}
        self._gone_memo: tuple[object, tuple[Finding, ...]] = (None, ())  # the pass's file
        # per state file, its marks' lineage (history_lineage.py), shared in a workspace
        self.lineage: dict[tuple[str, str], lineage.Stamp] = {}
        self._stamps: dict[str, lineage.Stamp] = {}
        self._moved: losses.Moved | None = None  # the pass's file: its lineage before and now
        self._loaded = threading.Event()  # the marks read (by the writer: after listening)
        self._started = False
        self._seen: dict[store.Key, tuple[Task, ...]] = {}  # the tasks of a key's last build
        self._pass: Callable[[], object] = _held(None)  # the installer's pass `_seen` is of
        self._now = (0, 0.0)  # the second marks are seen at, and its one float
        self._batch: list[_Version] = []  # versions queued for the next flush
        # queued beyond BACKLOG, their lines not yet in a block
        self._loose: list[tuple[_Version, bytes]] = []
        self._pending = 0  # versions queued and not yet committed (or dropped)
        self._lock = threading.Lock()
        self._settle = threading.Event()  # never set: the batch's short wait
        self._dirty: set[store.Key] = set()
        self._pruned = 0.0
        self.give_way: Callable[[], None] = lambda: None  # queries first (priority.py)
        self.worker: QueueWorker[tuple[object, ...]] = QueueWorker(
            "history", self._write, self._failed
        )
        if writer.moved:
            self.log.warning("history_corrupt", moved_to=writer.moved, path=writer.path)

    def start(self) -> None:
        """Start the writer thread: it reads the marks, then prunes."""
        self._started = True
        self.worker.start()
        self.worker.put(("marks",))
        self.worker.put(("prune",))

    def _load_marks(self) -> None:
        """The marks and lineages the database holds (once, before any is read or set)."""
        try:
            for key, _uid, marks, stamp in history_marks.load_marks(self.writer.conn):
                self._set_marks(key, rules.pack(marks))
                if stamp is not None:
                    self.lineage[key[:2]] = self._shared(key[0], stamp)
        finally:
            self._loaded.set()

    def _marks_loaded(self) -> None:
        """Wait for the writer's read of the marks (its first job, alone on the connection);
        read them here when the writer was never started."""
        if not self._started and not self._loaded.is_set():
            self._load_marks()
        self._loaded.wait()

    # -- the refresher's side ----------------------------------------------------------

    def regressed(
        self, workspace: str, unit: Unit, present: frozenset[str] = frozenset()
    ) -> tuple[Finding, ...]:
        """The unit's `regressed` findings against its marks, which then move forward,
        and those of the units with finished tasks gone from its file (`present`: the
        keys the file holds now)."""
        self._marks_loaded()
        key = (workspace, unit.state_file, unit.key)
        if present is not self._pass():  # a new pass: the last one's events are all out
            self._passed()
            self._pass = _weak(present, self._passed)
        self._seen[key] = unit.tasks
        moved = self._lineage(workspace, unit.state_file, present)
        packed = self._marks_of(key)
        if rules.unchanged(packed, unit):  # the same progress, the same read: most builds
            return self._gone(workspace, unit.state_file, present)
        marks = rules.expand(packed)
        lost = rules.lost(marks, unit, lambda sha: on_branch(workspace, sha))
        if lost and moved.busy():  # git is writing the work tree: judged when it settles
            return ()
        if lost and not losses.lost_now(workspace, unit, marks):  # a file half written
            return ()  # (a checkout's, a stash pop's): the whole one is judged on its read
        if lost and moved.why() is not None:  # git moved the work tree: a new lineage
            marks, lost = {}, []
        new = rules.advance(marks, unit, self._second(), {tid for tid, _, _ in lost})
        if new is not None:
            self._set_marks(key, rules.pack(new, unit))
            self._dirty.add(key)
        elif packed:  # the same marks, held over this build's tasks (not an older one's)
            self._set_marks(key, rules.pack(marks, unit))
        found = rules.regressed_findings(lost, _iso, moved.branch()) if lost else ()
        return found + self._gone(workspace, unit.state_file, present)

    def peek(self, workspace: str, unit: Unit) -> tuple[Finding, ...]:
        """A cache miss's `regressed` findings (any thread): what `regressed` would give
        the unit now, its marks left as they are (the installer's build moves them). Units
        gone from the file are told once a pass reads it whole; none while the marks are
        still being read past MARKS_WAIT (a daemon just started on a large history), nor
        while a writer holds the file past PEEK_LOCK (a write under way: its build judges)."""
        if not self._started and not self._loaded.is_set():
            return ()  # a recorder never started: its marks are the installer's to read
        if not self._loaded.wait(MARKS_WAIT):
            return ()
        packed = self._marks_of((workspace, unit.state_file, unit.key))
        if not packed or rules.unchanged(packed, unit):
            return ()
        marks = rules.expand(packed)
        lost = rules.lost(marks, unit, lambda sha: on_branch(workspace, sha))
        if not lost:
            return ()
        file = (workspace, unit.state_file)
        now = lineage.stamp(workspace)
        moved = losses.Moved(file, self.lineage.get(file), now, quiet=True)
        if moved.busy() or not losses.lost_now(workspace, unit, marks, lock_timeout=PEEK_LOCK,
                                                unreadable=False):
            return ()  # judged as `regressed` judges: git writing the tree, a torn read
            # (a file a writer holds now: the build that follows its write judges it)
        if moved.why() is not None:  # git moved the work tree: a new lineage
            return ()
        return rules.regressed_findings(lost, _iso, moved.branch())

    def _lineage(self, workspace: str, state_file: str, present: frozenset[str]) -> losses.Moved:
        """The pass's file's lineage, before it and now, worked out once per pass (an
        empty `present`, no pass: every call); the file's lineage follows the work tree."""
        memo = self._moved
        if memo is not None and present and memo.file == (workspace, state_file):
            return memo
        now = lineage.stamp(workspace)
        if now is not None:
            now = self._shared(workspace, now)
        file = (workspace, state_file)
        memo = losses.Moved(file, self.lineage.get(file), now)
        self._moved = memo
        if now is not None and memo.before is not now:
            self.lineage[file] = now
        return memo

    def _shared(self, workspace: str, stamp: lineage.Stamp) -> lineage.Stamp:
        """One tuple for every file of a workspace in the same lineage."""
        known = self._stamps.get(workspace)
        if known == stamp:
            return known
        self._stamps[workspace] = stamp
        return stamp

    def _gone(
        self, workspace: str, state_file: str, present: frozenset[str]
    ) -> tuple[Finding, ...]:
        """The file's units gone with their progress: worked out once per pass (the
        installer gives every unit of a pass the same `present`)."""
        held = self.marks.get((workspace, state_file))
        if not held or not present:
            return ()
        memo = self._gone_memo
        if memo[0] == (workspace, state_file):  # reset with each pass
            return memo[1]
        gone = {k: rules.expand(p) for k, p in held.items() if p and k not in present}
        moved = self._lineage(workspace, state_file, present) if gone else None
        if moved is not None and moved.busy():
            return ()  # judged when git settles (not kept: the next pass asks again)
        if gone and not losses.gone_now(workspace, state_file, set(gone)):
            return ()  # a half-written read: the file holds them again (not kept either)
        if moved is not None and moved.why() is not None:
            for unit in gone:  # git took them: their progress is the old lineage's
                self._set_marks((workspace, state_file, unit), ())
                self._dirty.add((workspace, state_file, unit))
            gone = {}
        found = rules.gone_findings(gone, present, _iso) if gone else ()
        self._gone_memo = ((workspace, state_file), found)
        return found

    def _passed(self, _ref: object = None) -> None:
        """The installer's pass is over (it let go of its keys, after sending the pass's
        events; or a new pass began): nothing of it is held any more. A dict or set
        emptied in place keeps its table, so they are new ones."""
        if _ref is not None and _ref is not self._pass:
            return  # a pass already over
        self._pass = _held(None)
        self._seen = {}
        self._gone_memo = (None, ())
        self._moved = None

    def _second(self) -> float:
        """Now, to the second the findings tell (`seen`): one float for every mark of
        that second, not one each (~200 KiB at a 10,000-unit warm-up)."""
        now = time.time()
        if int(now) != self._now[0]:
            self._now = (int(now), float(int(now)))
        return self._now[1]

    def _marks_of(self, key: store.Key) -> rules.Packed:
        return self.marks.get(key[:2], {}).get(key[2], ())

    def _set_marks(self, key: store.Key, marks: rules.Packed) -> None:
        self.marks.setdefault(key[:2], {})[key[2]] = marks

    def accept(self, workspace: str, unit: Unit) -> None:
        """The user accepts `unit` as it is: its marks restart from it (refresher
        thread; the caller then rechecks the workspace so the findings go)."""
        self._marks_loaded()
        key = (workspace, unit.state_file, unit.key)
        marks = rules.pack(rules.advance({}, unit, time.time(), set()) or {}, unit)
        self._set_marks(key, marks)
        self._dirty.discard(key)
        self._queue(_Version(_accepted(key, unit.format), unit.tasks, marks))

    def accept_gone(self, key: store.Key, fmt: str) -> bool:
        """The user accepts that unit `key` is gone: its marks go (refresher thread;
        the caller rechecks). False when history holds no progress of it."""
        self._marks_loaded()
        if not self._marks_of(key):
            return False
        self._set_marks(key, ())
        self._dirty.discard(key)
        self._queue(_Version(_accepted(key, fmt), None, ()))
        return True

    def __call__(self, event: Mapping[str, object], line: bytes) -> None:
        """A sink of the event log: queue the version a unit event announces (the
        work of writing it, even its JSON, is the writer's)."""
        kind = event.get("event")
        if kind not in ("changed", "removed"):
            return
        key = (str(event["workspace"]), str(event["stateFile"]), str(event["unit"]))
        tasks = self._seen.pop(key, None)
        if not self._seen:
            self._seen = {}  # an emptied dict keeps its table: 10,000 slots after a warm-up
        if kind == "changed" and tasks is None:
            return
        self._marks_loaded()
        # the packed marks are a tuple: the writer may hold it, nothing changes it
        marks = self._marks_of(key) if key in self._dirty else None
        self._dirty.discard(key)
        if not self._dirty:
            self._dirty = set()  # likewise: a set keeps its table
        tasks = tasks if kind == "changed" else None
        stamp = self.lineage.get(key[:2]) if marks is not None else None
        self._queue(_Version(line or orjson.dumps(event), tasks, marks, stamp))

    def _queue(self, version: _Version) -> None:
        """Into the batch; the first of a batch wakes the writer. While the writer is
        BACKLOG versions behind (a warm-up's first sights wait for a git backfill), the
        lines are held compressed, BLOCK at a time."""
        with self._lock:
            self._batch.append(version)
            self._pending += 1
            first = len(self._batch) == 1
            behind = self._pending > BACKLOG
        if first:
            self.worker.put(("flush",))
        loose, line = self._loose, version.line
        if not behind or not isinstance(line, bytes):
            loose.clear()
            return
        loose.append((version, line))
        if len(loose) >= BLOCK:
            self._loose = []
            block = _Block([raw for _, raw in loose])
            for index, (held, _) in enumerate(loose):
                held.line = _Held(block, index)

    # -- the writer thread -------------------------------------------------------------

    def _write(self, job: tuple[object, ...]) -> None:
        if job[0] == "marks":
            self._load_marks()
            return
        if job[0] == "prune":
            if self.recording:
                self._prune()
            return
        # a burst (a warm-up, a rebase) goes in as one transaction, after the events
        # it follows have gone out: the writer never competes with their sending
        self._settle.wait(BATCH_WAIT)
        with self._lock:
            batch, self._batch = self._batch, []
        try:
            self._commit(batch)
        finally:
            with self._lock:
                self._pending -= len(batch)

    def _commit(self, batch: list[_Version]) -> None:
        """One transaction for the batch (each line parsed as it is written); a state
        file met for the first time brings its git history first, in a transaction of
        its own."""
        if not self.recording:
            self.counters["dropped"] += len(batch)
            return
        conn = self.writer.conn
        open_ = [0, 0]  # stored, found the same: in the open transaction
        kept = [0, 0]  # the same, committed
        conn.execute("BEGIN IMMEDIATE")
        try:
            for version in batch:
                self.give_way()
                key, fmt, event = version.event()
                if key[:2] not in self._backfilled:
                    conn.execute("COMMIT")
                    kept, open_ = [kept[0] + open_[0], kept[1] + open_[1]], [0, 0]
                    self._backfill(*key[:2], fmt)
                    conn.execute("BEGIN IMMEDIATE")
                uid = store.unit_id(conn, key, fmt)
                open_[0 if version.store(conn, uid, event) else 1] += 1
            conn.execute("COMMIT")
            kept, open_ = [kept[0] + open_[0], kept[1] + open_[1]], [0, 0]
        except BaseException:
            _rollback(conn)
            self.counters["dropped"] += len(batch) - kept[0] - kept[1]
            raise
        finally:
            self.counters["versions"] += kept[0]
            self.counters["same"] += kept[1]
        if time.monotonic() - self._pruned > self.limits.prune_minutes * 60:
            self._prune()

    def _backfill(self, workspace: str, state_file: str, fmt: str) -> None:
        """A state file never recorded before: its versions from git history first (when
        it is committed), each unit's as `git:<sha>` versions at the commit's time."""
        files = self._backfilled
        if (workspace, state_file) in files:
            return
        files.add((workspace, state_file))
        conn = self.writer.conn
        seen = conn.execute("SELECT 1 FROM units WHERE workspace=? AND state_file=? LIMIT 1",
                            (workspace, state_file)).fetchone()  # fmt: skip
        if seen is not None:
            return
        from storyd.api.history_git import GitHistoryError, record_from_git

        try:  # the child writes them while this thread waits: no parse, no insert here
            found = record_from_git(workspace, state_file, fmt, self.limits.max_versions,
                                    self.writer.path)  # fmt: skip
        except GitHistoryError as exc:  # rolled back: a part would read as the whole
            self.log.warning("history_git_failed", workspace=workspace, error=str(exc))
            return
        self.counters["fromGit"] += found

    def _prune(self) -> None:
        self._pruned = time.monotonic()
        limits = self.limits
        before = time.time() - limits.max_age_days * 86400 if limits.max_age_days else 0.0
        conn = self.writer.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            pruned = store.prune(conn, limits.max_versions, before, limits.max_mb * 1024 * 1024)
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
        self.counters["pruned"] += pruned
        if pruned:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("PRAGMA incremental_vacuum")

    def _failed(self, job: tuple[object, ...], exc: Exception) -> None:
        """A write failed: a full disk or a broken database stops recording (one line)."""
        self.counters["failed"] += 1
        if isinstance(exc, sqlite3.Error) and self.recording:
            self.recording = False
            self.log.error("history_stopped", path=self.writer.path, error=str(exc),
                           note="not recording history until restart; serving goes on")  # fmt: skip
        elif not isinstance(exc, sqlite3.Error):
            self.log.error("history_write_failed", error=repr(exc))

    def state(self) -> dict[str, object]:
        """For `stats`: whether it records, and its counters."""
        return {"path": self.writer.path, "recording": self.recording,
                "queued": self._pending, **self.counters}  # fmt: skip

    def close(self) -> None:
        """Write what is queued (a short wait), then close the database."""
        self.worker.close(5.0)
        if not self.worker.is_alive():
            self.writer.close()


def start(limits: History | None) -> Recorder | None:
    """The recorder for [history] (None: disabled, or the database cannot be written:
    said in one log line, and the daemon serves without it)."""
    from storyd.api import history_db as db
    from storyd.config.history import History as Defaults
    from storyd.core.errors import StorydError

    limits = limits or Defaults()
    if not limits.enabled:
        return None
    try:
        writer = db.open_writer(limits.path or db.default_path())
    except StorydError as exc:
        log.get("history").warning("history_off", reason=exc.message)
        return None
    return Recorder(writer, limits)
