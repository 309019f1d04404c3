"""The cache of pre-rendered answers, refreshed from files and diffed into events.

One refresher thread calls `refresh`, `scan`, `verify`, `recheck` and
`remove_workspace`; the server's event loop only reads (`lookup`, `epic_file`,
`entries`). A lookup is a dict get with no lock; structural changes happen under
`_lock`. An entry's data never changes once built (a change builds a new entry); the one
field written later is `findings_line`, the findings' JSON rendered on the first query,
which any thread may fill in: two racing renders write the same bytes.

A state file that cannot be read (torn JSON, a lock held past the bound) keeps its
last good entries, each with an `unreadable` finding saying since when, until it
parses again. Only a deleted file removes its units.

A write to a state file costs what changed, not the file: the daemon parses with
orjson (daemon/server/fastjson.py); a unit whose node in the parsed file is identical to the
last read's (a 16-byte digest per unit, `FileState.prints`) keeps its unit object, so
it is neither built, nor answered, nor checked again; any other unit whose data is the
same as its cached entry's (`model.same_data`) keeps its entry, rendered bytes and
findings. A change to a companion (story file, journal), a rescan or a git change
rebuilds every unit of the file as before.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from hashlib import blake2b
from typing import TYPE_CHECKING

import orjson

from daemon import answers, storytime
from daemon.errors import DataError, LockTimeout, StateFileMissing, StorydError
from daemon.formats import Adapter, all_adapters
from daemon.formats.base import Source
from daemon.formats.epic import epic_file_among
from daemon.model import OWN_DETECTORS, Finding, Unit, same_data
from daemon.server import fastjson, protocol

if TYPE_CHECKING:
    from daemon.formats.base import Reuse
    from daemon.wire import Envelope, EventKind, UnitEvent, UnitSummary

__all__ = ["Engine", "Entry", "FirstLook", "Workspace"]

Detect = Callable[[str, Unit, "answers.Answer"], tuple[Finding, ...]]
Sink = Callable[[Mapping[str, object], bytes], None]  # unit events, and reconcile's
_HISTORY = 10_000
_OUT_OF_STEP = frozenset(("warning", "error"))  # the severities a first look sums up


def _now_iso(stamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp))


class Entry:
    """One unit's cached answer: the envelope line and the rest of the answer pre-rendered.

    Only the envelope line is stored rendered (about 6 KB a unit less than keeping
    every form). The findings' JSON is rendered on the unit's first query and kept from
    then on: rendered for every unit up front, it doubled what the Finding objects cost
    (11 MB at 10,000 stories, see docs/benchmarks.md), and rendered on every query it
    cost each answer about 14 µs. Repeated strings (statuses, dates, paths) are interned.
    """

    __slots__ = (
        "error",
        "findings",
        "findings_line",
        "generation",
        "key",
        "line",
        "resume_point",
        "state_file",
        "unit",
        "warnings",
        "workspace",
    )

    def __init__(
        self,
        workspace: str,
        unit: Unit,
        answer: answers.Answer | None,
        error: StorydError | None,
        findings: tuple[Finding, ...],
        generation: int,
    ) -> None:
        self.workspace = workspace
        self.unit = unit
        self.state_file = unit.state_file
        self.key = unit.key
        self.error = error
        self.findings = findings
        self.findings_line = b"[]" if not findings else None  # rendered on first query
        self.generation = generation
        self.line = answer.line if answer else b""
        self.resume_point = str(answer.envelope["resumePoint"]) if answer else None
        self.warnings = tuple(answer.warnings) if answer else ()
        _intern_unit(unit)

    @property
    def answer_body(self) -> bytes:
        """The `resume` answer without its clock, id and closing brace."""
        if self.error is not None:
            return protocol.error_of(self.error)
        return protocol.answer_body(self.line, self.findings_json(), b"cache", self.generation)

    def findings_json(self) -> bytes:
        """The findings as a JSON array, rendered once, on the first query that needs it."""
        line = self.findings_line
        if line is None:
            line = self.findings_line = protocol.findings_json(self.findings)
        return line

    @property
    def cli_body(self) -> bytes:
        """The `resume-cli` reply: exactly what `storyd resume` prints, and its exit code."""
        if self.error is not None:
            return protocol.cli_frame(self.error.code, b"", (self.error.message,))
        return protocol.cli_frame(0, self.line, self.warnings)

    @property
    def envelope(self) -> Envelope | None:
        """The envelope as a dict (parsed from the line; for `--detail` and detectors)."""
        return orjson.loads(self.line) if self.line else None

    def summary(self, *, detail: bool = False) -> UnitSummary:
        """The unit's progress, as `list` and `changed` events show it (detail: findings too)."""
        tasks = self.unit.tasks
        done = sum(1 for t in tasks if t.done)
        worst = max(
            (("info", "warning", "error").index(f.severity) for f in self.findings), default=-1
        )
        return {
            # a format's labels (epic, story, ...) first, so none can mask a field below
            **self.unit.labels,  # type: ignore[typeddict-item]
            "workspace": self.workspace,
            "format": self.unit.format,
            "stateFile": self.state_file,
            "unit": self.key,
            "done": done,
            "total": len(tasks),
            "resumePoint": self.resume_point,
            "findings": len(self.findings),
            "worst": ("info", "warning", "error")[worst] if worst >= 0 else None,
            "generation": self.generation,
            "error": self.error.message if self.error else None,
            **({"findingList": [f.as_dict() for f in self.findings]} if detail else {}),
        }


