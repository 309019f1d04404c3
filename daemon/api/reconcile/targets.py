"""Where each format keeps a task in its file, and how its writer spells the fields.

A `Dialect` answers, for one unit of one format: which file holds its tasks (checkpoint
units live in phase.json but their tasks in execution.json), the path of a task's node
in that file's JSON, and the writer's own words: the done status, the commit key, the
completion-time key and its timestamp style. Formats without a dialect (autodev's
Markdown) are reported as "no writer", never guessed at.
"""

from __future__ import annotations

import time

from storyd.api.reconcile.jsonedit import Path, lookup
from storyd.core.model import Unit

__all__ = ["BAK_FORMATS", "DIALECTS", "Dialect", "EpicDialect", "dialect_for", "utc_stamp"]


def utc_stamp(epoch: float) -> str:
    """`2026-03-02T09:10:00Z`: the seeds' timestamps (`date -u +%Y-%m-%dT%H:%M:%SZ`)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _task_id(node: object) -> str | None:
    if not isinstance(node, dict):
        return None
    for key in ("id", "taskId", "task_id"):
        value = node.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool):
            return str(value).strip().rstrip(".")
    return None


def _find(container: object, wanted: str) -> str | int | None:
    """The key (map) or index (array of objects with an id) of `wanted` in a container."""
    if isinstance(container, dict):
        return wanted if wanted in container else None
    if isinstance(container, list):
        wanted = wanted.strip().rstrip(".")
        for index, node in enumerate(container):
            if _task_id(node) == wanted:
                return index
    return None


class Dialect:
    """One format's file layout and field spellings."""

    format = ""
    done = "DONE"
    sha_key: str | None = None
    time_key: str | None = None
    add_sha = False  # whether a missing commit key is added (the seed's schema has one)

    def target(self, unit: Unit) -> str:
        """The workspace-relative file that holds the unit's tasks."""
        return unit.state_file

    def task_path(self, document: object, unit: Unit, task_id: str) -> Path | None:
        """The path of a task's node in the document, None when it is not found."""
        tasks = document.get("tasks") if isinstance(document, dict) else None
        step = _find(tasks, task_id)
        return None if step is None else ("tasks", step)

    keep_case = False  # write `done` where the file already writes this task lower-case

    def done_word(self, current: object) -> str:
        """The done status, in the casing the file already uses for this task if keep_case."""
        if self.keep_case and isinstance(current, str) and current.strip().islower():
            return self.done.lower()
        return self.done


class EpicDialect(Dialect):
    """Seed 000: stories.<id>.tasks.<id> {status, commitSha, completedAt} (or arrays)."""

    format = "epic"
    done = "DONE"
    sha_key = "commitSha"
    time_key = "completedAt"
    add_sha = True
    keep_case = True

    def story_path(self, document: object, unit: Unit) -> Path | None:
        """The path of the unit's story node (`()` for a single-story file), or None.

        Story-level repairs (a story whose PR or squash landed) write its `status` there.
        """
        if not isinstance(document, dict):
            return None
        if "stories" not in document:  # a single-story file {storyId, tasks, ...}
            return ()
        story = _find(document["stories"], unit.key)
        return None if story is None else ("stories", story)

    @staticmethod
    def story_status_key(story_path: Path) -> str:
        """`status` in a story node; `storyStatus` at the top of a single-story file."""
        return "status" if story_path else "storyStatus"

    def task_path(self, document: object, unit: Unit, task_id: str) -> Path | None:
        story = self.story_path(document, unit)
        if story is None:
            return None
        node = lookup(document, story)
        step = _find(node.get("tasks") if isinstance(node, dict) else None, task_id)
        return None if step is None else (*story, "tasks", step)


class IssuePlanDialect(Dialect):
    """Seed 002: tasks[] {id, status: completed, completed_at, ...}."""

    format = "issue-plan"
    done = "completed"
    sha_key = "commit_sha"
    time_key = "completed_at"


class CheckpointDialect(Dialect):
    """Seed 004: memory/state/execution.json tasks[] {id, status: complete, completed_at}."""

    format = "checkpoint"
    done = "complete"
    time_key = "completed_at"

    def target(self, unit: Unit) -> str:
        return "memory/state/execution.json"


class SessionDialect(Dialect):
    """Seed 001: only whole-file restores from `.bak`; its writer keeps a `.bak`."""

    format = "session"
    done = "complete"
    time_key = "completed"


DIALECTS: dict[str, Dialect] = {
    d.format: d for d in (EpicDialect(), IssuePlanDialect(), CheckpointDialect(), SessionDialect())
}
BAK_FORMATS = frozenset(("session",))  # formats whose writers keep `<file>.bak`


def dialect_for(unit: Unit) -> Dialect | None:
    """The unit's dialect, None for formats storyd does not write."""
    return DIALECTS.get(unit.format)
