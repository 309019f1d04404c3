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

from storyd.core import lifecycle
from storyd.core.errors import DataError, StateFileMissing, UsageError
from storyd.core.formats.base import (
    Adapter,
    Source,
    finding,
    load_json_object,
    make_task,
    nameable,
)
from storyd.core.jsonio import kind
from storyd.core.jsonstream import members
from storyd.core.model import DONE, Finding, Task, Unit

__all__ = [
    "ADAPTER",
    "EpicAdapter",
    "epic_file_among",
    "epic_of_folder",
    "epic_state_file",
    "story_node",
    "story_nodes",
]

STATE_NAME = "execution-state.json"
ROOT = "plans"
OLD_ROOT = "docs/stories"
"""The producer kept epics in docs/stories/epic-XXXX/ until it moved them to plans/."""
ROOTS = (ROOT, OLD_ROOT)
_DONE, _PENDING = lifecycle.task_buckets()  # the one status table, daemon/core/lifecycle.py
_DIGITS = frozenset("0123456789")
STORY_WHOLE = 1 << 20
"""A story whose text is longer (some 20,000 tasks) has its file parsed whole by
`load_reusing`: such a node is a tree by itself (storyd.core.jsonstream)."""
TYPE_CHECKING = False  # `typing` costs start-up time; see daemon/core/model.py
if TYPE_CHECKING:
    from storyd.core.formats.base import Reuse

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
    """Every <root>/epic-<id>[-slug]/execution-state.json of one epic, plans/ first."""
    found: list[str] = []
    prefix = f"epic-{epic_id}"
    for root in ROOTS:
        try:
            names = os.listdir(os.path.join(workspace, root))
        except OSError:
            continue
        found.extend(
            sorted(
                f"{root}/{name}/{STATE_NAME}"
                for name in names
                if name.startswith(prefix)
                and nameable(name)  # (storyd names its files in UTF-8: formats.base)
                and epic_of_folder(name) == epic_id
                and os.path.isfile(os.path.join(workspace, root, name, STATE_NAME))
            )
        )
    return found


def epic_state_file(workspace: str, epic_id: str) -> str:
    """The one state file of an epic (id validated and padded); two claimants are exit 64.

    Without any, the seed's path plans/epic-<id>/execution-state.json (whose absence is
    the seed's exit 1); a workspace that does not exist is exit 1 too, naming it.
    """
    if not os.path.isdir(workspace):
        raise StateFileMissing(f"workspace {workspace} does not exist")
    return choose_epic_file(epic_state_files(workspace, epic_id), epic_id)


def choose_epic_file(found: list[str], epic_id: str) -> str:
    """The one of `found` (the epic's state files), the seed's path when there is none.

    plans/ wins over the older docs/stories/ (the units of both say so, finding
    `epic-in-two-places`); two folders claiming the epic under one root is a UsageError
    (exit 64) naming them.
    """
    current = [f for f in found if f.startswith(ROOT + "/")]
    candidates = current or found
    if len(candidates) > 1:
        msg = f"epic {epic_id} is claimed by {len(candidates)} folders: {', '.join(candidates)}"
        raise UsageError(msg)
    return candidates[0] if candidates else f"{ROOT}/epic-{epic_id}/{STATE_NAME}"


def epic_file_among(relpaths: list[str], epic_id: str) -> str:
    """The epic's state file among known workspace-relative paths (no disk: the daemon's
    query path), by the same rule as `epic_state_file`."""
    prefixes = tuple(f"{root}/epic-{epic_id}" for root in ROOTS)
    found = sorted(r for r in relpaths if r.startswith(prefixes) and is_epic_file_of(r, epic_id))
    found.sort(key=lambda r: not r.startswith(ROOT + "/"))
    return choose_epic_file(found, epic_id)


def _split(relpath: str) -> tuple[str, str, str] | None:
    """(root, epic folder, leaf) of <root>/<folder>/<leaf> for a root in ROOTS, else None."""
    for root in ROOTS:
        if relpath.startswith(root + "/"):
            rest = relpath[len(root) + 1 :].split("/")
            if len(rest) == 2:
                return root, rest[0], rest[1]
    return None


def is_epic_file_of(relpath: str, epic_id: str) -> bool:
    """Whether a workspace-relative path is <root>/epic-<id>[-slug]/execution-state.json."""
    parts = _split(relpath)
    return parts is not None and parts[2] == STATE_NAME and epic_of_folder(parts[1]) == epic_id


def other_place(relpath: str) -> str | None:
    """The same epic folder under the other root (plans/ <-> docs/stories/)."""
    parts = _split(relpath)
    if parts is None:
        return None
    other = OLD_ROOT if parts[0] == ROOT else ROOT
    return f"{other}/{parts[1]}/{parts[2]}"


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
    entries = (_entry(relpath, story_id, node) for story_id, node in stories.items())
    return [entry for entry in entries if entry is not None]


def story_node(top: dict[str, object], relpath: str, key: str) -> Entry | None:
    """The (story id, node or error text) `story_nodes` would give first for `key`, or
    None: the seed's shape (a `stories` object) by one look-up, the others by a scan."""
    stories = top.get("stories")
    if isinstance(stories, dict):
        return _entry(relpath, key, stories[key]) if key in stories else None
    return next((entry for entry in story_nodes(top, relpath) if entry[0] == key), None)


def _entry(relpath: str, story_id: str, node: object) -> Entry | None:
    """One story of a `stories` object: None when absent (jq's `// empty`: null, false)."""
    if node is None or node is False:
        return None
    if not isinstance(node, dict):
        return story_id, f"{relpath}: stories.{story_id}: expected an object, got {kind(node)}"
    return story_id, node


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


