"""The read pipeline: state file -> units -> answers -> findings. No threads, no cache.

The CLI's direct read, reconcile, the daemon's refresher and its cache-miss reads all
come through here, so the socket and the fallback cannot disagree. What the daemon adds
(a cache of these answers, events) lives in daemon/server/; nothing here imports it.

Read your writes. An answer depends on the files its read saw: the state file, the
companions the adapter read or probed (journal, outputs, handoff; `Source.seen`), the
unit's story file (its mtime feeds staleness) and, when git was asked about the story
file, the repository's stamp. Each is recorded as a *signature* (device, inode, size,
mtime and ctime in ns), taken under the writers' lock for what was read. A cached
answer is served only while every signature still matches `os.stat`, so a write that
finished before a query changes at least one of them (a rename-over changes the inode,
an append the size, a rewrite the mtime)...

...except a same-size rewrite in place within one tick of the kernel's coarse clock,
which leaves every field as it was. That is git's "racy" index entry, and the rule is
git's: a file whose mtime is not safely older than the moment the read began (`RACY_NS`;
2 s on a file system that keeps whole seconds) may have been written again unseen, so
an answer read from it is *racy* and never served from the cache; it is read again.
"""

from __future__ import annotations

import os
import time

from storyd.core import envelope, storytime
from storyd.core.caps import DEFAULT_MAX_ANSWER_BYTES, check_answer
from storyd.core.containment import Refused, resolve
from storyd.core.errors import DataError, StorydError, UsageError
from storyd.core.formats.base import Adapter, Source, contained, nameable, redo_finding
from storyd.core.locking import DEFAULT_LOCK_TIMEOUT
from storyd.core.model import DONE, Finding, Unit
from storyd.core.switches import CONFIG

TYPE_CHECKING = False  # `typing` costs start-up time; see daemon/core/model.py
if TYPE_CHECKING:
    from collections.abc import Callable

    from storyd.core.formats.base import Reuse
    from storyd.core.wire import Envelope

    Detect = Callable[[str, Unit, "Answer"], tuple[Finding, ...]]

__all__ = [
    "MAX_UNIT_TASKS",
    "RACY_NS",
    "Answer",
    "Detect",
    "FileRead",
    "Options",
    "answer",
    "contained",
    "find_state_files",
    "fresh",
    "inside",
    "read_file",
    "read_one",
    "read_units",
    "signature",
]

Signature = tuple[int, int, int, int, int]
# What one unit may cost: a story of more tasks is not answered (one error finding
# says why) rather than held in memory and rendered on every query. Real producers
# write tens of tasks a story; 600,000 took the daemon's RSS to 814 MB (issue 24).
MAX_UNIT_TASKS = 100_000
# A write within this long of a read's start may share the mtime the read saw (the
# kernel stamps files from a clock that ticks every 1-10 ms); 20 ms covers HZ=100 twice.
RACY_NS = 20_000_000
_WHOLE_SECOND_RACY_NS = 2_000_000_000  # FAT keeps 2 s, ext3 and HFS+ 1 s


class Options:
    """How to read: the lock bound, the staleness mode (`git` or `mtime`) and the
    largest envelope answered (`limits.max_answer_bytes`; core/caps.py)."""

    __slots__ = ("lock_timeout", "max_answer_bytes", "staleness")

    def __init__(
        self, lock_timeout: float = DEFAULT_LOCK_TIMEOUT, staleness: str = storytime.DEFAULT_MODE,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    ) -> None:
        if staleness not in storytime.MODES:
            modes = ", ".join(storytime.MODES)
            msg = f"invalid staleness mode {staleness!r}: expected one of {modes}"
            raise UsageError(msg)
        self.lock_timeout = lock_timeout
        self.staleness = staleness
        self.max_answer_bytes = max_answer_bytes


def signature(path: str) -> Signature | None:
    """A file's identity and version as `os.stat` sees it, or None when it is absent."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)




def is_racy(sig: Signature | None, read_started_ns: int) -> bool:
    """Whether a file with this signature may have been rewritten, unseen, after a read
    that began at `read_started_ns` (wall clock): git's racy rule."""
    if sig is None:
        return False
    dev, _ino, _size, mtime, ctime = sig
    # devices seen to keep sub-second timestamps (process-wide: switches.CONFIG): a
    # whole-second mtime there was set so (`touch -d`, a checkout tool), not rounded
    fine = CONFIG.fine_devices
    if mtime % 1_000_000_000 or ctime % 1_000_000_000:
        fine.add(dev)
        margin = RACY_NS
    else:
        margin = RACY_NS if dev in fine else _WHOLE_SECOND_RACY_NS
    return mtime > read_started_ns - margin


