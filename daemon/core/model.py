"""The format-neutral model: tasks, units (stories) and findings. No I/O.

Every state-file convention is read into these few classes, so the envelope, the
detectors, the cache and the events never need to know which format a unit came from.

They are hand-written slotted classes rather than dataclasses: `storyd resume` imports
this module on its start-up path, and `dataclasses` pulls in `inspect` (about 10 ms).
"""

from __future__ import annotations

from types import MappingProxyType

TYPE_CHECKING = False  # `typing` costs start-up time on the resume path
if TYPE_CHECKING:
    from storyd.core.wire import FindingWire

__all__ = [
    "DONE",
    "OWN_DETECTORS",
    "PENDING",
    "SEVERITIES",
    "Finding",
    "Task",
    "Unit",
    "Wording",
    "new_task",
    "same_data",
]

DONE = "done"
PENDING = "pending"
# Findings under these detector names come with the files (a format's own findings, the
# engine's state-unreadable), not from a plugin: the engine keeps or drops them by name,
# and no plugin may take them (detectors.RESERVED_NAMES).
# `history`: a unit's lost progress against its earlier versions (issue 33)
OWN_DETECTORS = frozenset(("format", "engine", "history"))
SEVERITIES = ("info", "warning", "error")


_NO_EXTRA: dict[str, object] = {}  # the `extra` of every task without one; never mutated


class Task:
    """One task of a unit, in the state file's task order.

    `bucket` is DONE or PENDING (the envelope's two lists); `status` is the raw value
    from the file; `known` is False when the status is outside the format's vocabulary.
    """

    __slots__ = ("bucket", "commit_sha", "completed_at", "extra", "id", "known", "status")

    def __init__(
        self,
        id: str,
        status: str,
        bucket: str,
        *,
        known: bool = True,
        commit_sha: str | None = None,
        completed_at: str | None = None,
        extra: dict[str, object] | None = None,
    ) -> None:
        self.id = id
        self.status = status
        self.bucket = bucket
        self.known = known
        self.commit_sha = commit_sha
        self.completed_at = completed_at
        self.extra = extra or _NO_EXTRA  # shared: one empty dict per task cost 3 MB at 10k

    @property
    def done(self) -> bool:
        """True when the task counts as completed."""
        return self.bucket == DONE

    def __repr__(self) -> str:
        return f"Task({self.id!r}, {self.status!r}, {self.bucket!r})"


def new_task(id: str, status: str, bucket: str, known: bool, commit_sha: str | None,
             completed_at: str | None, extra: dict[str, object] | None) -> Task:  # fmt: skip
    """`Task(...)` with every slot given in order, for the adapters' loops: the class
    call and its keywords skipped (212 ns a task against 459; an epic's 50,000)."""
    task = _new(Task)
    task.id = id
    task.status = status
    task.bucket = bucket
    task.known = known
    task.commit_sha = commit_sha
    task.completed_at = completed_at
    task.extra = extra or _NO_EXTRA
    return task


_new = object.__new__


class Unit:
    """One resumable unit of work: an epic's story, a session, an issue plan, ...

    `key` identifies it inside its state file; `story_file` (workspace-relative) feeds
    staleness; `branch` names the tip for history checks when the format records one;
    `resume_point` overrides the generic rule when the format defines its own; `error`
    is set when the unit's node is malformed, and a query for it fails with exit 65.
    `next` is the task the producer would take next and why (`--detail`'s `next`
    object), when the format decides that by rules of its own (storyd.core.nextstep).
    """

    __slots__ = (
        "branch",
        "error",
        "findings",
        "format",
        "key",
        "labels",
        "next",
        "resume_point",
        "state_file",
        "story_file",
        "tasks",
    )

    def __init__(
        self,
        format: str,
        state_file: str,
        key: str,
        tasks: tuple[Task, ...],
        *,
        story_file: str | None = None,
        branch: str | None = None,
        resume_point: str | None = None,
        findings: tuple[Finding, ...] = (),
        labels: dict[str, str] | None = None,
        error: str | None = None,
        next: dict[str, object] | None = None,
    ) -> None:
        self.format = format
        self.state_file = state_file
        self.key = key
        self.tasks = tasks
        self.story_file = story_file
        self.branch = branch
        self.resume_point = resume_point
        self.findings = findings
        self.labels = labels or {}
        self.error = error
        self.next = next

    def __repr__(self) -> str:
        return f"Unit({self.format!r}, {self.state_file!r}, {self.key!r}, {len(self.tasks)} tasks)"


class Wording:
    """A message that many findings share, filled in from the finding when read.

    `template` is a `str.format` string over `task` and the finding's evidence keys,
    for example "commit {commit} of {task} does not exist in the repository". A detector
    that can report thousands of findings of one kind keeps one of these instead of
    thousands of message strings (4.4 MB for the 29,000 missing commits of the
    10,000-story benchmark). The finding's `message` is the filled-in text, and equality
    compares that text, so a Wording and the same words as a string are one finding.
    """

    __slots__ = ("template",)

    def __init__(self, template: str) -> None:
        self.template = template

    def fill(self, task: str | None, evidence: dict[str, str]) -> str:
        """The message for one finding."""
        return self.template.format(task=task, **evidence)

    def __repr__(self) -> str:
        return f"Wording({self.template!r})"


