"""task-order: a DONE task after a task that is not DONE (the seed's invariant).

x-story-implement finishes tasks in order, so the resume point (the first task that is
not DONE) assumes every earlier task is DONE and every later one is not. A DONE task
after the resume point breaks that: the envelope stays well-formed, but the work was
recorded out of order (or an earlier task was reopened).

    out-of-order   warning   "task <ID> is DONE after task <P>, which is <status>"

One finding per offending task; <P> is the first task that is not DONE. Optional tasks
(Kiro's `[ ]*`, `extra["optional"]`) are never <P>, and formats whose order is not the
order of the work (`Adapter.ordered` False: beads, Task Master) are not checked.
"""

from __future__ import annotations

from storyd.core.model import Finding, Unit
from storyd.detectors import Context
from storyd.detectors.codes import CODES
from storyd.detectors.common import format_says

__all__ = ["DETECTOR", "TaskOrderDetector"]

NAME = "task-order"


class TaskOrderDetector:
    """Flags DONE tasks that follow the first task that is not DONE."""

    name = NAME
    codes = CODES[NAME]  # every finding code it raises

    def check(self, unit: Unit, context: Context) -> list[Finding]:
        """One warning per DONE task after the resume point."""
        if not format_says(unit.format, "ordered"):
            return []
        first = next((t for t in unit.tasks if not t.done and not t.extra.get("optional")),
                     None)
        if first is None:
            return []
        position = unit.tasks.index(first)
        return [
            Finding(
                NAME,
                "out-of-order",
                "warning",
                f"task {t.id} is DONE after task {first.id}, which is {first.status}",
                t.id,
            )
            for t in unit.tasks[position + 1 :]
            if t.done
        ]


DETECTOR = TaskOrderDetector()