def _intern_unit(unit: Unit) -> None:
    """Share the strings that repeat across units and tasks (statuses, dates, paths)."""
    intern = sys.intern
    unit.state_file = intern(unit.state_file)
    unit.format = intern(unit.format)
    for task in unit.tasks:
        task.status = intern(task.status)
        task.bucket = intern(task.bucket)
        if isinstance(task.completed_at, str):
            task.completed_at = intern(task.completed_at)


class Draft:
    """A freshly computed answer, compared with the cached entry before it replaces it."""

    __slots__ = ("answer", "error", "findings", "unit")

    def __init__(
        self,
        unit: Unit,
        answer: answers.Answer | None,
        error: StorydError | None,
        findings: tuple[Finding, ...],
    ) -> None:
        self.unit = unit
        self.answer = answer
        self.error = error
        self.findings = findings

    def answers_as(self, entry: Entry) -> bool:
        """Whether this draft would answer exactly as `entry` does."""
        line = self.answer.line if self.answer else b""
        warnings = tuple(self.answer.warnings) if self.answer else ()
        return (
            line == entry.line
            and warnings == entry.warnings
            and self.findings == entry.findings
            and (self.error.message if self.error else None)
            == (entry.error.message if entry.error else None)
        )


class FileState:
    """What the engine knows of one state file: identity at last read, and health."""

    __slots__ = (
        "adapter",
        "keys",
        "prints",
        "relpath",
        "signature",
        "unreadable_reason",
        "unreadable_since",
    )

    def __init__(self, relpath: str, adapter: Adapter) -> None:
        self.relpath = relpath
        self.adapter = adapter
        self.signature: tuple[int, int, int, int] | None = None
        self.keys: list[str] = []
        # unit key -> digest of the node its unit was built from (formats with many
        # units per file); a node with the same digest next time reuses the unit
        self.prints: dict[str, bytes] = {}
        self.unreadable_since: float | None = None
        self.unreadable_reason: str | None = None


@dataclass(frozen=True, slots=True)
class FirstLook:
    """What a workspace's first look found: its units, how many are out of step (have a
    warning or an error), the findings by severity (`error`, `warning`, `info`), and
    whether it was the start-up's warm-up (not a workspace watched later, on request)."""

    workspace: str
    units: int
    units_out_of_step: int
    severities: dict[str, int]
    at_start: bool = False


class Workspace:
    """One watched workspace and its entries.

    `checked` is False while a start-up warm-up has read the files but the detectors
    have not yet run: the entries hold the envelopes, not yet every finding.
    `first_look` is True until the workspace's first full read (and, in a warm-up, its
    detectors' pass) ends: its events are what storyd found, not what just happened.
    """

    __slots__ = (
        "checked",
        "checking",
        "entries",
        "files",
        "first_look",
        "last_look",
        "path",
        "story_index",
    )

    def __init__(self, path: str, *, checked: bool = True) -> None:
        self.path = path
        self.checked = checked
        self.checking = False
        self.first_look = True
        self.last_look = False  # True while remove_workspace takes its units away
        self.files: dict[str, FileState] = {}
        self.entries: dict[tuple[str, str], Entry] = {}
        # story file -> the (state file, unit) keys that name it; a tuple, as it is
        # nearly always one key (a set per story file cost 2 MB at 10,000 stories)
        self.story_index: dict[str, tuple[tuple[str, str], ...]] = {}


