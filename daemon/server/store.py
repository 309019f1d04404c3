"""The store the query path reads: per workspace, one immutable snapshot per state file.

A snapshot holds every unit's entry of one state file, what they were read from (a
`Proof`: the files, their signatures, when the read began) and the file's health. The
refresher builds a new snapshot off to the side and installs it with one assignment
(`Workspace.files[relpath] = snapshot`), so a reader sees a file's old units or its
new ones, never a file that is known with units missing or half rebuilt. A query
serves from a snapshot only while its proof holds (`Snapshot.serves`): a write that
finished before the query is never answered from before it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

import orjson

from storyd.api.summaries import unit_summary
from storyd.core.gitstate import OPERATION_DETECTOR
from storyd.core.pipeline import Signature, is_racy, signature
from storyd.server import protocol

if TYPE_CHECKING:
    from storyd.core.errors import StorydError
    from storyd.core.formats import Adapter
    from storyd.core.model import Finding, Unit
    from storyd.core.pipeline import Answer
    from storyd.core.wire import Envelope, UnitSummary
    from storyd.server.changes import Changes

__all__ = [
    "STALE",
    "Deps",
    "Entry",
    "PassMark",
    "Proof",
    "Snapshot",
    "StoryProof",
    "Workspace",
    "under_way",
]

Deps = tuple[tuple[str, "Signature | None"], ...]
STALE = "file unreadable"  # a `list` unit's `stale`: served from its file's last good read


def under_way(findings: tuple[Finding, ...]) -> bool:
    """Whether findings say a git operation is under way (built while one was)."""
    return any(f.detector == OPERATION_DETECTOR for f in findings)


class Proof:
    """What an answer was read from: the files (absolute paths) with their signatures,
    the change mark `seq` (daemon/server/changes.py) and the wall clock when the read
    began. It holds while no file changed since: by the kernel's change queue where it
    watches the file's folder, else by `stat` and git's racy rule (daemon/core/pipeline.py)."""

    __slots__ = ("deps", "folders", "held_at", "seq", "started")

    def __init__(self, deps: Deps, seq: int, started: int) -> None:
        self.deps = deps
        self.folders = tuple(sys.intern(os.path.dirname(path)) for path, _sig in deps)
        self.seq = seq
        self.started = started
        # the change queue's seq when it last vouched for every file: while no event has
        # been drained since, the answer is the same (a hit costs one compare)
        self.held_at = -1

    def holds(self, changes: Changes | None) -> bool:
        """Whether every file is as it was read (call `changes.drain()` first)."""
        if changes is not None and self.held_at == changes.seq:
            return True
        covered = changes is not None
        for (path, sig), folder in zip(self.deps, self.folders, strict=True):
            if changes is not None:
                changed = changes.changed(path, self.seq, folder)
                if changed is not None:
                    if changed:
                        return False
                    continue
            covered = False
            if signature(path) != sig or is_racy(sig, self.started):
                return False
        if covered:
            assert changes is not None
            self.held_at = changes.seq
        return True

    def racy(self, changes: Changes | None) -> bool:
        """Whether only a later read can make it hold: a file checked by stat was too
        new to trust (the refresher reads such a file again a moment later)."""
        return any(
            (changes is None or changes.changed(path, self.seq) is None)
            and is_racy(sig, self.started)
            for path, sig in self.deps
        )

    @property
    def signature(self) -> Signature | None:
        """The first file's signature (a snapshot's: its state file's)."""
        return self.deps[0][1] if self.deps else None


class PassMark:
    """What one pass over a state file's units shares: the change mark and the clock
    taken before it, and git's stamp files as a Proof (units whose staleness asked git
    depend on them). One object for the pass, shared by its entries."""

    __slots__ = ("git", "seq", "started")

    def __init__(self, seq: int, started: int, git: Proof) -> None:
        self.seq = seq
        self.started = started
        self.git = git


class StoryProof:
    """A unit's own dependency, kept small (10,000 of them): its story file (a hash of
    its signature and its folder, interned) and, when staleness asked git, the pass's
    git proof. The story file's path is its unit's `story_file`; racy reads are flagged
    on the entry when it is built."""

    __slots__ = ("asked_git", "folder", "held_at", "mark", "sig_hash")

    def __init__(self, path: str, sig: Signature | None, mark: PassMark, asked_git: bool) -> None:
        self.sig_hash = hash(sig)
        self.folder = sys.intern(os.path.dirname(path))
        self.mark = mark
        self.asked_git = asked_git
        self.held_at = -1  # as Proof.held_at

    def same_as(self, other: StoryProof | None) -> bool:
        """Whether it vouches for the same files as `other` (the same signatures)."""
        return other is not None and (self.sig_hash, self.folder, self.asked_git) == (
            other.sig_hash, other.folder, other.asked_git
        )

    def holds(self, path: str, racy: bool, changes: Changes | None) -> bool:
        """Whether the story file at `path` (and git, if asked) is as it was read."""
        if changes is not None and self.held_at == changes.seq:
            return True
        mark = self.mark
        changed = changes.changed(path, mark.seq, self.folder) if changes is not None else None
        if changed is None:
            if racy or hash(signature(path)) != self.sig_hash:
                return False
        elif changed:
            return False
        git = mark.git
        if self.asked_git and not git.holds(changes):
            return False
        if (
            changes is not None
            and changed is not None
            and (not self.asked_git or git.held_at == changes.seq)
        ):
            self.held_at = changes.seq  # every file vouched for by the change queue
        return True


