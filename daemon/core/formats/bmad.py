"""The `bmad` format: BMAD-METHOD's `sprint-status.yaml` and the story files beside it.

The unit is the sprint (key `sprint`, state file `sprint-status.yaml`); every key of
`development_status:` that BMAD's sprint_plan.py reads as a story (`^(\\d+)-(\\d+)([a-z]?)-.+`)
is a task, in file order. `epic-N` and `epic-N-retrospective` keys are the epics' and
retrospectives' own statuses (labels and findings, not tasks); any other key is
"unrecognized" (a finding). Story statuses: backlog, ready-for-dev, in-progress, review,
done (and v6's drafted, contexted, mapped to ready-for-dev and in-progress); done is `done`.
The next story is sprint_plan.py's recommendation: the first in-progress (resume), else the
first review (code review), else the first ready-for-dev (dev-story), else the first
backlog (create-story). A story file (`<key>.md`, also `story-<key>.md`) carries a second
ledger, its `Status:` line; where it disagrees with sprint-status.yaml, a finding names
both: BMAD's workflows read sprint-status.yaml (dev-story picks from it; regeneration
never downgrades it), so that is the status storyd takes. docs/formats.md.
"""

from __future__ import annotations

import os

from storyd.core.errors import DataError, StorydError
from storyd.core.formats.base import Adapter, Source, finding, make_task
from storyd.core.formats.common import ALL_DONE, FRESH_START, progress_labels, text_of
from storyd.core.formats.plainread import PlainReader
from storyd.core.formats.yamlsubset import YamlError, nested
from storyd.core.model import DONE, Finding, Task, Unit

__all__ = ["ADAPTER", "STATE_FILES", "BmadAdapter", "story_number", "story_status"]

NAME = "sprint-status.yaml"
KEY = "sprint"
STATE_FILES = (
    "_bmad-output/implementation-artifacts/sprint-status.yaml",
    "docs/sprint-status.yaml",
    "docs/sprint-artifacts/sprint-status.yaml",
    "docs/implementation-artifacts/sprint-status.yaml",
    "docs/bmad/process/sprint-status.yaml",
)
STORY_STATUSES = ("backlog", "ready-for-dev", "in-progress", "review", "done")
LEGACY = {"drafted": "ready-for-dev", "contexted": "in-progress"}
_RANK = {s: i for i, s in enumerate(STORY_STATUSES)}
_DONE = frozenset(("done",))
_PENDING = frozenset((*STORY_STATUSES[:-1], *LEGACY))
_EPIC = frozenset(("backlog", "in-progress", "done", "contexted"))
_RETRO = frozenset(("optional", "done", "completed"))
_NEXT = (  # sprint_plan.py `status`: its order, the workflow it names
    ("in-progress", "in progress: resumed first (dev-story resumes in-progress stories)"),
    ("review", "in review: code review comes before new development"),
    ("ready-for-dev", "the first ready-for-dev story from the top (dev-story)"),
    ("backlog", "no story is in progress, in review or ready: the first backlog story "
                "from the top is the next to create (create-story)"),
)
HEAD_BYTES = 16384  # a story file's head, where its Status: line is (the largest real: line 6)
_SHOWN = 8


def story_number(key: str) -> str | None:
    """`3-12-source-picker` -> `3.12`, `2-9a-multi` -> `2.9a`: a story key's number, as its
    file's title and commits write it; None for any other key (sprint_plan.py's grammar)."""
    parts = key.split("-", 2)
    if len(parts) < 3 or not parts[2]:
        return None
    epic, story = parts[0], parts[1]
    letter = story[-1:] if story[-1:].isalpha() and story[-1:].islower() else ""
    digits = story[: len(story) - len(letter)]
    if not (epic.isascii() and epic.isdigit() and digits.isascii() and digits.isdigit()):
        return None
    return f"{int(epic)}.{int(digits)}{letter}"


def story_status(text: str) -> tuple[str, int] | None:
    """A story file's `Status:` line (also `**Status:** x`) before its first `## `
    section: the status, lower-cased, and its line; None when the file has none."""
    for number, raw in enumerate(text.split("\n", 40)[:40], 1):
        line = raw.rstrip("\r")
        if line.startswith("## "):
            return None
        bare = line.replace("**", "").strip()
        if bare[:7].lower() == "status:":
            value = bare[7:].strip().strip("`*_ ")
            return (value.split()[0].lower(), number) if value else None
    return None


def _rank(status: str) -> int:
    return _RANK.get(LEGACY.get(status, status), -1)


