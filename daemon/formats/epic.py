"""The `epic` format (seed 000, x-internal-story-resume).

plans/epic-XXXX/execution-state.json holds `stories.<story-id>.tasks.<task-id>` with
`{status, commitSha, completedAt}`; the story file is plans/epic-XXXX/<story-id>.md.
Task order is the file's key order (jq's keys_unsorted).

The producer has written other shapes too (docs/formats.md, "Real epic shapes"): a
`stories` array of `{id, ...}` objects (with `storyEntries` beside it), flowVersion 2
`storyStatuses`, single-story files `{storyId, storyStatus, tasks}`, and slugged folders
(`plans/epic-0024-artifact-persistence/`). `story_nodes` reads them all into one list of
(story id, node); the seed's own shape goes through it unchanged.
"""

from __future__ import annotations

import os
import sys

from daemon import lifecycle
from daemon.errors import DataError, StateFileMissing, UsageError
from daemon.formats.base import Adapter, Source, finding, load_json_object, make_task
from daemon.jsonio import kind
from daemon.model import DONE, Finding, Task, Unit

__all__ = [
    "ADAPTER",
    "EpicAdapter",
    "epic_file_among",
    "epic_of_folder",
    "epic_state_file",
    "story_nodes",
]

STATE_NAME = "execution-state.json"
ROOT = "plans"
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
TYPE_CHECKING = False  # `typing` costs start-up time; see daemon/model.py
if TYPE_CHECKING:
    from daemon.formats.base import Reuse

    Entry = tuple[str, dict[str, object] | str]


def _pr_number(node: dict[str, object]) -> dict[str, object] | None:
    """`{"prNumber": N}` when the node records an integer PR number (squash evidence)."""
    pr = node.get("prNumber")
    return {"prNumber": pr} if isinstance(pr, int) and not isinstance(pr, bool) else None


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
        extra=_pr_number(node),
    )
    if unknown is not None:
        findings.append(unknown)
    return task, None, findings


def epic_of_folder(name: str) -> str | None:
    """The epic id of a folder name: `epic-0024` and `epic-0024-artifact-persistence` give 0024."""
    if not name.startswith("epic-"):
        return None
    digits, dash, slug = name[5:].partition("-")
    if not digits or not set(digits) <= _DIGITS or (dash and not slug):
        return None
    return digits


def epic_state_files(workspace: str, epic_id: str) -> list[str]:
    """Every plans/epic-<id>[-slug]/execution-state.json of one epic, sorted."""
    try:
        names = os.listdir(os.path.join(workspace, ROOT))
    except OSError:
        return []
    prefix = f"epic-{epic_id}"
    return sorted(
        f"{ROOT}/{name}/{STATE_NAME}"
        for name in names
        if name.startswith(prefix)
        and epic_of_folder(name) == epic_id
        and os.path.isfile(os.path.join(workspace, ROOT, name, STATE_NAME))
    )


def epic_state_file(workspace: str, epic_id: str) -> str:
    """The one state file of an epic (id validated and padded); two claimants are exit 64.

    Without any, the seed's path plans/epic-<id>/execution-state.json (whose absence is
    the seed's exit 1); a workspace that does not exist is exit 1 too, naming it.
    """
    if not os.path.isdir(workspace):
        raise StateFileMissing(f"workspace {workspace} does not exist")
    return choose_epic_file(epic_state_files(workspace, epic_id), epic_id)


def choose_epic_file(found: list[str], epic_id: str) -> str:
    """The one of `found` (the epic's state files, sorted), the seed's path when there is
    none; UsageError (exit 64) naming both when two folders claim the epic."""
    if len(found) > 1:
        msg = f"epic {epic_id} is claimed by {len(found)} folders: {', '.join(found)}"
        raise UsageError(msg)
    return found[0] if found else f"{ROOT}/epic-{epic_id}/{STATE_NAME}"


def epic_file_among(relpaths: list[str], epic_id: str) -> str:
    """The epic's state file among known workspace-relative paths (no disk: the daemon's
    query path), by the same rule as `epic_state_file`."""
    prefix = f"{ROOT}/epic-{epic_id}"
    found = [r for r in relpaths if r.startswith(prefix) and is_epic_file_of(r, epic_id)]
    return choose_epic_file(sorted(found), epic_id)


def is_epic_file_of(relpath: str, epic_id: str) -> bool:
    """Whether a workspace-relative path is plans/epic-<id>[-slug]/execution-state.json."""
    parts = relpath.split("/")
    return (
        len(parts) == 3
        and parts[0] == ROOT
        and parts[2] == STATE_NAME
        and epic_of_folder(parts[1]) == epic_id
    )


def _story_list(top: dict[str, object], stories: list[object], relpath: str) -> list[Entry]:
    entries = top.get("storyEntries")
    extra = entries if isinstance(entries, dict) else {}
    nodes: list[Entry] = []
    for index, item in enumerate(stories):
        story_id = item.get("id") if isinstance(item, dict) else None
        if not isinstance(item, dict) or not isinstance(story_id, str):
            nodes.append((f"stories[{index}]", f"{relpath}: stories[{index}]: no string `id`"))
            continue
        side = extra.get(story_id)
        nodes.append((story_id, {**side, **item} if isinstance(side, dict) else item))
    return nodes


