"""A unit and its story time become the seed's resume envelope, rendered as jq would.

Key order: resumePoint, tasksCompleted, tasksPending, lastCommitSha, staleWarnings.
"""

from __future__ import annotations

from storyd.core.isotime import parse_epoch
from storyd.core.jsonio import dumps
from storyd.core.model import DONE, Task, Unit

TYPE_CHECKING = False  # `typing` costs start-up time; see daemon/core/model.py
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from storyd.core.wire import Envelope

__all__ = ["build", "point_of", "render", "resume_point", "stale_warnings", "status_warnings"]


def resume_point(tasks: Sequence[Task]) -> str:
    """fresh-start, all-done, or phase-2-task-<N> (N: 1-based position of the first non-DONE)."""
    first_pending = next((i for i, t in enumerate(tasks, 1) if t.bucket != DONE), None)
    if not any(t.bucket == DONE for t in tasks):
        return "fresh-start"
    if first_pending is None:
        return "all-done"
    return f"phase-2-task-{first_pending}"


def stale_warnings(
    done: Sequence[Task], mtime: int | None, commit_time: Callable[[], int | None] | None
) -> list[str]:
    """One warning per DONE task completed before the story file last changed.

    `mtime` is the story file's whole-second mtime (None or 0 when absent). With
    `commit_time` (git mode), a story file that git tracks unmodified dates from its
    last commit when that is earlier, so a fresh clone or checkout raises nothing.
    """
    if not mtime or not done:
        return []
    stale = [(t, e) for t in done if (e := parse_epoch(t.completed_at)) is not None and e < mtime]
    if stale and commit_time is not None:
        committed = commit_time()
        if committed is not None and committed < mtime:
            stale = [(t, e) for t, e in stale if e < committed]
    return [f"Story file modified after task {t.id} DONE" for t, _ in stale]


def status_warnings(unit: Unit) -> list[str]:
    """The seed's stderr line for each task whose status is outside the vocabulary."""
    return [
        f"warn: unknown status '{t.status}' for task {t.id}; treated as PENDING"
        for t in unit.tasks
        if not t.known
    ]


def point_of(unit: Unit) -> str:
    """The unit's resume point: its format's own, else its tasks' (staleness aside)."""
    return unit.resume_point or resume_point(unit.tasks)


def build(unit: Unit, stale: list[str]) -> Envelope:
    """The envelope as an ordered dict."""
    done = [t for t in unit.tasks if t.bucket == DONE]
    last = done[-1].commit_sha if done else None
    return {
        "resumePoint": point_of(unit),
        "tasksCompleted": [{"id": t.id, "commitSha": t.commit_sha} for t in done],
        "tasksPending": [t.id for t in unit.tasks if t.bucket != DONE],
        "lastCommitSha": last or None,
        "staleWarnings": stale,
    }


def render(envelope: Envelope) -> bytes:
    """One compact JSON line, byte-identical to the seed's `jq -nc` assembly."""
    return dumps(envelope) + b"\n"