class _Stories:
    """The story files a sprint's keys may have: one listing per folder, read lazily."""

    def __init__(self, reader: PlainReader, relpath: str, location: object) -> None:
        here = os.path.dirname(relpath)
        folders = [here, f"{here}/stories", "docs/stories"]
        if isinstance(location, str):
            local = location.replace("{project-root}/", "").strip().strip("/")
            if local and not os.path.isabs(location) and ".." not in local.split("/"):
                folders.insert(0, local)
        self.reader = reader
        source = reader.source
        self.names: dict[str, str] = {}
        for folder in dict.fromkeys(folders):
            try:
                listed = os.listdir(source.path(folder))
            except (OSError, ValueError):
                continue
            for name in sorted(listed):
                if name.endswith(".md"):
                    stem = name[:-3]
                    key = stem[6:] if stem.startswith("story-") else stem
                    self.names.setdefault(key, f"{folder}/{name}")

    def status(self, key: str) -> tuple[str, str, int] | None:
        """The story file of `key`, its Status: and the line; None without one."""
        path = self.names.get(key)
        if path is None:
            return None
        try:
            data = self.reader.read(path, os.path.basename(path), HEAD_BYTES)
        except StorydError:
            return None
        got = story_status(text_of(data))  # the Status: line is at the top
        return None if got is None else (path, got[0], got[1])


def _fields(reader: PlainReader, relpath: str) -> tuple[dict[str, object], dict[str, str]]:
    text = text_of(reader.read(relpath, NAME))
    try:
        fields = nested(text)
    except YamlError as exc:
        msg = (f"{relpath}: {exc} (storyd reads the YAML BMAD writes: `key: value` lines "
               "and the indented ones under development_status)")
        raise DataError(msg) from None
    status = fields.get("development_status")
    if not isinstance(status, dict):
        msg = (f"{relpath}: not a BMAD sprint status: it has no `development_status:` "
               "mapping of story keys to statuses")
        raise DataError(msg)
    return dict(fields), {k: (v or "").strip() for k, v in status.items()
                          if isinstance(v, str) or v is None}


class BmadAdapter(Adapter):
    """sprint-status.yaml with its story files: one unit, the sprint."""

    name = "bmad"
    convention = ("BMAD-METHOD, _bmad-output/implementation-artifacts/sprint-status.yaml "
                  "(docs/sprint-status.yaml, docs/sprint-artifacts/) with <story-key>.md files")
    roots = ("_bmad-output/implementation-artifacts", "docs")
    records_commits = False  # commits name `Story 4.7` or `story 6-2`: task-named
    codes = ("epic-done-with-open-stories", "epic-not-started", "no-next-story",
             "status-disagrees", "unknown-status", "unrecognized-key")

    def matches(self, relpath: str) -> bool:
        return relpath in STATE_FILES

    def owner(self, relpath: str) -> str | None:
        if relpath in STATE_FILES:
            return relpath
        folder, _, name = relpath.rpartition("/")
        if not name.endswith(".md") or "" in folder.split("/"):
            return None
        for state in STATE_FILES:
            here = os.path.dirname(state)
            if folder in (here, f"{here}/stories") or (
                    folder == "docs/stories" and here == "docs"):
                return state
        return None

    def load(self, source: Source, relpath: str) -> list[Unit]:
        reader = PlainReader(source)  # storyd never writes BMAD's files
        fields, status = _fields(reader, relpath)
        findings: list[Finding] = []
        stories = _Stories(reader, relpath, fields.get("story_location"))
        tasks: list[Task] = []
        epics: dict[str, str] = {}
        retros: dict[str, str] = {}
        other: list[str] = []
        for key, raw in status.items():
            number = story_number(key)
            if number is None:
                head, _, tail = key.partition("-")
                if head == "epic" and tail.isdigit():
                    epics[tail] = raw.lower()
                elif head == "epic" and tail.endswith("-retrospective") \
                        and tail[:-14].isdigit():  # fmt: skip
                    retros[tail[:-14]] = raw.lower()
                else:
                    other.append(f"{key}: {raw}")
                continue
            task, unknown = make_task(key, raw, done=_DONE, pending=_PENDING, default="backlog",
                                      extra={"story": number, "epic": number.split(".")[0]})
            if unknown is not None:
                findings.append(unknown)
            got = stories.status(key)
            if got is not None:
                task.extra["file"] = got[0]
                task.extra["fileStatus"] = got[1]
                findings.extend(_ledgers(relpath, task, got))
            tasks.append(task)
        if other:
            message = (f"{len(other)} key(s) of development_status are neither epics, "
                       f"stories nor retrospectives ({'; '.join(other[:_SHOWN])}): BMAD's "
                       "sprint_plan.py reports them unrecognized; storyd does not count them")
            findings.append(finding("unrecognized-key", "info", message))
        findings.extend(_epic_findings(relpath, epics, tasks))
        return [_unit(relpath, tasks, epics, retros, findings)]