def _story_status(story_id: str, node: dict[str, object]) -> Finding | None:
    """The `unknown-story-status` finding: a story status outside the producer's vocabulary
    (daemon/core/lifecycle.py VOCABULARY), which `storyd epic` cannot classify."""
    status = node.get("status")
    if lifecycle.story_status_known(status):
        return None
    message = (
        f"{story_id}: story status {status!r} is not one the producer writes "
        f"({', '.join(lifecycle.story_words())}); storyd epic leaves it as recorded "
        "and will not run the story until it is one of those"
    )
    return finding("unknown-story-status", "warning", message)


def _twin(relpath: str, other: str) -> Finding:
    """The `epic-in-two-places` finding, for the units of either copy."""
    if relpath.startswith(ROOT + "/"):
        message = (
            f"this epic is also kept at {other}, the producer's older location; "
            f"--epic-id reads this file ({relpath})"
        )
    else:
        message = (
            f"{other} also exists and is the one --epic-id reads; this file, in the "
            "producer's older location, is read only by --state-file"
        )
    return finding("epic-in-two-places", "info", message)


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
    unknown = _story_status(story_id, node)
    if unknown is not None:
        findings.append(unknown)
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
    convention = (
        "x-internal-story-resume, plans/epic-XXXX[-slug]/execution-state.json "
        "(or the older docs/stories/epic-XXXX/)"
    )
    roots = ROOTS
    dialect_name = "EPIC"  # how reconcile writes these files
    codes = (  # every finding code it raises (docs/formats.md)
        "epic-in-two-places", "invalid-commit-sha", "story-finished", "unknown-story-status",
        "unknown-status"
    )

    def matches(self, relpath: str) -> bool:
        parts = _split(relpath)
        return parts is not None and parts[2] == STATE_NAME and epic_of_folder(parts[1]) is not None

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

    def load_one(self, source: Source, relpath: str, key: str | None) -> list[Unit]:
        """Only the asked story's unit is built, and only its story file probed; the
        seed's shape read a story at a time (storyd.core.jsonstream), never whole."""
        if key is None:
            return self.load(source, relpath)
        data, twin = _read_state(source, relpath)
        found: list[object] = []

        def keep(story_id: str, _text: str, _start: int, _end: int, node: object) -> None:
            if story_id == key:
                found.append(node)

        if members(data, "stories", keep) is not None:
            entry = _entry(relpath, key, found[0]) if found else None
        else:  # another shape, or an error: parsed whole, as the error names it
            entry = story_node(load_json_object(data, relpath), relpath, key)
        return [] if entry is None else [_built(source, relpath, *entry, twin)]

    def load_reusing(self, source: Source, relpath: str, reuse: Reuse | None) -> list[Unit]:
        """Every story's unit; with `reuse`, the unit built before for a story whose node
        is unchanged. The seed's shape is read a story at a time, its node alive only
        while it is looked at (storyd.core.jsonstream): an unchanged story is known by
        its text; a story whose text changed and data did not (a writer that reformats the
        file) is built, and its old unit kept."""
        data, twin = _read_state(source, relpath)
        units: list[Unit] = []

        def take(story_id: str, text: str, start: int, end: int, node: object) -> None:
            unit = (reuse.text(story_id, text[start:end])
                    if reuse is not None and isinstance(node, dict) else None)  # fmt: skip
            if unit is None or _twinned(unit):
                entry = _entry(relpath, story_id, node)
                if entry is None:
                    return  # absent (jq's `// empty`)
                unit = _built(source, relpath, *entry, twin)
                if reuse is not None:  # a file reformatted: the old unit, the new one freed
                    unit = reuse.made(story_id, unit)
            units.append(unit)

        if members(data, "stories", take, STORY_WHOLE) is not None:
            return units
        units.clear()  # another shape, or an error: parsed whole, as the error names it
        if reuse is not None:
            reuse.restart()
        for story_id, node in story_nodes(load_json_object(data, relpath), relpath):
            unit = reuse(story_id, node) if reuse is not None and isinstance(node, dict) else None
            if unit is None or _twinned(unit):
                unit = _built(source, relpath, story_id, node, twin)
            units.append(unit)
        return units

    def parse(self, data: bytes, relpath: str) -> list[Unit]:
        """The units of one state file's bytes, in file order."""
        top = load_json_object(data, relpath)
        return [_unit_or_error(relpath, sid, node) for sid, node in story_nodes(top, relpath)]


def _read_state(source: Source, relpath: str) -> tuple[bytes, Finding | None]:
    """The state file's bytes, read under the lock, and the `epic-in-two-places`
    finding when the epic is kept under the other root too."""
    data = source.read(relpath, STATE_NAME)
    other = other_place(relpath)
    twin = _twin(relpath, other) if other is not None and source.exists(other) else None
    return data, twin


def _twinned(unit: Unit) -> bool:
    """Built when the epic's other copy existed: built afresh either way."""
    return any(f.code == "epic-in-two-places" for f in unit.findings)


def _built(source: Source, relpath: str, story_id: str, node: dict[str, object] | str,
           twin: Finding | None) -> Unit:
    """One story's unit built afresh: its story file located, the twin finding added."""
    unit = _unit_or_error(relpath, story_id, node)
    _locate_story_file(source, unit)
    if twin is not None:
        unit.findings = (*unit.findings, twin)
    return unit


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