class Finding:
    """A fact about a unit that its state file alone does not show. Frozen and hashable.

    Sets of findings are diffed into `drift` and `resolved` events, so equality covers
    every field. `evidence` is the machine-readable part (a read-only mapping of string
    keys to string values, sorted by key; empty by default): the shas, paths and reasons
    the message words for people. Consumers such as reconcile read it, never the message,
    so a detector may reword its message freely. Keys per code: docs/detectors.md.
    `message` may be given as a `Wording`, filled in from `task` and `evidence` when read.
    """

    __slots__ = ("_flat", "_words", "code", "detector", "severity", "task")

    detector: str
    code: str
    severity: str
    task: str | None
    _words: str | Wording
    _flat: tuple[str, ...]  # key, value, key, value, ... sorted by key

    def __init__(
        self,
        detector: str,
        code: str,
        severity: str,
        message: str | Wording,
        task: str | None = None,
        evidence: dict[str, str] | None = None,
    ) -> None:
        if severity not in SEVERITIES:
            msg = f"severity must be one of {', '.join(SEVERITIES)}, not {severity!r}"
            raise ValueError(msg)
        flat = _evidence_flat(evidence) if evidence else ()
        object.__setattr__(self, "detector", detector)
        object.__setattr__(self, "code", code)
        object.__setattr__(self, "severity", severity)
        object.__setattr__(self, "task", task)
        object.__setattr__(self, "_words", message)
        object.__setattr__(self, "_flat", flat)
        if isinstance(message, Wording):
            try:
                message.fill(task, evidence or {})
            except (KeyError, IndexError, ValueError) as exc:
                msg = f"{message!r} does not fit the finding's task and evidence: {exc!r}"
                raise ValueError(msg) from None

    @property
    def message(self) -> str:
        """The message for people (a `Wording` filled in)."""
        words = self._words
        return words if isinstance(words, str) else words.fill(self.task, self._evidence_dict())

    @property
    def evidence(self) -> MappingProxyType[str, str]:
        """The evidence as a read-only mapping (made when asked: a daemon holds tens of
        thousands of findings and reads the evidence of a few)."""
        return MappingProxyType(self._evidence_dict()) if self._flat else _NONE

    def _evidence_dict(self) -> dict[str, str]:
        flat = self._flat
        return dict(zip(flat[::2], flat[1::2], strict=True))

    def __setattr__(self, name: str, value: object) -> None:
        msg = "Finding is frozen"
        raise AttributeError(msg)

    def _key(self) -> tuple[object, ...]:
        return (self.detector, self.code, self.severity, self.task, self.message, self._flat)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Finding):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        tail = f", evidence={self._evidence_dict()!r}" if self._flat else ""
        return (
            f"Finding({self.detector!r}, {self.code!r}, {self.severity!r}, {self.message!r}{tail})"
        )

    def as_dict(self) -> FindingWire:
        """The wire form used in answers, events and `--detail` output.

        `evidence` is present only when non-empty, so findings without evidence keep the
        exact wire form they had before it existed.
        """
        wire: FindingWire = {
            "detector": self.detector,
            "code": self.code,
            "severity": self.severity,
            "task": self.task,
            "message": self.message,
        }
        if self._flat:
            wire["evidence"] = self._evidence_dict()
        return wire


_NONE: MappingProxyType[str, str] = MappingProxyType({})


def _evidence_flat(evidence: dict[str, str]) -> tuple[str, ...]:
    """The evidence as one flat tuple, sorted by key: (key, value, key, value, ...).

    Flat, not a tuple of pairs: one tuple a finding instead of one a key (1.4 MB less
    with the 29,000 findings of the 10,000-story benchmark). Both must be strings.
    """
    for key, value in evidence.items():
        if not isinstance(key, str) or not isinstance(value, str):
            msg = f"finding evidence must map strings to strings, not {key!r}: {value!r}"
            raise TypeError(msg)
    return tuple(item for pair in sorted(evidence.items()) for item in pair)


def _data(unit: Unit) -> tuple[object, ...]:
    tasks = tuple(
        (t.id, t.status, t.bucket, t.known, t.commit_sha, t.completed_at, repr(t.extra))
        for t in unit.tasks
    )
    labels = tuple(sorted(unit.labels.items()))
    return (
        unit.format,
        unit.state_file,
        unit.key,
        tasks,
        unit.story_file,
        unit.branch,
        unit.resume_point,
        unit.findings,
        labels,
        unit.error,
        repr(unit.next),
    )


def same_data(a: Unit, b: Unit) -> bool:
    """Whether two readings of a unit carry the same data (so detectors need not rerun)."""
    return a is b or _data(a) == _data(b)
