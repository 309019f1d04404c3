"""A state file's new snapshot: read, built off to the side, installed with one
assignment, and what changed forwarded as events.

Only the refresher thread calls `refresh`, `recheck` and `drop_file`.

A write to a state file costs what changed, not the file: a unit whose node in the
parsed file is identical to the last read's (a 16-byte digest per unit,
`Snapshot.prints`) keeps its unit object, so it is neither built, nor answered, nor
checked again; any other unit whose data is the same as its cached entry's
(`model.same_data`) keeps its entry, rendered bytes and findings. A change to a
companion (story file, journal), a rescan or a git change rebuilds every unit of the
file.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from storyd.core import pipeline, storytime
from storyd.core.errors import DataError, StateFileMissing, StorydError
from storyd.core.gitstate import OPERATION_DETECTOR, operation_findings
from storyd.core.model import OWN_DETECTORS, Finding, Unit, same_data
from storyd.core.pipeline import Answer, FileRead, Options
from storyd.server.reads import Reads, Reuser, unreadable_finding
from storyd.server.store import (
    Entry,
    PassMark,
    Proof,
    Snapshot,
    StoryProof,
    Workspace,
    folder_identity,
)

if TYPE_CHECKING:
    from storyd.core.formats import Adapter
    from storyd.core.pipeline import Detect
    from storyd.server.changes import Changes
    from storyd.server.events import EventLog
    from storyd.server.forward import Forwarder

    Regressed = Callable[[str, Unit, frozenset[str]], tuple[Finding, ...]]

__all__ = ["Installer"]


class Draft:
    """A freshly computed answer, compared with the cached entry before it replaces it."""

    __slots__ = ("answer", "error", "findings", "proof", "racy", "unit")

    def __init__(
        self,
        unit: Unit,
        answer: Answer | None,
        error: StorydError | None,
        findings: tuple[Finding, ...],
        proof: StoryProof | None = None,
        racy: bool = False,
    ) -> None:
        self.unit = unit
        self.answer = answer
        self.error = error
        self.findings = findings
        self.proof = proof
        self.racy = racy

    def answers_as(self, entry: Entry) -> bool:
        """Whether this draft would answer exactly as `entry` does."""
        line = self.answer.line if self.answer else b""
        warnings = tuple(self.answer.warnings) if self.answer else ()
        return entry.answers_as(line, warnings, self.findings, self.error)


def _pass_mark(workspace: str, changes: Changes | None) -> tuple[PassMark, bool]:
    """The mark a pass over a file's units starts with, and whether git's stamp was
    too new to trust by stat (a unit that asks git is then racy)."""
    seq = changes.drain() if changes is not None else 0
    started = time.time_ns()
    git = Proof(storytime.stamp_files(workspace), seq, started)
    return PassMark(seq, started, git), git.racy(changes)


def _proof(got: FileRead) -> Proof:
    return Proof(got.deps, got.seq, got.started_ns)


def _kept(prev: Entry, unit: Unit, draft: Draft) -> Entry:
    """The entry kept for a unit whose new draft answers as before: its unit current (a
    re-read), its proof and raciness the draft's."""
    if prev.unit is not unit:  # same answer from a re-read: keep units current
        prev.unit = unit
    same = draft.proof.same_as(prev.proof) if draft.proof is not None else prev.proof is None
    if not same or prev.racy != draft.racy:
        prev = _with_proof(prev, draft.proof, draft.racy)
    return prev


def _with_proof(entry: Entry, proof: StoryProof | None, racy: bool) -> Entry:
    """The same entry (answer, findings, generation) read from files with new signatures."""
    fresh = Entry.__new__(Entry)
    for name in Entry.__slots__:
        setattr(fresh, name, getattr(entry, name))
    fresh.proof = proof
    fresh.racy = racy
    return fresh