def _signature(path: str) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class Engine:
    """Workspaces, their entries, the generation clock and the event history."""

    def __init__(
        self,
        options: answers.Options | None = None,
        adapters: list[Adapter] | None = None,
        detect: Detect | None = None,
    ) -> None:
        self.options = options or answers.Options()
        self.adapters = adapters if adapters is not None else all_adapters()
        self.detect = detect
        self.git_busy: Callable[[str], bool] = lambda _workspace: False
        self.on_git_busy: Callable[[str], None] = lambda _workspace: None
        # called with True before a pass over a workspace's units and False after it
        # (wiring.tips_held_by: the detectors' git views read each tip once per pass)
        self.on_pass: Callable[[bool], None] = lambda _on: None
        # called once per workspace when its first look ends, with what it found
        self.on_first_look: Callable[[FirstLook], None] = lambda _found: None
        # called once per workspace when it is removed, with what it held (last look)
        self.on_last_look: Callable[[FirstLook], None] = lambda _found: None
        self.instance = os.urandom(4).hex()
        self.generation = 0
        self.lost_before = 0
        self.workspaces: dict[str, Workspace] = {}
        self.history: deque[tuple[int, str, bytes]] = deque(maxlen=_HISTORY)
        self.sinks: list[Sink] = []
        self.counters = {"refreshes": 0, "unreadable": 0, "events": 0, "checked": 0}
        self._lock = threading.Lock()
        fastjson.install()

    # -- reading -------------------------------------------------------------

    def clock(self) -> str:
        """`<instance>:<generation>`, carried by every answer and event."""
        return f"{self.instance}:{self.generation}"

    def lookup(
        self, workspace: str, state_file: str, key: str, *, checked: bool = True
    ) -> Entry | None:
        """The cached entry of one unit, or None (never touches the disk).

        With `checked` (the default) an entry whose detectors have not run yet (warm-up)
        is not an answer: the caller reads directly, findings included.
        """
        ws = self.workspaces.get(workspace)
        if ws is None or (checked and not ws.checked):
            return None
        return ws.entries.get((state_file, key))

    def epic_file(self, workspace: str, epic_id: str) -> str | None:
        """An epic's state file from the files the cache knows (no disk, for the query
        path), or None while the workspace has not been read. Two claimants: exit 64."""
        ws = self.workspaces.get(workspace)
        if ws is None or not ws.files:
            return None
        return epic_file_among(list(ws.files), epic_id)

    def sole_unit(self, workspace: str, state_file: str) -> str | None:
        """The key of a state file's only unit (a single-unit file needs no `unit`)."""
        ws = self.workspaces.get(workspace)
        state = ws.files.get(state_file) if ws else None
        return state.keys[0] if state is not None and len(state.keys) == 1 else None

    def known_absent(self, workspace: str, state_file: str) -> bool:
        """Whether the file was read, is readable now, and so surely lacks a unit that
        `lookup` did not find (the answer is STORY_NOT_IN_STATE with no disk read)."""
        ws = self.workspaces.get(workspace)
        state = ws.files.get(state_file) if ws else None
        return bool(state and state.signature and state.unreadable_since is None)

    def summaries(
        self, workspace: str | None = None, *, detail: bool = False, in_flight: bool = False
    ) -> list[UnitSummary]:
        """Unit summaries in a stable order (workspace, state file, unit)."""
        units = [e.summary(detail=detail) for e in self.entries(workspace)]
        if in_flight:
            units = [u for u in units if u["resumePoint"] != "all-done"]
        units.sort(key=lambda u: (str(u["workspace"]), str(u["stateFile"]), str(u["unit"])))
        return units

    def workspace_count(self) -> int:
        """How many workspaces are tracked."""
        return len(self.workspaces)

    def stats(self) -> dict[str, object]:
        """The cache's part of `stats`: counters, workspaces, units, the generation."""
        spaces = list(self.workspaces.items())
        return {
            "refreshes": self.counters["refreshes"],
            "unreadable": self.counters["unreadable"],
            "events": self.counters["events"],
            "workspaces": sorted(path for path, _ in spaces),
            "units": (units := sum(len(ws.entries) for _, ws in spaces)),
            "stories": units,  # the same count under its 0.1 name, kept for old clients
            "generation": self.generation,
        }

    def entries(self, workspace: str | None = None) -> list[Entry]:
        """A snapshot of the entries, of one workspace or of all."""
        with self._lock:
            spaces = (
                [self.workspaces[workspace]]
                if workspace in self.workspaces
                else ([] if workspace else list(self.workspaces.values()))
            )
            return [e for ws in spaces for e in ws.entries.values()]

    # -- workspaces ----------------------------------------------------------

    def add_workspace(self, path: str, *, checked: bool = True) -> Workspace:
        """Start tracking a workspace (call `scan` next; `checked=False`: `check` after)."""
        with self._lock:
            return self.workspaces.setdefault(path, Workspace(path, checked=checked))

    def check(self, ws: Workspace) -> None:
        """The warm-up's second pass: run the detectors on every unit, then serve them."""
        if self.detect is not None and not ws.checked:
            ws.checking = True  # _build runs the detectors from now on
            try:
                self.recheck(ws)
            finally:
                ws.checked = True  # a failing detector must not leave it uncached for good
        ws.checked = True
        self._end_first_look(ws, at_start=True)

    def in_first_look(self, workspace: str) -> bool:
        """Whether a workspace's first look is under way: its events report what storyd
        found there (the state at start-up or at a new watch), not a change as it happens."""
        ws = self.workspaces.get(workspace)
        return ws is not None and ws.first_look

    def _end_first_look(self, ws: Workspace, *, at_start: bool = False) -> None:
        if not ws.first_look:
            return
        ws.first_look = False
        entries = list(ws.entries.values())
        severities = Counter(f.severity for e in entries for f in e.findings)
        out_of_step = sum(1 for e in entries if any(f.severity in _OUT_OF_STEP for f in e.findings))
        found = FirstLook(ws.path, len(entries), out_of_step, dict(severities), at_start)
        self.on_first_look(found)

    def remove_workspace(self, path: str) -> bool:
        """Forget a workspace and its entries; True if it was tracked.

        Each unit leaves as a deleted file's units do: a `removed` event (and `resolved`
        for each of its findings) at a generation of its own, so a `subscribe {since}`
        client replays them and drops the units too.
        """
        ws = self.workspaces.get(path)
        if ws is None:
            return False
        ws.last_look = True  # its events are a departure, not drift (in_last_look)
        found = self._look(ws)
        for state_file, key in sorted(ws.entries):
            self._remove_entry(ws, state_file, key)
        with self._lock:
            self.workspaces.pop(path, None)
        self.on_last_look(found)
        return True

    def in_last_look(self, workspace: str) -> bool:
        """Whether a workspace is being removed: its `removed` and `resolved` events say
        storyd stopped watching, not that anything was resolved."""
        ws = self.workspaces.get(workspace)
        return ws is not None and ws.last_look

    @staticmethod
    def _look(ws: Workspace) -> FirstLook:
        """What a workspace holds now, summed up (a last look's report)."""
        entries = list(ws.entries.values())
        severities = Counter(f.severity for e in entries for f in e.findings)
        out_of_step = sum(1 for e in entries if any(f.severity in _OUT_OF_STEP for f in e.findings))
        return FirstLook(ws.path, len(entries), out_of_step, dict(severities))

    def find_state_files(self, ws: Workspace) -> dict[str, Adapter]:
        """Every state file of every format in a workspace."""
        source = Source(ws.path)
        found: dict[str, Adapter] = {}
        for adapter in self.adapters:
            for relpath in adapter.find(source):
                found.setdefault(relpath, adapter)
        return found

    def scan(self, ws: Workspace, *, lost: bool = False, reread: bool = True) -> int:
        """Find every state file of a workspace, read them, and drop those that vanished.

        `lost` says events may have been missed (an overflow, a vanished folder), so
        subscribers asking to replay from before now get a fresh list instead. Without
        `reread` (the periodic rescan), a known file is read again only when its inode,
        size or mtime changed, or when its format's findings depend on the clock.
        """
        found = self.find_state_files(ws)
        for relpath in [r for r in ws.files if r not in found]:
            self._drop_file(ws, relpath)
        for relpath, adapter in found.items():
            state = ws.files.get(relpath)
            if (
                reread
                or state is None
                or adapter.time_sensitive
                or _signature(os.path.join(ws.path, relpath)) != state.signature
            ):
                self.refresh(ws, relpath, adapter, reuse=not reread)
        if lost:
            self.lost_before = self.generation
        if ws.checked:  # a warm-up's first look ends with its detectors' pass (`check`)
            self._end_first_look(ws)
        return len(found)

    def owners(self, ws: Workspace, relpath: str) -> list[tuple[str, Adapter]]:
        """The state files a changed path affects (itself, or a companion's owner)."""
        owners = []
        for adapter in self.adapters:
            owner = adapter.owner(relpath)
            if owner is not None:
                owners.append((owner, adapter))
        for state_file, _key in ws.story_index.get(relpath, ()):
            state = ws.files.get(state_file)
            if state is not None:
                owners.append((state_file, state.adapter))
        return owners

    def touch(self, ws: Workspace, relpath: str, *, tentative: bool = False) -> bool:
        """A path changed: refresh the state files it belongs to.

        `tentative` (a read at the very end of a write): a state file that does not
        parse is left as it was and False returned, so the caller reads it again once
        the write has settled instead of marking it unreadable at once.
        """
        seen = set()
        complete = True
        for state_file, adapter in self.owners(ws, relpath):
            if state_file not in seen:
                seen.add(state_file)
                # the state file itself: unchanged units keep their entries; a companion
                # (story file, journal) can change answers without changing unit data
                complete &= self.refresh(
                    ws, state_file, adapter, reuse=state_file == relpath, tentative=tentative
                )
        return complete

    def verify(self, ws: Workspace) -> int:
        """Cheap check of every known state file (inode, size, mtime); refresh on change."""
        changed = 0
        for relpath, state in list(ws.files.items()):
            if _signature(os.path.join(ws.path, relpath)) != state.signature:
                changed += 1
                self.refresh(ws, relpath, state.adapter, reuse=True)
        return changed

    # -- refreshing ----------------------------------------------------------

    def refresh(
        self,
        ws: Workspace,
        relpath: str,
        adapter: Adapter,
        *,
        reuse: bool = False,
        tentative: bool = False,
    ) -> bool:
        """Re-read one state file and rebuild its entries; emit what changed.

        With `reuse` (the state file itself changed, nothing else), a unit whose data is
        unchanged keeps its entry as it is: no staleness read, render or detectors.
        False when `tentative` and the file did not parse (nothing was changed).
        """
        self.counters["refreshes"] += 1
        state = ws.files.get(relpath) or FileState(relpath, adapter)
        signature = _signature(os.path.join(ws.path, relpath))
        prints: dict[str, bytes] = {}
        try:
            units = adapter.load_reusing(
                Source(ws.path, self.options.lock_timeout),
                relpath,
                self._reuser(ws, state, prints, reuse=reuse and state.unreadable_since is None),
            )
        except StateFileMissing:
            self._drop_file(ws, relpath)
            return True
        except (DataError, LockTimeout) as exc:
            if tentative and isinstance(exc, DataError):
                return False
            self._mark_unreadable(ws, state, exc)
            return True
        state.signature = signature
        reuse = reuse and state.unreadable_since is None  # else every entry loses a finding
        state.unreadable_since = None
        state.unreadable_reason = None
        storytime.pin(ws.path)  # one look at git for every unit of this file
        try:
            self._rebuild(ws, state, units, reuse=reuse)
        finally:
            storytime.unpin(ws.path)
        state.prints = prints  # after the entries: a digest always names its entry's unit
        ws.files[relpath] = state  # after the entries: a known file means its units are in
        return True

    @staticmethod
    def _reuser(ws: Workspace, state: FileState, prints: dict[str, bytes], *, reuse: bool) -> Reuse:
        """The `reuse` callback of one read: record each node's digest in `prints` and,
        with `reuse`, hand back the cached unit of a node that has not changed."""
        known = state.prints

        def reuse_unit(key: str, node: dict[str, object]) -> Unit | None:
            # repr, not a JSON dump: exact for every value either parser yields
            # (1 and 1.0 and True differ; a float too large for JSON is not null)
            digest = blake2b(repr(node).encode("utf-8", "surrogatepass"), digest_size=16).digest()
            prints[key] = digest
            if not reuse or known.get(key) != digest:
                return None
            entry = ws.entries.get((state.relpath, key))
            return entry.unit if entry is not None else None

        return reuse_unit

    def recheck(self, ws: Workspace) -> None:
        """Re-run staleness and detectors on every unit (after a git change); no file reads."""
        storytime.pin(ws.path)
        try:
            self.on_pass(True)
            for state in list(ws.files.values()):
                units = [e.unit for k in state.keys if (e := ws.entries.get((state.relpath, k)))]
                self._rebuild(ws, state, units, force=True)
        finally:
            self.on_pass(False)
            storytime.unpin(ws.path)

    def _build(
        self, ws: Workspace, unit: Unit, extra: tuple[Finding, ...], git_busy: bool, force: bool
    ) -> Draft:
        try:
            answer = answers.answer(ws.path, unit, self.options)
        except StorydError as exc:
            return Draft(unit, None, exc, unit.findings + extra)
        findings = unit.findings + extra
        if self.detect is None or not (ws.checked or ws.checking):
            return Draft(unit, answer, None, findings)
        old = ws.entries.get((unit.state_file, unit.key))
        kept = tuple(f for f in old.findings if f.detector not in OWN_DETECTORS) if old else ()
        if git_busy:
            # Mid-rebase every rewritten commit looks unreachable: keep the detectors'
            # last findings and recheck once the operation ends.
            findings += kept
            self.on_git_busy(ws.path)
        elif (
            old is not None and not force and old.line == answer.line and same_data(old.unit, unit)
        ):
            findings += kept  # nothing a detector reads changed (git changes force a recheck)
        else:
            self.counters["checked"] += 1
            findings += self.detect(ws.path, unit, answer)
        return Draft(unit, answer, None, findings)

    def _unreadable_finding(self, state: FileState) -> tuple[Finding, ...]:
        if state.unreadable_since is None:
            return ()
        since = _now_iso(state.unreadable_since)
        message = (
            f"{state.relpath} unreadable since {since}: {state.unreadable_reason}; "
            "serving the last good answer"
        )
        return (Finding("engine", "state-unreadable", "error", message),)

    def _rebuild(
        self,
        ws: Workspace,
        state: FileState,
        units: Iterable[Unit],
        *,
        force: bool = False,
        reuse: bool = False,
    ) -> None:
        """Rebuild a file's entries; `force` reruns the detectors on unchanged units too;
        `reuse` keeps the entry of a unit whose data is unchanged, untouched."""
        extra = self._unreadable_finding(state)
        busy = self.detect is not None and self.git_busy(ws.path)
        keys = []
        for unit in units:
            keys.append(unit.key)
            if reuse and self._unchanged(ws, unit):
                continue
            self._store(ws, self._build(ws, unit, extra, busy, force))
        kept = set(keys)
        for key in [k for k in state.keys if k not in kept]:
            self._remove_entry(ws, state.relpath, key)
        state.keys = keys

    @staticmethod
    def _unchanged(ws: Workspace, unit: Unit) -> bool:
        """Whether a unit's cached entry was built from the same data (and without error)."""
        old = ws.entries.get((unit.state_file, unit.key))
        if old is None or old.error is not None:
            return False
        return old.unit is unit or same_data(old.unit, unit)

    def _store(self, ws: Workspace, draft: Draft) -> None:
        unit = draft.unit
        old = ws.entries.get((unit.state_file, unit.key))
        if old is not None and draft.answers_as(old):
            if old.unit is not unit:  # same answer from a re-read: keep units current
                old.unit = unit
            return
        with self._lock:
            self.generation += 1
            entry = Entry(ws.path, unit, draft.answer, draft.error, draft.findings, self.generation)
            pair = (unit.state_file, unit.key)
            ws.entries[pair] = entry
            if unit.story_file:
                known = ws.story_index.get(unit.story_file, ())
                if pair not in known:
                    ws.story_index[unit.story_file] = (*known, pair)
        self._emit_change(entry, old)

    def _remove_entry(self, ws: Workspace, state_file: str, key: str) -> None:
        with self._lock:
            old = ws.entries.pop((state_file, key), None)
            if old is None:
                return
            self.generation += 1
            generation = self.generation
            story_file = old.unit.story_file
            if story_file:
                pair = (state_file, key)
                left = tuple(p for p in ws.story_index.get(story_file, ()) if p != pair)
                if left:
                    ws.story_index[story_file] = left
                else:
                    ws.story_index.pop(story_file, None)
        self._emit("removed", old, generation)
        for finding in old.findings:
            self._emit("resolved", old, generation, finding)

    def _drop_file(self, ws: Workspace, relpath: str) -> None:
        state = ws.files.pop(relpath, None)
        if state is not None:
            for key in state.keys:
                self._remove_entry(ws, relpath, key)

    def _mark_unreadable(self, ws: Workspace, state: FileState, exc: StorydError) -> None:
        self.counters["unreadable"] += 1
        if state.relpath not in ws.files:
            ws.files[state.relpath] = state  # never good: queries read directly and get the error
            return
        if state.unreadable_since is None:
            state.unreadable_since = time.time()
        state.unreadable_reason = exc.message
        units = [e.unit for k in state.keys if (e := ws.entries.get((state.relpath, k)))]
        self._rebuild(ws, state, units)

    # -- events --------------------------------------------------------------

    def _emit_change(self, entry: Entry, old: Entry | None) -> None:
        self._emit("changed", entry, entry.generation)
        before = set(old.findings) if old else set()
        after = set(entry.findings)
        for finding in entry.findings:
            if finding not in before:
                self._emit("drift", entry, entry.generation, finding)
        for finding in old.findings if old else ():
            if finding not in after:
                self._emit("resolved", entry, entry.generation, finding)

    def _emit(
        self, kind: EventKind, entry: Entry, generation: int, finding: Finding | None = None
    ) -> None:
        event: UnitEvent = {
            "event": kind,
            "clock": f"{self.instance}:{generation}",
            "generation": generation,
            "workspace": entry.workspace,
            "stateFile": entry.state_file,
            "unit": entry.key,
            "format": entry.unit.format,
        }
        if kind == "changed":  # a changed event carries the unit's summary after its identity
            extra = {k: v for k, v in entry.summary().items() if k not in event}
            event.update(extra)  # type: ignore[typeddict-item]
        if finding is not None:
            event["finding"] = finding.as_dict()
        line = protocol.event_line(event)
        self.counters["events"] += 1
        ws = self.workspaces.get(entry.workspace)
        if ws is not None and not ws.checked:
            # the start-up warm-up's first sight of every unit: not kept for replay (at
            # 10,000 units, 4.7 MB of lines); a `since` from before it gets the full list
            self.lost_before = max(self.lost_before, generation)
        else:
            if len(self.history) == self.history.maxlen:  # the oldest line is dropped now
                self.lost_before = max(self.lost_before, self.history[0][0])
            self.history.append((generation, entry.workspace, line))
        for sink in list(self.sinks):
            sink(event, line)

    def replay(self, since: str, workspace: str | None) -> list[bytes] | None:
        """Event lines after clock `since`, or None when they cannot all be replayed."""
        instance, _, gen_text = since.partition(":")
        if instance != self.instance or not gen_text.isdigit():
            return None
        generation = int(gen_text)
        # `lost_before`: the newest generation with a line not in the history (warm-up,
        # or dropped at the cap); lines of later generations are all there. A clock from
        # the future was never this instance's: the client's view cannot be trusted.
        if generation < self.lost_before or generation > self.generation:
            return None
        return [
            line
            for gen, ws, line in list(self.history)
            if gen > generation and (workspace is None or ws == workspace)
        ]
