"""The `epic` format (seed 000, x-internal-story-resume).

plans/epic-XXXX/execution-state.json holds `stories.<story-id>.tasks.<task-id>` with
`{status, commitSha, completedAt}`; the story file is plans/epic-XXXX/<story-id>.md.
Task order is the file's key order (jq's keys_unsorted).
"""

from __future__ import annotations

from daemon.errors import DataError
from daemon.formats.base import Adapter, Source, finding, load_json_object, make_task
from daemon.jsonio import kind
from daemon.model import DONE, PENDING, Finding, Task, Unit

__all__ = ["ADAPTER", "EpicAdapter", "classify"]

STATE_NAME = "execution-state.json"
_DONE = frozenset(("done", "merged", "complete", "concluída", "concluida"))
_PENDING = frozenset(
    (
        "pending",
        "in_progress",
        "pr_created",
        "pr_approved",
        "pr_merged",
        "failed",
        "blocked",
        "unknown",
    )
)
_DIGITS = frozenset("0123456789")


def classify(status: str) -> tuple[str, bool]:
    """The seed's bucket table, case-insensitive: (bucket, whether the status is known)."""
    lowered = status.lower()
    if lowered in _DONE:
        return DONE, True
    return PENDING, lowered in _PENDING


def _task(task_id: str, node: object, where: str) -> tuple[Task | None, str | None, list[Finding]]:
    if not isinstance(node, dict):
        return None, f"{where}: expected an object, got {kind(node)}", []
    findings = []
    sha = node.get("commitSha")
    if sha is False:
        sha = None
    if sha is not None and not isinstance(sha, str):
        message = f"commitSha of {task_id} is {kind(sha)}, not a string; treated as null"
        findings.append(finding("invalid-commit-sha", "warning", message, task_id))
        sha = None
    task, unknown = make_task(
        task_id,
        node.get("status"),
        done=_DONE,
        pending=_PENDING,
        default="PENDING",
        commit_sha=sha,
        completed_at=node.get("completedAt"),
    )
    if unknown is not None:
        findings.append(unknown)
    return task, None, findings


def _unit(relpath: str, epic_dir: str, story_id: str, node: dict[str, object]) -> Unit:
    where = f"{relpath}: stories.{story_id}"
    story_file = f"{epic_dir}/{story_id}.md"
    tasks_node = node.get("tasks")
    tasks: list[Task] = []
    findings: list[Finding] = []
    error = None
    if tasks_node is not None and tasks_node is not False:
        if not isinstance(tasks_node, dict):
            error = f"{where}.tasks: expected an object, got {kind(tasks_node)}"
        else:
            for task_id, task_node in tasks_node.items():
                task, error, found = _task(task_id, task_node, f"{where}.tasks.{task_id}")
                if task is None:  # `error` says why
                    break
                tasks.append(task)
                findings.extend(found)
    return Unit(
        "epic",
        relpath,
        story_id,
        tuple(tasks),
        story_file=story_file,
        findings=tuple(findings),
        labels={"epic": epic_dir.rsplit("-", 1)[-1], "story": story_id},
        error=error,
    )


class EpicAdapter(Adapter):
    """plans/epic-XXXX/execution-state.json, one unit per story."""

    name = "epic"
    convention = "x-internal-story-resume, plans/epic-XXXX/execution-state.json"
    roots = ("plans",)

    @staticmethod
    def state_file(epic_id: str) -> str:
        """The state file of an epic (the id is already validated and padded)."""
        return f"plans/epic-{epic_id}/{STATE_NAME}"

    def matches(self, relpath: str) -> bool:
        parts = relpath.split("/")
        return (
            len(parts) == 3
            and parts[0] == "plans"
            and parts[1].startswith("epic-")
            and len(parts[1]) > 5
            and set(parts[1][5:]) <= _DIGITS
            and parts[2] == STATE_NAME
        )

    def owner(self, relpath: str) -> str | None:
        folder, _, leaf = relpath.rpartition("/")
        candidate = f"{folder}/{STATE_NAME}"
        if leaf == STATE_NAME or (leaf.endswith(".md") and self.matches(candidate)):
            return candidate if self.matches(candidate) else None
        return None

    def load(self, source: Source, relpath: str) -> list[Unit]:
        return self.parse(source.read(relpath, STATE_NAME), relpath)

    def parse(self, data: bytes, relpath: str) -> list[Unit]:
        """The units of one state file's bytes, in file order."""
        top = load_json_object(data, relpath)
        stories = top.get("stories")
        if stories is None or stories is False:
            return []
        if not isinstance(stories, dict):
            msg = f"{relpath}: stories: expected an object, got {kind(stories)}"
            raise DataError(msg)
        epic_dir = relpath.rsplit("/", 1)[0]
        units = []
        for story_id, node in stories.items():
            if node is None or node is False:
                continue  # jq's `// empty`: the story is absent
            if not isinstance(node, dict):
                error = f"{relpath}: stories.{story_id}: expected an object, got {kind(node)}"
                units.append(Unit("epic", relpath, story_id, (), error=error))
                continue
            units.append(_unit(relpath, epic_dir, story_id, node))
        return units


ADAPTER = EpicAdapter()
