"""The `next` object of `storyd resume --detail`: the task the producer would take next,
and why. No I/O.

A format that decides the next task by rules of its own (Task Master's find-next-task,
`bd ready`, Kiro's sub-tasks first) puts them on the unit (`Unit.next`: `task`, `why`,
and what the rule weighed: `dependencies`, `priority`, `tag`, `status`, `line`...). For
the others the envelope's resume point names it: `phase-2-task-N` (the epic seed: the
first task not DONE), `task-<id>`, a task's own id (`step-3`, `step-3:sub`, a flow's
`<flow>/step-3`), `fresh-start` (the first task). `all-done` has none: `next` is null.
"""

from __future__ import annotations

from storyd.core.envelope import resume_point
from storyd.core.model import DONE, Task, Unit

__all__ = ["next_of"]

_FIRST = "the first task not done, in the state file's order"


def _named(point: str, by_id: dict[str, Task]) -> tuple[Task | None, str]:
    if point.startswith("task-") and point[5:] in by_id:
        return by_id[point[5:]], "the format's resume rule"
    candidate = point.rpartition("/")[2].partition(":")[0]
    if candidate in by_id:
        return by_id[candidate], "the format's resume rule"
    return None, _FIRST


def next_of(unit: Unit) -> dict[str, object] | None:
    """The unit's next task and why, or None when nothing is left."""
    if unit.next is not None:
        return unit.next
    point = unit.resume_point or resume_point(unit.tasks)
    if point == "all-done" or unit.error:
        return None
    task: Task | None = None
    why = _FIRST
    if point.startswith("phase-2-task-") and point[13:].isdigit():
        index = int(point[13:]) - 1
        if 0 <= index < len(unit.tasks):
            task, why = unit.tasks[index], "the first task not DONE (the seed's resume rule)"
    elif point != "fresh-start":
        task, why = _named(point, {t.id: t for t in unit.tasks})
    if task is None:
        task = next((t for t in unit.tasks if t.bucket != DONE), None)
        why = "nothing is done yet: the first task" if point == "fresh-start" else _FIRST
    if task is None:
        return None
    return {"task": task.id, "why": why, "status": task.status}
