"""Reading a state file now: under that file's lock, its latest read shared, its last
good read kept.

Every read of a file, the refresher's and the direct-read pool's, runs here under the
same lock, so reads of one file end in the order of what they saw and the last good
read is always the newest good one. A torn file's answers then come from that read
(`read_now`), with a finding saying since when (`unreadable_finding`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from hashlib import blake2b
from itertools import islice
from typing import TYPE_CHECKING

import orjson

from storyd.core import pipeline
from storyd.core.errors import DataError, StateFileMissing
from storyd.core.formats.base import Source
from storyd.core.model import Finding, same_data
from storyd.core.pipeline import FileRead, Options
from storyd.server.compact import compact
from storyd.server.kept import KeepingSource
from storyd.server.priority import Priority
from storyd.server.quietgc import QuietGC
from storyd.server.store import folder_identity

if TYPE_CHECKING:
    from storyd.core.formats import Adapter
    from storyd.core.model import Unit
    from storyd.core.pipeline import Signature
    from storyd.server.changes import Changes
    from storyd.server.store import Snapshot

__all__ = ["Reads", "Reuser", "iso_utc", "node_digest", "text_digest", "unreadable_finding"]

_dumps = orjson.dumps
_FILE_LOCKS = 64
_SLICE = 512  # items of a big container digested at once (node_digest)
COMPACT_TASKS = 1000  # a streamed story this big has its strings compacted (Reuser.made)


def iso_utc(stamp: float) -> str:
    """A time as `YYYY-MM-DDTHH:MM:SSZ`."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp))


def unreadable_finding(relpath: str, reason: str, since: float) -> Finding:
    """The finding a last good answer carries while its file is unreadable."""
    message = (
        f"{relpath} unreadable since {iso_utc(since)}: {reason}; serving the last good answer"
    )
    return Finding("engine", "state-unreadable", "error", message)


def node_digest(node: object) -> bytes:
    """A node's digest: the same for equal nodes, different for any change.

    orjson's bytes of the node where they name it exactly (str, 64-bit int, finite
    float, bool, None, list, dict: 1, 1.0 and true differ), about a tenth of repr's
    cost (a 10,000-story file's digests took most of a write's refresh). A node orjson
    cannot write exactly (an integer past 64 bits, a lone surrogate: it raises; inf or
    NaN: it writes null, so any `null` in its bytes sends the node there too) is
    digested from repr, tagged apart, so the two kinds never compare equal. A container
    of more than `_SLICE` items is digested from repr a slice at a time: one repr of a
    100,000-task story held the interpreter 33 ms, every other client waiting."""
    if _small(node):
        try:
            data = _dumps(node)
        except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError
            data = None
        if data is not None and b"null" not in data:
            return blake2b(b"o" + data, digest_size=16).digest()  # one call: 10,000 a read
    hasher = blake2b(digest_size=16)
    hasher.update(b"r")
    _feed(hasher, node, 0)
    return hasher.digest()