def story_nodes(top: dict[str, object], relpath: str) -> list[Entry]:
    """(story id, node or error text) for every story of a state file, in file order."""
    stories = top.get("stories")
    if stories is None or stories is False:
        statuses = top.get("storyStatuses")
        if isinstance(statuses, dict):
            stories = statuses  # flowVersion 2
        elif isinstance(top.get("storyId"), str):
            node = {k: v for k, v in top.items() if k not in ("storyId", "storyStatus")}
            node["status"] = top.get("storyStatus")
            return [(str(top["storyId"]), node)]
        else:
            return []
    if isinstance(stories, list):
        return _story_list(top, stories, relpath)
    if not isinstance(stories, dict):
        msg = f"{relpath}: stories: expected an object, got {kind(stories)}"
        raise DataError(msg)
    nodes: list[Entry] = []
    for story_id, node in stories.items():
        if node is None or node is False:
            continue  # jq's `// empty`: the story is absent
        if not isinstance(node, dict):
            error = f"{relpath}: stories.{story_id}: expected an object, got {kind(node)}"
            nodes.append((story_id, error))
            continue
        nodes.append((story_id, node))
    return nodes


def _finished(story_id: str, node: dict[str, object], tasks: list[Task]) -> Finding | None:
    """The `story-finished` finding: the story's own record says done, its tasks do not."""
    reason = lifecycle.finished_reason(node.get("status"), node.get("prMergeStatus"))
    if reason is None or (tasks and all(t.bucket == DONE for t in tasks)):
        return None
    done = sum(t.bucket == DONE for t in tasks)
    message = (
        f"{story_id} is finished ({reason}) with {done} of {len(tasks)} tasks DONE: "
        "the envelope's resume point is structural; do not re-execute this story"
    )
    return finding("story-finished", "info", message)


def _labels(epic_dir: str, story_id: str, node: dict[str, object]) -> dict[str, str]:
    epic = epic_of_folder(epic_dir.rsplit("/", 1)[-1]) or ""
    labels = {"epic": sys.intern(epic), "story": story_id}  # one epic string, not one a story
    pr = _pr_number(node)
    if pr is not None:
        labels["pr"] = str(pr["prNumber"])
    return labels


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
    done_story = _finished(story_id, node, tasks) if error is None else None
    if done_story is not None:
        findings.append(done_story)
    return Unit(
        "epic",
        relpath,
        story_id,
        tuple(tasks),
        story_file=story_file,
        findings=tuple(findings),
        labels=_labels(epic_dir, story_id, node),
        error=error,
    )


class EpicAdapter(Adapter):
    """plans/epic-XXXX[-slug]/execution-state.json, one unit per story."""

    name = "epic"
    convention = "x-internal-story-resume, plans/epic-XXXX[-slug]/execution-state.json"
    roots = (ROOT,)

    def matches(self, relpath: str) -> bool:
        parts = relpath.split("/")
        return (
            len(parts) == 3
            and parts[0] == ROOT
            and epic_of_folder(parts[1]) is not None
            and parts[2] == STATE_NAME
        )

    def owner(self, relpath: str) -> str | None:
        folder, _, leaf = relpath.rpartition("/")
        if folder.endswith("/stories") and leaf.endswith(".md"):
            folder = folder[: -len("/stories")]  # slugged epics keep stories/<story>.md
        candidate = f"{folder}/{STATE_NAME}"
        if leaf == STATE_NAME or (leaf.endswith(".md") and self.matches(candidate)):
            return candidate if self.matches(candidate) else None
        return None

    def load(self, source: Source, relpath: str) -> list[Unit]:
        return self.load_reusing(source, relpath, None)

    def load_reusing(self, source: Source, relpath: str, reuse: Reuse | None) -> list[Unit]:
        top = load_json_object(source.read(relpath, STATE_NAME), relpath)
        units = []
        for story_id, node in story_nodes(top, relpath):
            unit = reuse(story_id, node) if reuse is not None and isinstance(node, dict) else None
            if unit is None:
                unit = _unit_or_error(relpath, story_id, node)
                _locate_story_file(source, unit)
            units.append(unit)
        return units

    def parse(self, data: bytes, relpath: str) -> list[Unit]:
        """The units of one state file's bytes, in file order."""
        top = load_json_object(data, relpath)
        return [_unit_or_error(relpath, sid, node) for sid, node in story_nodes(top, relpath)]


def _unit_or_error(relpath: str, story_id: str, node: dict[str, object] | str) -> Unit:
    """A story's unit, or an error unit when `story_nodes` gave an error text."""
    if isinstance(node, str):
        return Unit("epic", relpath, story_id, (), error=node)
    return _unit(relpath, relpath.rsplit("/", 1)[0], story_id, node)


def _locate_story_file(source: Source, unit: Unit) -> None:
    """The producer's other story-file place, stories/<story>.md, when the seed's is absent."""
    story_file = unit.story_file
    if story_file is None or source.exists(story_file):
        return
    folder, _, leaf = story_file.rpartition("/")
    other = f"{folder}/stories/{leaf}"
    if source.exists(other):
        unit.story_file = other


ADAPTER = EpicAdapter()
