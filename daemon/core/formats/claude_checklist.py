"""A committed Claude Code task list's own checklist: `.claude/tasks/tasks.md`, a second ledger.

A repository that commits its list may keep a markdown checklist beside the task files
(haystack: `- [x] **#2 Type definitions** — ...`, headed "Read .claude/tasks/ and do the
next unchecked task"). Claude Code's task tools read only the JSON files; the session told
to do "the next unchecked task" follows the checklist, and the two drift (realworld3:
the checklist and the commits say #1-#10 done while the JSON says #1, #5, #11). Where
they disagree on a task, claude_tasks' `checklist-disagrees` finding names both files and says which
the producer trusts. docs/formats.md.
"""

from __future__ import annotations

from storyd.core.model import Task

__all__ = ["checked", "disagreements"]

# `- [x] **#2 Title**`, `* [ ] #3 Title`: a checkbox, then the task's id after `#`
_ITEM = r"(?m)^[ \t]*[-*+][ \t]+\[([ xX])\][ \t]+(?:\*\*|__)?#(\d+)\b"
_SHOWN = 20


def checked(text: str) -> dict[str, bool]:
    """Each task id the checklist names, and whether its box is ticked (the first wins)."""
    import re  # here: only a list with a checklist pays for it

    boxes: dict[str, bool] = {}
    for box, ident in re.findall(_ITEM, text):
        boxes.setdefault(str(int(ident)), box != " ")
    return boxes


def disagreements(tasks: list[Task], data: bytes) -> list[tuple[Task, str]]:
    """The tasks whose JSON status and checklist box disagree, with what the box says
    (`checked`, `unchecked`); at most 20."""
    boxes = checked(data.decode("utf-8", "replace"))
    found = []
    for task in tasks:
        box = boxes.get(task.id)
        if box is not None and box != task.done:
            found.append((task, "checked" if box else "unchecked"))
    return found[:_SHOWN]