class Installer:
    """Reads a state file (through `reads`), builds its units' entries and installs the
    file's snapshot under `lock`, forwarding what changed (`forward`).

    `detect` checks a unit (None: no detectors); `git_busy` says a workspace's git is
    mid-operation (its detectors wait); `hold_tips` is called with True before a pass
    over a file's units and False after it (detection.tips_held_by); `regressed` gives
    the progress a unit lost against its history (recorder.py; None: no history).
    """

    def __init__(
        self,
        options: Options,
        changes: Changes | None,
        reads: Reads,
        forward: Forwarder,
        log: EventLog,
        lock: threading.Lock,
        counters: dict[str, int],
        *,
        detect: Detect | None,
        git_busy: Callable[[str], bool],
        hold_tips: Callable[[bool], None],
        regressed: Regressed | None = None,
    ) -> None:
        self.options = options
        self.regressed = regressed
        self.changes = changes
        self.reads = reads
        self.forward = forward
        self.log = log
        self.lock = lock
        self.counters = counters
        self.detect = detect
        self.git_busy = git_busy
        self.hold_tips = hold_tips
        # workspaces whose detectors waited for git: the refresher rechecks them once
        # git settles (`take_deferred`)
        self._deferred: set[str] = set()
        # files a git recheck found unreadable (no detector ran on their last good
        # units): their next good read runs the detectors, even on the same bytes
        self._unchecked: set[tuple[str, str]] = set()

    def take_deferred(self) -> set[str]:
        """The workspaces whose detectors waited for git since the last call (refresher)."""
        deferred, self._deferred = self._deferred, set()
        return deferred

    def _git_missed(self, workspace: str, relpath: str, since: float | None) -> bool:
        """Whether a good read of this file follows a git recheck that found it
        unreadable (its detectors must run, even on the same bytes)."""
        if since or (workspace, relpath) not in self._unchecked:
            return False
        self._unchecked.discard((workspace, relpath))
        return True

    def use_detectors(self, detect: Detect | None, hold_tips: Callable[[bool], None]) -> None:
        """New detectors (a reload), from the next unit built (refresher)."""
        self.detect = detect
        self.hold_tips = hold_tips

    def refresh(
        self,
        ws: Workspace,
        relpath: str,
        adapter: Adapter,
        *,
        reuse: bool = False,
        tentative: bool = False,
    ) -> bool:
        """Re-read one state file and install its new snapshot; emit what changed.

        With `reuse` (the state file itself changed, nothing else), a unit whose data is
        unchanged keeps its entry as it is: no staleness read, render or detectors.
        False when `tentative` and the file did not parse (nothing was changed).
        """
        self.counters["refreshes"] += 1
        old = ws.files.get(relpath)
        healthy = old is not None and old.error is None and old.unreadable_since is None
        prints: dict[str, bytes] = {}
        reuse_unit = Reuser(old, prints, reuse=reuse and healthy,
                            give_way=self.reads.priority.give_way)
        got = self.reads.read(ws.path, relpath, adapter, reuse_unit)
        if ws.moved or folder_identity(ws.path) != ws.identity:
            # another folder at the workspace's path (exchanged, moved away and replaced):
            # what was read is not this cache's; queries read directly until the service
            # watches the path afresh (Service._moved)
            ws.moved = True
            return True
        error = got.error
        if isinstance(error, StateFileMissing) or (error is not None and error.code == 64):
            self.drop_file(ws, relpath)  # gone, or a link out of the workspace
            return True
        if error is not None:
            if tentative and isinstance(error, DataError):
                return False
            self._mark_unreadable(ws, relpath, adapter, old, got)
            return True
        assert got.units is not None
        self._install(ws, relpath, adapter, _proof(got), got.units, old,
                      reuse=reuse and healthy, prints=prints)
        return True

    def recheck(self, ws: Workspace) -> None:
        """Re-run staleness and detectors on every unit (after a git change); no file reads."""
        self.hold_tips(True)
        try:
            for relpath, snap in list(ws.files.items()):
                if snap.error is not None:
                    continue
                units = [snap.entries[k].unit for k in snap.keys]
                if snap.unreadable_since is not None:
                    self._unchecked.add((ws.path, relpath))
                self._install(ws, relpath, snap.adapter, snap.proof, units, snap,
                              force=True, prints=snap.prints,
                              unreadable=(snap.unreadable_since, snap.unreadable_reason))
        finally:
            self.hold_tips(False)

    def _build(
        self,
        ws: Workspace,
        unit: Unit,
        extra: tuple[Finding, ...],
        git_busy: bool,
        force: bool,
        old: Entry | None,
        look: tuple[PassMark, bool],
        present: frozenset[str] = frozenset(),
        under_way: tuple[Finding, ...] = (),
        stale: bool = False,
    ) -> Draft:
        story = os.path.join(ws.path, unit.story_file) if unit.story_file else None
        story_sig = pipeline.signature(story) if story else None
        if self.regressed is not None:  # lost progress: the engine's own, never cached
            extra += self.regressed(ws.path, unit, present)
        try:
            answer = pipeline.answer(ws.path, unit, self.options)
        except StorydError as exc:
            return Draft(unit, None, exc, unit.findings + extra)
        proof = None
        racy = False
        if story:
            mark, git_racy = look
            proof = StoryProof(story, story_sig, mark, answer.asked_git)
            changes = self.changes
            covered = changes is not None and changes.changed(story, mark.seq) is not None
            racy = (not covered and pipeline.is_racy(story_sig, mark.started)) or (
                answer.asked_git and git_racy
            )
        findings = unit.findings + extra
        if self.detect is None or not (ws.checked or ws.checking):
            return Draft(unit, answer, None, findings, proof, racy)
        kept = tuple(f for f in old.findings if f.detector not in OWN_DETECTORS) if old else ()
        if git_busy or stale:
            # Mid-rebase every rewritten commit looks unreachable: no detector runs; the
            # detectors' last findings are kept (no resolved-then-drift churn for
            # subscribers) and the answer says which operation is under way, with the
            # direct path's info finding; checked again once it ends. Nor do they run on
            # the last good units of a file that no longer parses: no block or repair is
            # built on them (queries.py answers as a direct read would, in both cases).
            findings += tuple(f for f in kept if f.detector != OPERATION_DETECTOR) + under_way
            if git_busy:
                self._deferred.add(ws.path)
        elif (
            old is not None and not force and old.line == answer.line and same_data(old.unit, unit)
        ):
            findings += kept  # nothing a detector reads changed (git changes force a recheck)
        else:
            self.counters["checked"] += 1
            findings += self.detect(ws.path, unit, answer)
        return Draft(unit, answer, None, findings, proof, racy)

    def _install(
        self,
        ws: Workspace,
        relpath: str,
        adapter: Adapter,
        proof: Proof,
        units: Iterable[Unit],
        old: Snapshot | None,
        *,
        force: bool = False,
        reuse: bool = False,
        prints: Mapping[str, bytes] | None = None,
        unreadable: tuple[float | None, str | None] = (None, None),
    ) -> None:
        """Build a file's new snapshot off to the side, install it with one assignment,
        then publish what changed. `force` reruns the detectors on unchanged units too;
        `reuse` keeps the entry of a unit whose data is unchanged, untouched."""
        since, reason = unreadable
        extra = (unreadable_finding(relpath, str(reason), since),) if since else ()
        if self._git_missed(ws.path, relpath, since):
            force, reuse = True, False
        busy = self.detect is not None and self.git_busy(ws.path)
        under_way = operation_findings(ws.path) if busy else ()
        previous = old.entries if old is not None else {}
        present: frozenset[str] = frozenset()
        if self.regressed is not None:
            # a unit gone with its progress is told by every unit left in the file
            # (recorder.py), so when one goes, none is reused unchecked
            units = list(units)
            present = frozenset(u.key for u in units)
            reuse = reuse and present.issuperset(previous)
        entries: dict[str, Entry] = {}
        changed: list[tuple[Entry, Entry | None]] = []
        racy = proof.racy(self.changes)
        # git's stamp files are looked at before git is (the pin): a commit in between
        # makes the proof fail, never an answer from before it pass for one after
        look = _pass_mark(ws.path, self.changes)
        storytime.pin(ws.path)  # one look at git for every unit of this file
        give_way = self.reads.priority.give_way  # a query's read goes first
        try:
            for unit in units:
                give_way()
                prev = previous.get(unit.key)
                if reuse and prev is not None and prev.error is None and not prev.racy and (
                    prev.unit is unit or same_data(prev.unit, unit)
                ):
                    entries[unit.key] = prev
                    continue
                draft = self._build(ws, unit, extra, busy, force, prev, look, present,
                                    under_way, stale=bool(since))
                racy |= draft.racy
                if prev is not None and draft.answers_as(prev):
                    entries[unit.key] = _kept(prev, unit, draft)
                    continue
                entry = Entry(ws.path, unit, draft.answer, draft.error, draft.findings,
                              self.log.advance(), draft.proof, draft.racy)
                if prev is not None and prev.line == entry.line:
                    # the same envelope bytes (a detectors' pass changes findings only):
                    # share them, so a file's old and new snapshots do not hold two copies
                    entry.line = prev.line
                entries[unit.key] = entry
                changed.append((entry, prev))
        finally:
            storytime.unpin(ws.path)
        gone = [e for k, e in previous.items() if k not in entries]
        snap = Snapshot(relpath, adapter, proof, entries, racy=racy, prints=prints,
                        unreadable_since=since, unreadable_reason=reason)
        with self.lock:
            if relpath not in ws.files:
                ws.files_version += 1
            ws.files[relpath] = snap  # the one assignment: old units or new, never half
            _index(ws, relpath, [e for e, _ in changed], gone)
        for entry, prev in changed:  # 10,000 events after a warm-up's detectors: half
            give_way()  # a second in which a query waited for the lock 5 ms a system call
            self.forward.changed(entry, prev)
        for entry in gone:
            self.forward.removed(entry)

    def drop_file(self, ws: Workspace, relpath: str) -> None:
        """A state file is gone (or now links out of the workspace): its units leave."""
        with self.lock:
            snap = ws.files.pop(relpath, None)
            if snap is not None:
                ws.files_version += 1
                _index(ws, relpath, [], list(snap.entries.values()))
        self.reads.forget(ws.path, relpath)
        if snap is not None:
            for key in snap.keys:
                self.forward.removed(snap.entries[key])

    def _mark_unreadable(
        self, ws: Workspace, relpath: str, adapter: Adapter, old: Snapshot | None, got: FileRead
    ) -> None:
        """The file's read failed: serve its last good read's units, each with a finding
        saying since when (or, never read well, nothing: queries read it and get the error)."""
        self.counters["unreadable"] += 1
        assert got.error is not None
        good = self.reads.newest_good(ws.path, relpath, adapter)
        if good is None or good.units is None:
            snap = Snapshot(relpath, adapter, _proof(got), {}, error=got.error)
            with self.lock:
                if relpath not in ws.files:
                    ws.files_version += 1
                ws.files[relpath] = snap
            return
        since = old.unreadable_since if old is not None and old.unreadable_since else time.time()
        self._install(ws, relpath, adapter, _proof(got), good.units, old,
                      prints=old.prints if old is not None else None,
                      unreadable=(since, got.error.message))


def _index(ws: Workspace, relpath: str, added: list[Entry], gone: list[Entry]) -> None:
    """Keep the story-file index in step with a file's new snapshot (under the lock)."""
    for entry in added:
        story = entry.unit.story_file
        if story:
            pair = (relpath, entry.key)
            known = ws.story_index.get(story, ())
            if pair not in known:
                ws.story_index[story] = (*known, pair)
    for entry in gone:
        story = entry.unit.story_file
        if story:
            pair = (relpath, entry.key)
            left = tuple(p for p in ws.story_index.get(story, ()) if p != pair)
            if left:
                ws.story_index[story] = left
            else:
                ws.story_index.pop(story, None)