def text_digest(text: str) -> bytes:
    """A node's digest from its JSON text (never equal to a node_digest)."""
    return blake2b(b"t" + text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _small(node: object) -> bool:
    """Whether a node and its children each hold at most `_SLICE` items."""
    if not isinstance(node, dict) or len(node) > _SLICE:
        return False
    return all(not isinstance(v, (dict, list)) or len(v) <= _SLICE for v in node.values())


def _feed(hasher: blake2b, value: object, depth: int) -> None:
    if isinstance(value, dict) and (depth < 2 or len(value) > _SLICE):
        hasher.update(b"{%d:" % len(value))
        if len(value) > _SLICE:
            items = iter(value.items())
            while piece := list(islice(items, _SLICE)):
                hasher.update(repr(piece).encode("utf-8", "surrogatepass"))
            return
        for name, item in value.items():
            hasher.update(repr(name).encode("utf-8", "surrogatepass") + b":")
            _feed(hasher, item, depth + 1)
            hasher.update(b",")
        return
    if isinstance(value, list) and len(value) > _SLICE:
        hasher.update(b"[%d:" % len(value))
        for start in range(0, len(value), _SLICE):
            hasher.update(repr(value[start : start + _SLICE]).encode("utf-8", "surrogatepass"))
        return
    hasher.update(repr(value).encode("utf-8", "surrogatepass"))


class Reuser:
    """The `reuse` callback of one read (Adapter.load_reusing): records each node's
    digest in `prints` and, with `reuse`, hands back the cached unit of a node that has
    not changed, noting which units it handed back. `give_way`: called before each
    node (a background read gives way to queries)."""

    __slots__ = ("_entries", "_give_way", "_known", "_reuse", "handed", "prints")

    def __init__(self, old: Snapshot | None, prints: dict[str, bytes], *, reuse: bool,
                 give_way: Callable[[], None] | None = None) -> None:  # fmt: skip
        self._known = old.prints if old is not None else {}
        self._entries = old.entries if old is not None else {}
        self._reuse = reuse
        self._give_way = give_way
        self.prints = prints
        self.handed: set[int] = set()  # ids of the units handed back

    def __call__(self, key: str, node: dict[str, object]) -> Unit | None:
        return self._reuse_by(key, node_digest(node))

    def text(self, key: str, text: str) -> Unit | None:
        """`reuse` by a node's text (a streamed read: storyd.core.jsonstream). Equal
        text is an equal node; the digests are tagged apart from node_digest's, so a
        node read whole the time before is built again, never taken for another."""
        return self._reuse_by(key, text_digest(text))

    def restart(self) -> None:
        """A streamed read gave up (not the plain shape): forget what it recorded, so
        the whole parse's read records alone (`prints` emptied in place: the installer
        holds it). A story the stream saw as an object and the whole parse does not (a
        duplicate key) must not keep a digest that its error unit would answer for."""
        self.prints.clear()
        self.handed.clear()

    def made(self, key: str, unit: Unit) -> Unit:
        """A unit just built from its node, which still lives (a streamed read:
        storyd.core.jsonstream). The cached one when it carries the same data (a writer
        that reformatted the file): the new one is freed now, amid the read's other
        short-lived objects, rather than after the install. Else the new one, its
        strings copied side by side first when it is big (`COMPACT_TASKS`), as a whole
        read's built units are (compact.py): a 60,000-task story's node is a tree."""
        entry = self._entries.get(key)
        if self._reuse and entry is not None and same_data(entry.unit, unit):
            self.handed.add(id(entry.unit))
            return entry.unit
        if len(unit.tasks) >= COMPACT_TASKS:
            compact([unit])
        return unit

    def _reuse_by(self, key: str, digest: bytes) -> Unit | None:
        if self._give_way is not None:
            self._give_way()
        before = self._known.get(key)
        if before != digest:
            self.prints[key] = digest
            return None
        # unchanged: the old read's key and digest are kept, not this parse's, so that
        # nothing of a rewrite's tree outlives it and pins the heap it was parsed into
        # (10,000 keys and digests kept 24 MB of arenas after one write at 10,000 units)
        entry = self._entries.get(key)
        self.prints[entry.key if entry is not None else key] = before
        if not self._reuse or entry is None:
            return None
        self.handed.add(id(entry.unit))
        return entry.unit

    def built(self, units: list[Unit]) -> list[Unit]:
        """The units of this read that were built, not handed back."""
        handed = self.handed
        return [u for u in units if id(u) not in handed] if handed else units

    def rekey(self, units: list[Unit]) -> None:
        """`prints` keyed by the units' own key objects (their copies, after compact),
        in the same order, the same dict (the installer holds it)."""
        prints = self.prints
        own = {u.key: u.key for u in units if u.key in prints}
        if own:
            rekeyed = {own.get(key, key): digest for key, digest in prints.items()}
            prints.clear()
            prints.update(rekeyed)


class _Replay(Source):
    """A Source whose state file is the bytes an earlier read kept, with their signature."""

    def __init__(self, workspace: str, lock_timeout: float, relpath: str, data: bytes,
                 sig: Signature | None) -> None:
        super().__init__(workspace, lock_timeout)
        self.state, self.data, self.sig = relpath, data, sig

    def read(self, relpath: str, name: str = "", *, git: bool = False) -> bytes:
        if relpath != self.state:
            return super().read(relpath, name, git=git)
        self.seen[relpath] = self.sig
        return self.data


def _keep_folders(got: FileRead) -> None:
    """Note the folders of a read's dependencies, and those none of whose dependencies
    existed (an epic's second place for story files, a folder nobody made)."""
    folders, present = set(), set()
    dirname = os.path.dirname
    for path, sig in got.deps:
        folder = dirname(path)
        folders.add(folder)
        if sig is not None:
            present.add(folder)
    got.folders = frozenset(folders)
    got.unseen = frozenset(folders - present)


def _quiet(changes: Changes, got: FileRead) -> bool | None:
    """Whether nothing `got` read has changed since it began, in one look per folder
    (20,001 dependencies at 10,000 stories, in two folders): no event after its mark in
    a folder watched from before it, and a folder that is not watched is not one now
    and none of its files existed then (absent then, absent now). None: ask per file."""
    watched = []
    for folder in got.folders or ():
        if changes.watched_since(folder) is not None:
            watched.append(folder)
        elif folder not in got.unseen or os.path.isdir(folder):
            return None
    return changes.quiet_since(watched, got.seq)


class Reads:
    """The per-file read layer: locks, each file's latest read and its last good one.

    `keeps(workspace)` says whether a workspace's reads are remembered (it is tracked,
    or a watch of it is on its way).
    """

    def __init__(
        self, options: Options, changes: Changes | None, keeps: Callable[[str], bool]
    ) -> None:
        self.options = options
        self.changes = changes
        self.keeps = keeps
        self.quiet = QuietGC()  # a big file is parsed with the collector held off
        self.priority = Priority()  # a query's read first, the background's passes after
        self.priority.on_stretch = self.quiet.freeze  # a long pass's survivors (quietgc.py)
        self._file_locks = [threading.Lock() for _ in range(_FILE_LOCKS)]
        self._last_good: dict[tuple[str, str], FileRead] = {}
        # each file's latest read and when it began (monotonic ns): shared by queries
        # that arrived before it began
        self._latest: dict[tuple[str, str], tuple[int, FileRead]] = {}
        # a one-unit read's bytes, signature and wall-clock start, kept while newer than
        # the file's last good whole read: a torn file then answers from it (`replay_one`)
        self._newer: dict[tuple[str, str], tuple[bytes, Signature | None, int]] = {}

    def file_lock(self, workspace: str, relpath: str) -> threading.Lock:
        """The lock every read of one state file runs under (one read of it at a time)."""
        return self._file_locks[hash((workspace, relpath)) % _FILE_LOCKS]

    @contextmanager
    def _locked(self, workspace: str, relpath: str) -> Iterator[None]:
        """Hold the file's lock. A query that must wait for it waits as not asking
        (Priority.waiting): the pass holding it then goes on, instead of giving way
        to the query that waits on it."""
        lock = self.file_lock(workspace, relpath)
        if not lock.acquire(blocking=False):
            with self.priority.waiting():
                lock.acquire()
        try:
            yield
        finally:
            lock.release()

    def read(
        self,
        workspace: str,
        relpath: str,
        adapter: Adapter,
        reuse: Reuser | None = None,
        *,
        since: int | None = None,
    ) -> FileRead:
        """Read one state file under its lock; a good read becomes its last good read.

        With `since` (a query's arrival, monotonic ns), the file's latest read is shared
        when it began after the query arrived, or when the change queue says nothing it
        read changed since it began: queries arriving while the refresher reads a file
        wait for that read instead of making another.
        """
        changes = self.changes
        key = (workspace, relpath)
        # a background read waits (bounded) while a query reads: its parse would hold
        # the interpreter lock for the whole of a big file (~70 ms at 5 MB), in the middle
        # of the query's (a query's own read passes: priority.py)
        self.priority.give_way()
        with self._locked(workspace, relpath):
            if since is not None:
                began, latest = self._latest.get(key, (-1, None))
                if latest is not None and (began >= since or self._still(latest)):
                    return latest
            began = time.monotonic_ns()
            seq = 0
            if changes is not None:
                changes.watch(os.path.dirname(os.path.join(workspace, relpath)))
                seq = changes.drain()
            # a background read offers its parse to the misses meanwhile (offered.py)
            offer = nullcontext() if self.priority.asking_here() else self.quiet.offers.offering()
            home = (workspace, folder_identity(workspace))
            with offer as made:
                got = pipeline.read_file(workspace, adapter, relpath, self.options, reuse)
                if made and got.units:  # while the big parse's tree lives (compact.py)
                    built = got.units if reuse is None else reuse.built(got.units)
                    compact(built)
                    if reuse is not None:
                        reuse.rekey(built)
            got.seq = seq
            got.home = home
            self._trim_after(got)
            if changes is not None:  # the next read of what it read is covered
                _keep_folders(got)
                for folder in got.folders or ():
                    changes.watch(folder)
            if self.keeps(workspace):
                self._latest[key] = (began, got)
                if got.error is None:
                    self._last_good[key] = got
                    kept = self._newer.get(key)
                    if kept is not None and kept[2] <= got.started_ns:
                        del self._newer[key]  # the whole read is as new: it answers
            if isinstance(got.error, StateFileMissing):
                self._last_good.pop(key, None)
            return got

    def _trim_after(self, got: FileRead) -> None:
        """A big state file read, whether parsed whole (quietgc.py makes the trim due) or
        a story at a time (jsonstream.py: its text and a thread's scratch are freed
        heap too): the heap it freed is given back with the next trim."""
        sig = got.signature
        if sig is not None and sig[2] >= self.quiet.big_bytes:
            self.quiet.read_big()

    def read_one(self, workspace: str, relpath: str, adapter: Adapter, key: str) -> FileRead:
        """A miss's read (pipeline.read_one): the file parsed now, the asked unit alone
        built, without the file's lock (never behind a whole read of it). A good read's
        bytes are kept while newer than the last good whole read, so that a torn file's
        answer is never older than one this read gave (`replay_one`).

        A whole read of the file that nothing it read has changed since (the change
        queue says so, as for a query sharing a read in `read`) answers instead, with
        no parse: a warm-up's read, while its units are installed, or a refresh's."""
        latest = self._latest.get((workspace, relpath))
        if latest is not None and latest[1].error is None and self._still(latest[1]):
            return latest[1]
        source = KeepingSource(workspace, self.options.lock_timeout, relpath)
        # a background read's parse of equal bytes; before any whole read of the file,
        # this one's is kept for the misses after it and that read (offered.py)
        keep = latest is None and self.keeps(workspace)
        with self.quiet.offers.taking(keep=keep):
            got = pipeline.read_one(workspace, adapter, relpath, key, self.options, source)
        self._trim_after(got)
        if got.error is None and source.data is not None:
            self.keep_newer(workspace, relpath, source.data, got.signature, got.started_ns)
        return got

    def keep_newer(self, workspace: str, relpath: str, data: bytes,
                   sig: Signature | None, started_ns: int) -> None:
        """Keep a good one-unit read's bytes (read_one's, or the early door's) while no
        read of the file began later: a torn file answers from them (`replay_one`)."""
        if not self.keeps(workspace):
            return
        file = (workspace, relpath)
        kept = self._newer.get(file)
        if kept is None or kept[2] < started_ns:
            self._newer[file] = (data, sig, started_ns)

    def replay_one(self, workspace: str, relpath: str, adapter: Adapter,
                   key: str) -> FileRead | None:
        """The asked unit from the bytes `read_one` kept, when they are newer than the
        file's last good whole read (None: they are not, or there are none)."""
        kept = self._kept_newer(workspace, relpath)
        if kept is None:
            return None
        source, _started = kept
        got = pipeline.read_one(workspace, adapter, relpath, key, self.options, source)
        return got if got.error is None else None

    def _kept_newer(self, workspace: str, relpath: str) -> tuple[_Replay, int] | None:
        """A Source replaying the bytes `read_one` kept, with their read's start, when
        they are newer than the file's last good whole read (None: they are not)."""
        file = (workspace, relpath)
        kept = self._newer.get(file)
        good = self._last_good.get(file)
        if kept is None or (good is not None and good.started_ns >= kept[2]):
            return None
        data, sig, started = kept
        return _Replay(workspace, self.options.lock_timeout, relpath, data, sig), started

    def _still(self, got: FileRead) -> bool:
        """Whether nothing a read read has changed since it began (the change queue
        says so; never by stat alone, whose racy window a fresh read avoids)."""
        changes = self.changes
        if changes is None or not got.deps:
            return False
        # the workspace's folder exchanged or replaced since: the paths name other files,
        # and the queue watches the old folders (their events are not these files')
        if got.home is None or folder_identity(got.home[0]) != got.home[1]:
            return False
        changes.drain()
        quiet = _quiet(changes, got) if got.folders is not None else None
        if quiet is not None:
            return quiet
        return all(changes.changed(path, got.seq) is False for path, _sig in got.deps)

    def read_now(
        self,
        workspace: str,
        relpath: str,
        adapter: Adapter,
        snap: Snapshot | None,
        since: int | None = None,
    ) -> tuple[FileRead, str | None]:
        """A cache miss's read: the file as it is now (read after `since`, a query's
        arrival), or, when it does not parse or its lock is held past the bound, its
        last good read and why (None: read well). Units unchanged since `snap`, the
        cached snapshot, are that snapshot's, not built again."""
        healthy = snap is not None and snap.error is None and snap.unreadable_since is None
        reuse = Reuser(snap, {}, reuse=True) if healthy else None
        got = self.read(workspace, relpath, adapter, reuse, since=since)
        if isinstance(got.error, DataError) or (got.error is not None and got.error.code == 75):
            good = self._last_good.get((workspace, relpath))
            if good is not None:
                return good, got.error.message
        return got, None

    def last_good(self, workspace: str, relpath: str) -> FileRead | None:
        """A file's last good read, if one is remembered."""
        return self._last_good.get((workspace, relpath))

    def newest_good(self, workspace: str, relpath: str, adapter: Adapter) -> FileRead | None:
        """What a torn file's cached units come from: its last good whole read, or, when
        a one-unit read since kept newer bytes (a miss served them), the whole file built
        from those bytes, which then becomes the last good read. A torn file's cache
        never answers older than a miss did (the soak's version 2, then version 1)."""
        file = (workspace, relpath)
        with self._locked(workspace, relpath):
            good = self._last_good.get(file)
            kept = self._kept_newer(workspace, relpath)
            if kept is None:
                return good
            source, started = kept
            got = pipeline.read_file(workspace, adapter, relpath, self.options, source=source)
            if got.error is not None:
                return good
            got.started_ns = started  # as new as the bytes, not as the replay
            self._last_good[file] = got
            del self._newer[file]
            return got

    def forget(self, workspace: str, relpath: str) -> None:
        """A file left the cache: forget its reads."""
        self._last_good.pop((workspace, relpath), None)
        self._latest.pop((workspace, relpath), None)
        self._newer.pop((workspace, relpath), None)

    def forget_workspace(self, path: str, *, latest: bool = True) -> None:
        """A workspace left the cache: forget its files' good reads (and, with `latest`,
        their latest reads)."""
        for key in [k for k in self._last_good if k[0] == path]:
            self._last_good.pop(key, None)
        for key in [k for k in self._newer if k[0] == path]:
            self._newer.pop(key, None)
        if latest:
            for key in [k for k in self._latest if k[0] == path]:
                self._latest.pop(key, None)