class Entry:
    """One unit's cached answer: the envelope line and the rest of the answer pre-rendered.

    Only the envelope line is stored rendered (about 6 KB a unit less than keeping
    every form). The findings' JSON is rendered on the unit's first query and kept from
    then on (rendered up front it doubled what the findings cost; see
    docs/benchmarks.md). `proof` covers the files this unit's answer depends on beyond
    its state file's (its story file, git's stamp when staleness asked git); None when
    it has no story file.
    """

    __slots__ = (
        "body",
        "done",
        "error",
        "findings",
        "findings_line",
        "generation",
        "key",
        "line",
        "next_line",
        "proof",
        "racy",
        "resume_point",
        "state_file",
        "under_way",
        "unit",
        "warnings",
        "workspace",
    )

    def __init__(
        self,
        workspace: str,
        unit: Unit,
        answer: Answer | None,
        error: StorydError | None,
        findings: tuple[Finding, ...],
        generation: int,
        proof: StoryProof | None = None,
        racy: bool = False,
    ) -> None:
        self.workspace = workspace
        self.unit = unit
        self.state_file = unit.state_file
        self.key = unit.key
        self.error = error
        self.findings = findings
        self.under_way = under_way(findings)  # built while a git operation was
        self.findings_line = b"[]" if not findings else None  # rendered on first query
        self.next_line: bytes | None = None  # likewise
        self.body: bytes | None = None  # the `resume` answer's body, likewise
        self.generation = generation
        self.line = answer.line if answer else b""
        self.resume_point = str(answer.envelope["resumePoint"]) if answer else None
        self.warnings = tuple(answer.warnings) if answer else ()
        self.proof = proof
        self.racy = racy  # its proof needed a later read when it was built
        self.done = sum(1 for t in unit.tasks if t.done)  # counted once, not per `list`
        _intern_unit(unit)

    @property
    def answer_body(self) -> bytes:
        """The `resume` answer without its clock, id and closing brace; rendered on the
        first query and kept (a cached answer's own work is then a lookup)."""
        body = self.body
        if body is None:
            if self.error is not None:
                return protocol.error_of(self.error)
            body = self.body = protocol.answer_body(
                self.line, self.findings_json(), b"cache", self.generation, self.next_json())
        return body

    def next_json(self) -> bytes:
        """The unit's next task as JSON (storyd.core.nextstep), rendered on first need."""
        line = self.next_line
        if line is None:
            line = self.next_line = protocol.next_json(self.unit)
        return line

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

    def summary(self, *, detail: bool = False, findings: tuple[Finding, ...] | None = None,
                stale: bool = False) -> UnitSummary:
        """The unit's progress, as `list` and `changed` events show it (detail: findings
        too): its own findings, or `findings` (what they are now: queries.findings_now);
        `stale`, served from the last good read of a file that no longer parses: no
        findings, nothing is built on it, and `stale` says why."""
        shown = () if stale else self.findings if findings is None else findings
        summary = unit_summary(self.workspace, self.unit, self.resume_point, shown,
                               self.error, self.generation, done=self.done, detail=detail)
        if stale:
            summary["stale"] = STALE
        return summary

    def with_findings(self, findings: tuple[Finding, ...]) -> Entry:
        """A copy answering with these findings (the same envelope and generation)."""
        copy = Entry.__new__(Entry)
        for name in Entry.__slots__:
            setattr(copy, name, getattr(self, name))
        copy.findings = findings
        copy.findings_line = None
        copy.body = None
        copy.under_way = under_way(findings)
        return copy

    def answers_as(self, line: bytes, warnings: tuple[str, ...], findings: tuple[Finding, ...],
                   error: StorydError | None) -> bool:
        """Whether a fresh computation would answer exactly as this entry does."""
        return (
            line == self.line
            and warnings == self.warnings
            and findings == self.findings
            and (error.message if error else None) == (self.error.message if self.error else None)
        )


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


