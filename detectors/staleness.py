"""staleness: the envelope's staleWarnings as findings, one per stale DONE task.

The envelope code path (storyd.core.envelope.stale_warnings, fed by storyd.api.answers.answer)
already decided which DONE tasks are stale, in the mode `context.staleness` (git: a
tracked, clean story file dates from its last commit when that is earlier than its
mtime; mtime: the seed's literal rule). This detector only re-states those warnings as
findings, so the direct read, the socket answer and the findings always agree.

    stale   warning   "Story file modified after task <ID> DONE" (the seed's text)

Every storyd caller passes the envelope (the daemon's engine, `resume --detail`,
`status`, `check`, `reconcile`). A host that calls the detector with no envelope gets
the same answer from the same rule: `_recompute` asks storyd.core.storytime, as
storyd.api.answers.answer does. It never asks the git view.
"""

from __future__ import annotations

import os

from storyd.core import envelope, storytime
from storyd.core.model import Finding, Task, Unit
from storyd.detectors import Context
from storyd.detectors.codes import CODES

__all__ = ["DETECTOR", "StalenessDetector", "message"]

NAME = "staleness"


def message(task_id: str) -> str:
    """The seed's warning text for one task."""
    return f"Story file modified after task {task_id} DONE"


class StalenessDetector:
    """Turns staleWarnings into `stale` findings."""

    name = NAME
    codes = CODES[NAME]  # every finding code it raises

    def check(self, unit: Unit, context: Context) -> list[Finding]:
        """One warning per DONE task the envelope calls stale, in task order."""
        done = [t for t in unit.tasks if t.done]
        if not done:
            return []
        warnings = context.envelope.get("staleWarnings") if context.envelope else None
        if not isinstance(warnings, list):
            warnings = _recompute(unit, context, done)
        stale = set(warnings)
        ids = dict.fromkeys(t.id for t in done if message(t.id) in stale)
        return [Finding(NAME, "stale", "warning", message(i), i) for i in ids]


def _recompute(unit: Unit, context: Context, done: list[Task]) -> list[str]:
    """envelope.stale_warnings, asked exactly as storyd.api.answers.answer asks it."""
    if not unit.story_file:
        return []
    workspace, relpath = context.workspace, unit.story_file
    mtime = storytime.mtime_seconds(os.path.join(workspace, relpath))
    commit_time = None
    if context.staleness == storytime.GIT:

        def commit_time() -> int | None:
            return storytime.git_commit_time(workspace, relpath)

    return envelope.stale_warnings(done, mtime, commit_time)


DETECTOR = StalenessDetector()
