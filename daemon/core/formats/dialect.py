"""A format's dialect: where its writer keeps a task and how it spells the fields, which
`storyd reconcile` needs to write back what git proves. A capability of the format: an
adapter that storyd may write carries one (`Adapter.dialect`); one without (autodev's
Markdown) is reported as "no writer", never guessed at.

A `Dialect` answers, for one unit: which file holds its tasks (checkpoint units live in
phase.json but their tasks in execution.json), the path of a task's node in that file's
JSON, and the writer's own words: the done status, the commit key, the completion-time
key. The built-in formats' dialects are here, asked for by their adapters only when
reconcile needs them (`storyd resume` never imports this module); a plugin format
carries its own (`dialect = NotesDialect()` in its adapter class).
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` costs start-up time; see daemon/core/model.py
if TYPE_CHECKING:
    from storyd.core.model import Unit

__all__ = [
    "BY_NAME",
    "EPIC",
    "ISSUE_PLAN",
    "MISSING",
    "SESSION",
    "CheckpointDialect",
    "Dialect",
    "Path",
    "find_step",
    "lookup",
]

Path = tuple[str | int, ...]  # a place in a parsed JSON document: keys and indexes


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: object = _Missing()  # "the key is absent" (a change that adds it)


def _step(node: object, step: str | int) -> object:
    """One step down a parsed document, or MISSING."""
    if isinstance(node, dict) and isinstance(step, str):
        return node.get(step, MISSING)
    if isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node):
        return node[step]
    return MISSING


def lookup(document: object, path: Path) -> object:
    """The value at `path` in a parsed document, or MISSING."""
    node = document
    for step in path:
        node = _step(node, step)
        if node is MISSING:
            return MISSING
    return node


def _task_id(node: object) -> str | None:
    if not isinstance(node, dict):
        return None
    for key in ("id", "taskId", "task_id"):
        value = node.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool):
            return str(value).strip().rstrip(".")
    return None


def find_step(container: object, wanted: str) -> str | int | None:
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
    """One format's file layout and field spellings (the defaults: tasks[] at the top)."""

    done = "DONE"
    sha_key: str | None = None
    time_key: str | None = None
    add_sha = False  # whether a missing commit key is added (the seed's schema has one)
    keep_case = False  # write `done` where the file already writes this task lower-case
    keeps_bak = False  # its writer keeps `<file>.bak` (a whole-file restore is theirs too)
    stories = False  # its units are stories with a status of their own (story_path)

    def target(self, unit: Unit) -> str:
        """The workspace-relative file that holds the unit's tasks."""
        return unit.state_file

    def task_path(self, document: object, unit: Unit, task_id: str) -> Path | None:
        """The path of a task's node in the document, None when it is not found."""
        tasks = document.get("tasks") if isinstance(document, dict) else None
        step = find_step(tasks, task_id)
        return None if step is None else ("tasks", step)

    def story_path(self, document: object, unit: Unit) -> Path | None:
        """The path of the unit's story node, when `stories`; None otherwise."""
        return None

    @staticmethod
    def story_status_key(story_path: Path) -> str:
        """The key of a story node's status."""
        return "status"

    def done_word(self, current: object) -> str:
        """The done status, in the casing the file already uses for this task if keep_case."""
        if self.keep_case and isinstance(current, str) and current.strip().islower():
            return self.done.lower()
        return self.done


class EpicDialect(Dialect):
    """Seed 000: stories.<id>.tasks.<id> {status, commitSha, completedAt} (or arrays)."""

    done = "DONE"
    sha_key = "commitSha"
    time_key = "completedAt"
    add_sha = True
    keep_case = True
    stories = True

    def story_path(self, document: object, unit: Unit) -> Path | None:
        """The path of the unit's story node (`()` for a single-story file), or None.

        Story-level repairs (a story whose PR or squash landed) write its `status` there.
        """
        if not isinstance(document, dict):
            return None
        if "stories" not in document:  # a single-story file {storyId, tasks, ...}
            return ()
        story = find_step(document["stories"], unit.key)
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
        step = find_step(node.get("tasks") if isinstance(node, dict) else None, task_id)
        return None if step is None else (*story, "tasks", step)


class IssuePlanDialect(Dialect):
    """Seed 002: tasks[] {id, status: completed, completed_at, ...}."""

    done = "completed"
    sha_key = "commit_sha"
    time_key = "completed_at"


class CheckpointDialect(Dialect):
    """Seed 004: memory/state/execution.json tasks[] {id, status: complete, completed_at}."""

    done = "complete"
    time_key = "completed_at"

    def __init__(self, tasks_file: str) -> None:
        self.tasks_file = tasks_file  # the adapter's EXECUTION_PATH

    def target(self, unit: Unit) -> str:
        return self.tasks_file


class SessionDialect(Dialect):
    """Seed 001: only whole-file restores from `.bak`; its writer keeps a `.bak`."""

    done = "complete"
    time_key = "completed"
    keeps_bak = True


EPIC = EpicDialect()
ISSUE_PLAN = IssuePlanDialect()
SESSION = SessionDialect()
BY_NAME: dict[str, Dialect] = {"EPIC": EPIC, "ISSUE_PLAN": ISSUE_PLAN, "SESSION": SESSION}