def _ledgers(relpath: str, task: Task, got: tuple[str, str, int]) -> list[Finding]:
    """The story file's Status: line against sprint-status.yaml's value for the story."""
    path, written, line = got
    sprint = task.status.lower()
    if written == sprint:
        return []
    evidence = {"sprintStatus": sprint, "storyStatus": written, "storyFile": path}
    if _rank(written) == _rank(sprint) >= 0:
        message = (f"story {task.extra['story']} ({task.id}) is {sprint!r} in {relpath} and "
                   f"{written!r} in {path} (Status: line {line}): one stage under two words "
                   "(BMAD maps v6's drafted to ready-for-dev, contexted to in-progress)")
        return [finding("status-disagrees", "info", message, task.id, evidence)]
    ahead = "behind" if _rank(written) < _rank(sprint) else "ahead of"
    message = (f"story {task.extra['story']} ({task.id}) is {sprint!r} in {relpath} but "
               f"{written!r} in {path} (Status: line {line}), {ahead} it: BMAD's workflows read "
               f"sprint-status.yaml (dev-story picks from it; regeneration never downgrades "
               f"it), so storyd takes {sprint!r}")
    return [finding("status-disagrees", "warning", message, task.id, evidence)]


def _epic_findings(relpath: str, epics: dict[str, str], tasks: list[Task]) -> list[Finding]:
    found: list[Finding] = []
    by_epic: dict[object, list[Task]] = {}
    for task in tasks:
        by_epic.setdefault(task.extra["epic"], []).append(task)
    for epic, state in epics.items():
        mine = by_epic.get(epic, [])
        open_ = [t.id for t in mine if t.bucket != DONE]
        if state == "done" and open_:
            message = (f"epic-{epic} is 'done' in {relpath} but {len(open_)} of its stories "
                       f"are not ({', '.join(open_[:_SHOWN])}): an epic is done when all its "
                       "stories are")
            found.append(finding("epic-done-with-open-stories", "warning", message))
        started = [t.id for t in mine if _rank(t.status.lower()) >= _RANK["in-progress"]]
        if state == "backlog" and started:
            message = (f"epic-{epic} is still 'backlog' in {relpath} while {started[0]} has "
                       "started: BMAD lifts the epic to in-progress when its first story starts")
            found.append(finding("epic-not-started", "info", message))
        if state not in _EPIC and state != "in_progress":
            message = f"unknown status {state!r} for epic-{epic}"
            found.append(finding("unknown-status", "warning", message))
    return found


def _unit(relpath: str, tasks: list[Task], epics: dict[str, str], retros: dict[str, str],
          findings: list[Finding]) -> Unit:  # fmt: skip
    nxt: dict[str, object] | None = None
    for wanted, why in _NEXT:
        first = next((t for t in tasks if t.known
                      and LEGACY.get(t.status.lower(), t.status.lower()) == wanted), None)
        if first is not None:
            nxt = {"task": first.id, "why": why, "status": first.status,
                   "story": first.extra["story"], "epic": first.extra["epic"],
                   "file": first.extra.get("file")}
            break
    if tasks and all(t.bucket == DONE for t in tasks):
        point = ALL_DONE
    elif nxt is None:
        point = "blocked" if tasks else FRESH_START
        odd = sorted({t.status for t in tasks if t.bucket != DONE})
        if tasks:
            message = (f"no story is in progress, in review, ready or in the backlog: the "
                       f"open ones have statuses BMAD's workflows never pick ({', '.join(odd)})")
            findings.append(finding("no-next-story", "warning", message))
    elif not any(t.bucket == DONE for t in tasks) and nxt["status"] == "backlog":
        point = FRESH_START
    else:
        point = f"task-{nxt['task']}"
    labels = progress_labels(tasks, [*STORY_STATUSES, *LEGACY])
    labels["epics"] = ", ".join(f"{n}:{s}" for n, s in epics.items())
    finished = [n for n, s in epics.items() if s == "done"]
    labels["finishedEpics"] = str(len(finished))
    open_retros = [n for n, s in retros.items() if s not in ("done", "completed")
                   and epics.get(n) == "done"]
    if open_retros:
        labels["openRetrospectives"] = ", ".join(f"epic-{n}" for n in open_retros)
    return Unit("bmad", relpath, KEY, tuple(tasks), resume_point=point,
                findings=tuple(findings), labels=labels, next=nxt)


ADAPTER = BmadAdapter()
