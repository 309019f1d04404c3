"""The shapes that cross the socket, as types (docs/protocol.md is their prose).

Annotations only: modules import this under `TYPE_CHECKING`, so the resume path never
pays for `typing` at run time. The dicts themselves are still built and rendered where
they are now (pre-rendered where speed matters); these types let mypy check that every
producer and consumer agrees on the keys.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

__all__ = [
    "CompletedTask",
    "Envelope",
    "EventKind",
    "FindingWire",
    "Severity",
    "UnitEvent",
    "UnitSummary",
]

Severity = Literal["info", "warning", "error"]
EventKind = Literal["changed", "drift", "resolved", "removed"]


class CompletedTask(TypedDict):
    """One entry of the envelope's `tasksCompleted`."""

    id: str
    commitSha: str | None


class Envelope(TypedDict):
    """The seed's resume envelope, in the seed's key order (daemon/core/envelope.py)."""

    resumePoint: str
    tasksCompleted: list[CompletedTask]
    tasksPending: list[str]
    lastCommitSha: str | None
    staleWarnings: list[str]


class FindingWire(TypedDict):
    """A finding in answers, events and `--detail` output (daemon/core/model.py Finding)."""

    detector: str
    code: str
    severity: str  # one of model.SEVERITIES: info, warning, error
    task: str | None
    message: str
    evidence: NotRequired[dict[str, str]]


class UnitSummary(TypedDict):
    """One unit as `list`, `status` and `changed` events show it.

    A format's labels (an epic's `epic`/`story`, a plan's `issue`, ...) come first and
    may add keys of their own; no label can mask a key below.
    """

    workspace: str
    format: str
    stateFile: str
    unit: str
    done: int
    total: int
    resumePoint: str | None
    findings: int
    worst: str | None
    generation: int
    error: str | None
    findingList: NotRequired[list[FindingWire]]
    stale: NotRequired[str]  # "file unreadable": the last good read's, no findings built


class UnitEvent(TypedDict):
    """A subscriber's event line: the unit's identity, plus its summary (`changed`)
    or the finding that appeared (`drift`) or went away (`resolved`)."""

    event: EventKind
    clock: str
    generation: int
    workspace: str
    stateFile: str
    unit: str
    format: str
    finding: NotRequired[FindingWire]