class Snapshot:
    """One state file as last read: its entries in file order, what they were read from,
    and its health. Never changed once installed; a change installs a new one.

    `unreadable_since`/`unreadable_reason`: the file's latest read failed (torn JSON, a
    lock held past the bound); `entries` are then the last good read's, each with a
    finding saying so (`stale`: the detectors do not run on them, and `list` shows them
    without findings). A file never read well has no entries and `error` set.
    `under_way`: an entry was built while a git operation was under way.
    """

    __slots__ = (
        "adapter",
        "entries",
        "error",
        "keys",
        "prints",
        "proof",
        "racy",
        "relpath",
        "under_way",
        "unreadable_reason",
        "unreadable_since",
    )

    def __init__(
        self,
        relpath: str,
        adapter: Adapter,
        proof: Proof,
        entries: Mapping[str, Entry],
        *,
        racy: bool = False,
        prints: Mapping[str, bytes] | None = None,
        unreadable_since: float | None = None,
        unreadable_reason: str | None = None,
        error: StorydError | None = None,
    ) -> None:
        self.relpath = relpath
        self.adapter = adapter
        self.proof = proof
        self.entries = entries
        self.keys = tuple(entries)
        self.racy = racy  # it, or an entry, needed a later read when it was installed
        # unit key -> digest of the node its unit was built from: a node with the same
        # digest next time reuses the unit (formats with many units per file)
        self.prints = prints or {}
        self.unreadable_since = unreadable_since
        self.unreadable_reason = unreadable_reason
        self.error = error
        self.under_way = any(e.under_way for e in entries.values())

    @property
    def stale(self) -> bool:
        """Whether its entries are the last good read's (the file no longer parses)."""
        return self.unreadable_since is not None

    @property
    def signature(self) -> Signature | None:
        """The state file's own signature when it was read."""
        return self.proof.signature

    def fresh(self, changes: Changes | None) -> bool:
        """Whether the files this snapshot was read from are unchanged since."""
        return self.proof.holds(changes)

    def serves(self, entry: Entry, changes: Changes | None) -> bool:
        """Whether `entry` (one of this snapshot's) may answer a query now."""
        if not self.proof.holds(changes):
            return False
        proof = entry.proof
        if proof is None:
            return True
        story = entry.unit.story_file
        path = os.path.join(entry.workspace, story) if story else ""
        return proof.holds(path, entry.racy, changes)



def folder_identity(path: str) -> tuple[int, int] | None:
    """The folder a path names now, links followed: (st_dev, st_ino); None if none."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


class Workspace:
    """One watched workspace: its state files' snapshots and a story-file index.

    `checked` is False while a start-up warm-up has read the files but the detectors
    have not yet run: the entries hold the envelopes, not yet every finding.
    `first_look` is True until the workspace's first full read (and, in a warm-up, its
    detectors' pass) ends: its events are what storyd found, not what just happened.
    `last_look` is True while an unwatch removes its units.
    """

    __slots__ = (
        "checked",
        "checking",
        "epic_memo",
        "files",
        "files_version",
        "first_look",
        "identity",
        "last_look",
        "moved",
        "path",
        "story_index",
    )

    def __init__(self, path: str, *, checked: bool = True) -> None:
        self.path = path
        # the folder the path named when it was watched (st_dev, st_ino): an answer from
        # this cache proves the path still names it (Service.canonical); `moved` once it
        # does not (exchanged, moved away and replaced): queries read directly until the
        # workspace is watched afresh
        self.identity = folder_identity(path)
        self.moved = False
        self.checked = checked
        self.checking = False
        self.first_look = True
        self.last_look = False
        self.files: dict[str, Snapshot] = {}
        # which files there are changes `files_version`; an epic's state file found
        # among them is remembered with the version it was found at
        self.files_version = 0
        self.epic_memo: dict[str, tuple[int, str]] = {}
        # story file -> the (state file, unit) keys that name it; a tuple, as it is
        # nearly always one key (a set per story file cost 2 MB at 10,000 stories)
        self.story_index: dict[str, tuple[tuple[str, str], ...]] = {}

    @property
    def entries(self) -> dict[tuple[str, str], Entry]:
        """Every entry, keyed (state file, unit): a new dict, built from the snapshots."""
        return {
            (relpath, key): entry
            for relpath, snap in list(self.files.items())
            for key, entry in snap.entries.items()
        }

    @property
    def units(self) -> int:
        """How many units the workspace's snapshots hold."""
        return sum(len(snap.keys) for snap in list(self.files.values()))

    def entry(self, state_file: str, key: str) -> Entry | None:
        """One unit's entry, or None."""
        snap = self.files.get(state_file)
        return snap.entries.get(key) if snap is not None else None