def fresh(deps: tuple[tuple[str, Signature | None], ...]) -> bool:
    """Whether every file an answer depends on (absolute paths) is as it was when read."""
    return all(signature(path) == sig for path, sig in deps)


def inside(workspace: str, name: str) -> str | None:
    """The one path rule: a state file named by a request (workspace-relative, or absolute
    under the workspace) as a normalised workspace-relative path; None when it would
    leave the workspace. Lexical only; `read_file` checks where links lead."""
    if "\0" in name or not name:
        return None
    if os.path.isabs(name):
        prefix = workspace.rstrip("/") + "/"
        if not name.startswith(prefix):  # another spelling of the workspace (a link)?
            prefix = os.path.realpath(workspace) + "/"
            name = os.path.join(os.path.realpath(os.path.dirname(name)), os.path.basename(name))
            if not name.startswith(prefix):
                return None
        name = name[len(prefix) :]
    rel = os.path.normpath(name)
    if rel in (".", "..") or rel.startswith(("../", "/")):
        return None
    return rel


class Answer:
    """One unit's answer: the envelope, its rendered line, stderr warnings and findings.

    `asked_git`: the staleness rule consulted git about the story file, so the answer
    also depends on the repository's stamp (see `storytime`).
    """

    __slots__ = ("asked_git", "envelope", "findings", "line", "unit", "warnings")

    def __init__(
        self, unit: Unit, env: Envelope, findings: tuple[Finding, ...], *, asked_git: bool = False
    ) -> None:
        self.unit = unit
        self.envelope = env
        self.line = envelope.render(env)
        self.warnings = envelope.status_warnings(unit)
        self.findings = findings
        self.asked_git = asked_git


def answer(workspace: str, unit: Unit, options: Options, *, prime_batch: bool = True) -> Answer:
    """Compute one unit's envelope: the seed's Steps 3-6 (staleness included).

    `prime_batch=False` (a daemon's miss, one unit): git is asked about this story file
    alone unless the workspace's batch is primed already (storytime.git_commit_time)."""
    if unit.error:
        raise DataError(unit.error)
    done = [t for t in unit.tasks if t.bucket == DONE]
    mtime = None
    commit_time = None
    asked = []
    if unit.story_file and done:
        mtime = storytime.mtime_seconds(os.path.join(workspace, unit.story_file))
        if options.staleness == storytime.GIT:
            story_file = unit.story_file

            def commit_time() -> int | None:
                asked.append(True)
                return storytime.git_commit_time(workspace, story_file,
                                                 prime_batch=prime_batch)

    stale = envelope.stale_warnings(done, mtime, commit_time)
    got = Answer(unit, envelope.build(unit, stale), unit.findings, asked_git=bool(asked))
    check_answer(len(got.line), options.max_answer_bytes)  # every door's answer cap
    return got


class FileRead:
    """One read of one state file: its units (or the error), the files they depend on
    (absolute paths and signatures, the state file first), when the read began, and
    `seq`, a caller's mark taken just before it (daemon/server/changes.py)."""

    __slots__ = ("deps", "error", "folders", "home", "relpath", "seq", "started_ns", "units",
                 "unseen")

    def __init__(
        self,
        relpath: str,
        units: list[Unit] | None,
        error: StorydError | None,
        deps: tuple[tuple[str, Signature | None], ...],
        started_ns: int,
    ) -> None:
        self.relpath = relpath
        self.units = units
        self.error = error
        self.deps = deps
        self.started_ns = started_ns
        self.seq = 0
        # the deps' folders, and those of them none of whose deps existed (a caller's)
        self.folders: frozenset[str] | None = None
        self.unseen: frozenset[str] = frozenset()
        # the workspace and its folder's (st_dev, st_ino) when the read began (a caller's)
        self.home: tuple[str, tuple[int, int] | None] | None = None

    @property
    def racy(self) -> bool:
        """Whether a file it read was too new to trust its stat (see the module docstring)."""
        return any(is_racy(sig, self.started_ns) for _path, sig in self.deps)

    @property
    def signature(self) -> Signature | None:
        """The state file's own signature when it was read."""
        return self.deps[0][1] if self.deps else None


