"""task-order: DONE tasks after a task that is not DONE (the seed's invariant).

x-story-implement finishes tasks in order, so the resume point (the first task that is
not DONE) assumes every earlier task is DONE and every later one is not. A DONE task
after the resume point breaks that: the envelope stays well-formed, but the work was
recorded out of order (or an earlier task was reopened).

    out-of-order   warning   "task <ID> is DONE after task <P>, which is <status>"
                             "<N> tasks are DONE after task <P>, which is <status>: <IDs>"

One finding per unit (one cause: the first task that is not DONE, <P>), its `task` the
first DONE task after <P>; with several, the evidence holds `count` and `tasks`.
Optional tasks (Kiro's `[ ]*`, `extra["optional"]`) are never <P>.

Whether it is a warning is the convention's own rule (docs/formats.md, "Severities per
format"): the seed producers finish tasks one after another (SEQUENTIAL: a warning);
spec-kit's `[P]` tasks run together and Kiro's people start any task from the list, so
there it is a note (info). Formats whose order is not the order of the work
(`Adapter.ordered` False: beads, Task Master) are not checked. A plugin format says
with `sequential = True/False` on its adapter; one that does not is checked as the
seeds are (a warning).
"""

from __future__ import annotations

from storyd.core.model import Finding, Unit
from storyd.detectors import Context
from storyd.detectors.codes import CODES
from storyd.detectors.common import format_says

__all__ = ["DETECTOR", "SEQUENTIAL", "TaskOrderDetector", "severity"]

NAME = "task-order"
SEQUENTIAL: dict[str, bool] = {
    "epic": True, "session": True, "issue-plan": True, "autodev": True, "checkpoint": True,
    "spec-kit": False, "kiro": False, "openspec": False, "execplan": False,
    "bmad": False, "gsd": False,  # stories in parallel; a wave's plans together
}  # fmt: skip
"""storyd's own ordered formats: whether their producer finishes tasks in list order."""
SHOWN = 10  # ids named in the message; the evidence holds them all


def severity(format: str) -> str:
    """`warning` where the format's producer is sequential, else `info`."""
    sequential = SEQUENTIAL.get(format)
    if sequential is None:
        sequential = format_says(format, "sequential")
    return "warning" if sequential else "info"


class TaskOrderDetector:
    """Flags DONE tasks that follow the first task that is not DONE, once per unit."""

    name = NAME
    codes = CODES[NAME]  # every finding code it raises

    def check(self, unit: Unit, context: Context) -> list[Finding]:
        """One finding for the DONE tasks after the resume point, if any."""
        if not format_says(unit.format, "ordered"):
            return []
        first = next((t for t in unit.tasks if not t.done and not t.extra.get("optional")),
                     None)
        if first is None:
            return []
        position = unit.tasks.index(first)
        late = [t.id for t in unit.tasks[position + 1 :] if t.done]
        if not late:
            return []
        level = severity(unit.format)
        if len(late) == 1:
            message = f"task {late[0]} is DONE after task {first.id}, which is {first.status}"
            return [Finding(NAME, "out-of-order", level, message, late[0])]
        shown = ", ".join(late[:SHOWN]) + (f" and {len(late) - SHOWN} more"
                                           if len(late) > SHOWN else "")  # fmt: skip
        message = (f"{len(late)} tasks are DONE after task {first.id}, which is "
                   f"{first.status}: {shown}")
        evidence = {"count": str(len(late)), "tasks": ",".join(late)}
        return [Finding(NAME, "out-of-order", level, message, late[0], evidence)]


DETECTOR = TaskOrderDetector()
