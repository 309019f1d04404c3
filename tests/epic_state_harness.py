"""The epic producer's state files: their ids and paths, and the one writer of them.

    EPIC, STATE, STORY   epic 0049, its workspace-relative state file, its story 13
    story_id()           the id of story n of epic 0049 (`story-0049-0013`)
    task_id()            the seed's id of task n of a story (`TASK-0049-0013-002`)
    epic_relpath()       plans/epic-<epic>/execution-state.json
    write_epic()         THE writer: plans/epic-<epic>/execution-state.json from story
                         nodes (`stories=`) or from each story's tasks (`tasks=`)
    atomic_write()       write a sibling temporary file, then rename it over the target
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson

__all__ = [
    "EPIC",
    "STATE",
    "STORY",
    "atomic_write",
    "epic_relpath",
    "story_id",
    "task_id",
    "write_epic",
]

EPIC = "0049"
STORY = "story-0049-0013"


def epic_relpath(epic: str) -> str:
    """The workspace-relative state file of an epic (`0049`)."""
    return f"plans/epic-{epic}/execution-state.json"


STATE = epic_relpath(EPIC)


def story_id(n: int) -> str:
    """The id of story n of epic 0049 (`story-0049-0013` for 13)."""
    return f"story-{EPIC}-{n:04d}"


def task_id(story: str, n: int) -> str:
    """The seed's id of task n of a story (`TASK-0049-0013-002`)."""
    return "TASK-" + story.removeprefix("story-") + f"-{n:03d}"


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to a sibling temporary file, then rename it over `path` (one event)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_epic(workspace: Path, epic: str, stories: dict[str, object] | None = None, *,
               tasks: dict[str, dict[str, object]] | None = None,
               atomic: bool = True, member: str = "stories") -> Path:
    """Write plans/epic-<epic>/execution-state.json: `{"epic": epic, "stories": ...}`.

    Give either `stories` (each story's whole node, as the file holds it) or `tasks`
    (`{story: {taskId: task}}`, short for `stories={story: {"tasks": {...}}}`). With
    `atomic` (the default) the file is replaced by a rename, as the producer writes it;
    without, it is rewritten in place. `member="storyStatuses"` writes the producer's
    flowVersion 2 shape, which storyd parses whole (the seed's `stories` is read a story
    at a time: storyd.core.jsonstream). Returns the file's path.
    """
    if (stories is None) == (tasks is None):
        raise TypeError("write_epic takes stories or tasks, not both and not neither")
    if tasks is not None:
        stories = {sid: {"tasks": nodes} for sid, nodes in tasks.items()}
    path = workspace / epic_relpath(epic)
    data = orjson.dumps({"epic": epic, member: stories})
    if atomic:
        atomic_write(path, data)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return path
