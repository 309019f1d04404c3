"""A committed Claude Code task list's own checklist: `.claude/tasks/tasks.md`, a second ledger.

A repository that commits its list may keep a markdown checklist beside the task files
(haystack: `- [x] **#2 Type definitions** — ...`, headed "Read .claude/tasks/ and do the
next unchecked task"). Claude Code's task tools read only the JSON files; the session told
to do "the next unchecked task" follows the checklist, and the two drift (realworld3:
the checklist and the commits say #1-#10 done while the JSON says #1, #5, #11). Where
they disagree on a task, a `checklist-disagrees` finding names both files and says which
the producer trusts. docs/formats.md.
"""

from __future__ import annotations

from storyd.core.formats.base import finding
from storyd.core.model import Finding, Task

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


def disagreements(tasks: list[Task], folder_unit: str, path: str, data: bytes) -> list[Finding]:
    """One finding per task whose JSON status and checklist box disagree."""
    boxes = checked(data.decode("utf-8", "replace"))
    folder = folder_unit.rpartition("/")[0]
    found = []
    for task in tasks:
        box = boxes.get(task.id)
        if box is None or box == task.done:
            continue
        said = "checked" if box else "unchecked"
        status = task.status if task.known else (
            f"{task.status!r} (not a status Claude Code writes: not completed)")
        message = (f"task {task.id} is {status} in {folder}/{task.id}.json but {said} in "
                   f"{path}: Claude Code's task tools trust the JSON (TaskList reads only "
                   "it); a session told to do \"the next unchecked task\" follows the "
                   "checklist")
        found.append(finding("checklist-disagrees", "warning", message, task.id,
                             {"json": f"{folder}/{task.id}.json", "checklist": path,
                              "checklist_says": said, "json_says": task.status}))
        if len(found) >= _SHOWN:
            break
    return found