def read_file(
    workspace: str,
    adapter: Adapter,
    relpath: str,
    options: Options,
    reuse: Reuse | None = None,
    source: Source | None = None,
) -> FileRead:
    """Read one state file under the writers' lock into units; a bad file gives a FileRead
    with `error` (DataError, LockTimeout, StateFileMissing, or a link out of the
    workspace), never an exception of its own. `source`: what to read through (the
    daemon replays bytes a one-unit read kept: Reads.newest_good)."""
    if reuse is None:
        return _read(workspace, relpath, options, lambda s: adapter.load(s, relpath),
                     source=source)
    return _read(workspace, relpath, options,
                 lambda s: adapter.load_reusing(s, relpath, reuse), reusing=True)


def read_one(
    workspace: str, adapter: Adapter, relpath: str, key: str | None, options: Options,
    source: Source | None = None,
) -> FileRead:
    """`read_file` for one query: its units are only those the unit `key` is answered
    from (Adapter.load_one: the asked unit alone where the format can build it alone),
    and its dependencies only theirs. Never a whole file's read to cache as such.
    `source`: what to read through (the daemon's keeps the state file's bytes)."""
    return _read(workspace, relpath, options, lambda s: adapter.load_one(s, relpath, key),
                 source=source)


def _read(workspace: str, relpath: str, options: Options,
          load: Callable[[Source], list[Unit]], *, reusing: bool = False,
          source: Source | None = None) -> FileRead:
    """The body of `read_file` and `read_one`: `load` builds the units from a Source."""
    started = time.time_ns()
    path = os.path.join(workspace, relpath)
    try:
        resolve(workspace, relpath)
    except Refused as refused:  # out of the workspace, or into git's folders
        return FileRead(relpath, None, refused, ((path, signature(path)),), started)
    if source is None:
        source = Source(workspace, options.lock_timeout)
    units: list[Unit] | None = None
    error: StorydError | None = None
    try:
        units = load(source)
    except StorydError as exc:
        error = exc
    for unit in units or ():
        if len(unit.tasks) > MAX_UNIT_TASKS:
            _too_large(unit)
        if len(unit.findings) > 1:  # one cause, one line (imported only then)
            from storyd.core.causes import one_line_each

            unit.findings = one_line_each(unit.findings)
    if units and (relpath in source.redo or reusing):
        _note_redo(units, source.redo.get(relpath), relpath)
    if isinstance(error, DataError) and source.redo.get(relpath) == "pending":
        error = DataError(f"{error}; a reconcile write was interrupted: run "
                          "`storyd reconcile --recover` to finish it")
    story_files = {u.story_file for u in units} if units else set()
    # the adapter may have failed before reading it (or read it under another name)
    own = source.seen.pop(relpath) if relpath in source.seen else signature(path)
    others = tuple(
        sorted((os.path.join(workspace, p), s) for p, s in source.seen.items()
               if p not in story_files)
    )
    return FileRead(relpath, units, error, ((path, own), *others), started)


_REDO_CODES = ("interrupted-write", "redo-ignored")


def _note_redo(units: list[Unit], word: str | None, relpath: str) -> None:
    """A reader reports a redo record for the file (never obeys it): the finding on each
    unit, and none left from an earlier read on units reused from it."""
    note = redo_finding(relpath, word) if word is not None else None
    for unit in units:
        kept = tuple(f for f in unit.findings
                     if not (f.detector == "format" and f.code in _REDO_CODES))
        unit.findings = kept if note is None else (*kept, note)


def _too_large(unit: Unit) -> None:
    """Refuse a unit with more tasks than one unit may cost; keep a finding saying so."""
    message = (
        f"{unit.state_file}: {unit.key} holds {len(unit.tasks):,} tasks, more than the "
        f"{MAX_UNIT_TASKS:,} one unit may have; it is not answered"
    )
    unit.error = message
    unit.tasks = ()
    unit.findings = (*unit.findings, Finding("format", "unit-too-large", "error", message))


def read_units(workspace: str, adapter: Adapter, relpath: str, options: Options) -> list[Unit]:
    """Every unit of one state file, read under the writers' lock (errors raise)."""
    read = read_file(workspace, adapter, relpath, options)
    if read.error is not None:
        raise read.error
    assert read.units is not None
    return read.units


def find_state_files(workspace: str, adapters: list[Adapter]) -> dict[str, Adapter]:
    """Every state file of every format in a workspace, workspace-relative."""
    source = Source(workspace)
    found: dict[str, Adapter] = {}
    for adapter in adapters:
        for relpath in adapter.find(source):
            if nameable(relpath):  # (a plugin's own find may list any name)
                found.setdefault(relpath, adapter)
    return found
