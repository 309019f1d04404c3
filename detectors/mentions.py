"""task-named: commits that name a task the state file does not show done.

For the formats whose files carry no commit sha (spec-kit, Kiro, Task Master, beads),
git's only evidence is the commit message, in each producer's own way of naming tasks:

    spec-kit     `T004`, ranges `T004-T021` and with an en dash (U+2013), `T007/T008`
    Task Master  `(Task 17.4)`, `tasks 13.2, 13.3`, `complete task 7.4`, the `Task: 12`
                 trailer of its autopilot commits
    Kiro         `task 3.2`, `(Task 11)`, `mark task 19 as complete`
    beads        the issue id as a word: `(bd-abc)`, `frankenredis-tjf1: ...`
    OpenSpec     `task 2.3` in a commit that also names the change (`add-auto-fix-pr`):
                 commits name the change, task numbers repeat across changes
    Backlog.md   `task-10`, `BACK-569`, `NAS-18` as a word, case and zero padding aside
    BMAD         `Story 4.7`, `(story 6-2)`, a story key `3-12-source-picker`: the story
                 whose key has that number
    GSD          `phase 9`, `docs(phase-09)`: that phase; `feat(18-01)`, `complete plan
                 08-02`: that plan (zero padding aside; `2026-03-15` is a date, no plan)
    Claude Code  `(Task 10)` as Task Master's; a key the task's subject opens with
    task lists   (`F02: Lokale Datenbank` is named by `F02, F05, F16 implementiert`)

    claimed-in-commit  warning  a commit that says it completed the task (feat/fix,
                                "complete", "done", "close", "implement", a range) while
                                the task is not done
    named-in-commit    info     a commit that only mentions it (`T017 passes, T018 does
                                not`): not proof, never ticked by reconcile

A task done with no commit naming it is never a finding: these files record no sha.
The newest naming commit of the tip's recent ones (since the merge-base with the
default branch, else `scan_depth`, default 200) is the evidence.
"""

from __future__ import annotations

from storyd.core.model import Finding, Task, Unit
from storyd.detectors import Context
from storyd.detectors.codes import CODES
from storyd.detectors.common import git_failed, int_option, short, str_option, tip_name
from storyd.detectors.gitview import Commit, GitError

__all__ = ["DETECTOR", "FORMATS", "MentionsDetector", "claims_done", "named_ids", "subject_keys"]

NAME = "task-named"
FORMATS = frozenset(("spec-kit", "kiro", "task-master", "beads", "openspec", "backlog-md",
                     "bmad", "gsd", "claude-tasks"))
DEFAULT_SCAN_DEPTH = 200
_SUBJECT = 72
# Patterns as text: `re` compiles each on its first use and keeps it (its own cache), so
# a scan of a workspace without these formats never compiles them (1 ms of a hook).
_SPEC_ID = (  # a hyphen, an en dash or an em dash between the two ends
    "(?<![\\w-])(T\\d+[a-z]?)(?:\\s*[-\u2013\u2014]\\s*(T\\d+[a-z]?))?(?![\\w-])"
)
_NUMBERED = r"(?i)\btasks?\b[\s:#]*(\d+(?:\.\d+)*)((?:\s*(?:,|&|and|/)\s*#?\d+(?:\.\d+)*)*)"
_MORE = r"\d+(?:\.\d+)*"
_WORDS = r"[\w.-]+"
_SUBJECT_KEY = r"^\s*([A-Za-z]{1,10}-?\d+[a-z]?)\s*[:\u2013\u2014]"  # `F02: ...`, `AUTH-3 — ...`
_BACKLOG_ID = r"(?i)(?<![\w.-])([a-z][\w]*-\d+(?:\.\d+)*)(?![\w-])"
_STORY = r"(?i)\bstor(?:y|ies)\b[\s:#]*(\d+)[.-](\d+[a-z]?)(?![\w.])"
_STORY_KEY = r"(?<![\w.-])(\d+)-(\d+[a-z]?)-[^\W\d_]"
_PHASE = r"(?i)\bphase[\s:#-]*(\d+(?:\.\d+)*)(?![\w.])"
_PLAN = r"(?<![\w.-])(\d+(?:\.\d+)?-\d+[a-z]?)(?![\w-]|\.\d)"
_CLAIM = (
    r"(?i)^(?:feat|fix|perf|refactor|test|build|chore|docs)\b|\b(?:complete[sd]?|completing|"
    r"done|finish(?:e[sd])?|close[sd]?|closing|implement(?:s|ed)?|resolve[sd]?|mark(?:s|ed)?\b.*"
    r"\b(?:complete|done))\b"
)
_HEDGE = (
    r"(?i)\b(?:not|n't|wip|partial(?:ly)?|part of|start(?:s|ed)?|begin|todo|revert|"
    r"defer(?:s|red)?)\b"
)


def _spec_number(task_id: str) -> tuple[int, str]:
    digits = "".join(c for c in task_id[1:] if c.isdigit())
    return int(digits or 0), task_id[1 + len(digits):]


def named_ids(format: str, message: str, known: set[str],
              aliases: dict[str, str] | None = None) -> set[str]:  # fmt: skip
    """The ids of `known` that a commit message names, in the format's own way (`aliases`:
    for Claude Code's lists, the upper-cased key each task's subject opens with -> id)."""
    import re  # here, not at the top: a hook that scans no such format imports none

    found: set[str] = set()
    if format == "claude-tasks":
        if aliases:
            found.update(aliases[a] for w in re.findall(_WORDS, message.upper())
                         if (a := w.rstrip(".")) in aliases)
        format = "task-master"  # `(Task 10)`: the id is the number
    if format == "spec-kit":
        for first, last in re.findall(_SPEC_ID, message):
            if not last:
                found.add(first)
                continue
            low, high = _spec_number(first)[0], _spec_number(last)[0]
            found.update(k for k in known if k[:1] == "T" and k[1:2].isdigit()
                         and low <= _spec_number(k)[0] <= high)
    elif format == "backlog-md":  # `TASK-038` is `task-38`: compared as Backlog.md does
        from storyd.core.formats.backlogmd import id_key

        keys = {id_key(k): k for k in known}
        found.update(keys[k] for w in re.findall(_BACKLOG_ID, message)
                     if (k := id_key(w)) is not None and k in keys)
    elif format == "bmad":  # the story's number, from its key
        from storyd.core.formats.bmad import story_number

        numbers = {story_number(k): k for k in known}
        for epic, story in [*re.findall(_STORY, message), *re.findall(_STORY_KEY, message)]:
            key = numbers.get(f"{int(epic)}.{int(story.rstrip('abcdefghijklmnopqrstuvwxyz'))}"
                              f"{story.lstrip('0123456789')}")
            if key is not None:
                found.add(key)
    elif format == "gsd":
        from storyd.core.formats.gsd import phase_number, plan_id

        found.update(f"phase-{phase_number(n)}" for n in re.findall(_PHASE, message))
        found.update(plan_id(p) for p in re.findall(_PLAN, message))
    elif format in ("task-master", "kiro", "openspec"):
        for head, tail in re.findall(_NUMBERED, message):
            found.add(head)
            found.update(re.findall(_MORE, tail))
    else:  # beads: the id itself, as a word (`bd-abc`, `agent-island-39w.1`)
        found.update(w.rstrip(".") for w in re.findall(_WORDS, message))
    return found & known


def subject_keys(tasks: tuple[Task, ...] | list[Task]) -> dict[str, str]:
    """Claude Code's tasks: the key a subject opens with (`F02: ...`), upper-cased -> id."""
    import re

    keys: dict[str, str] = {}
    for task in tasks:
        subject = task.extra.get("subject")
        if isinstance(subject, str) and (m := re.match(_SUBJECT_KEY, subject)):
            keys.setdefault(m.group(1).upper(), task.id)
    return keys


def claims_done(message: str) -> bool:
    """Whether a commit's subject says it finished work (not a hedge, a start, a revert)."""
    import re

    subject = message.strip().split("\n", 1)[0]
    return bool(re.search(_CLAIM, subject)) and not re.search(_HEDGE, subject)


def _subject(commit: Commit) -> str:
    line = commit.message.strip().split("\n", 1)[0].strip()
    return line if len(line) <= _SUBJECT else line[: _SUBJECT - 1] + "…"


class MentionsDetector:
    """Finds commits naming tasks a sha-less task list still shows open."""

    name = NAME
    codes = CODES[NAME]  # every finding code it raises

    def check(self, unit: Unit, context: Context) -> list[Finding]:
        """Findings for open tasks that the tip's recent commits name."""
        git = context.git
        if git is None or unit.format not in FORMATS or all(t.done for t in unit.tasks):
            return []
        try:
            tip = tip_name(unit, context, git)
            tip_sha = git.tip_sha(tip)
            if tip_sha is None:
                return []
            default = str_option(context.options, "default_branch") or git.default_branch()
            base = git.scan_base(tip_sha, default)
            depth = int_option(context.options, "scan_depth", DEFAULT_SCAN_DEPTH)
            commits = git.commits(tip_sha, base, depth)
        except GitError as exc:
            return [git_failed(NAME, exc)]
        return _findings(unit, commits, tip)


def _findings(unit: Unit, commits: list[Commit], tip: str) -> list[Finding]:
    open_ids = {t.id for t in unit.tasks if not t.done}
    aliases = subject_keys(unit.tasks) if unit.format == "claude-tasks" else None
    claimed: dict[str, Commit] = {}
    named: dict[str, Commit] = {}
    for commit in commits:  # newest first: the first commit naming an id is its newest
        if unit.format == "openspec" and unit.key.lower() not in commit.message.lower():
            continue  # `task 1.2` of another change
        ids = named_ids(unit.format, commit.message, open_ids, aliases)
        into = claimed if claims_done(commit.message) else named
        for task_id in ids:
            into.setdefault(task_id, commit)
    findings = []
    for task in unit.tasks:
        if (claim := claimed.get(task.id)) is not None:
            message = _message(claim, tip, "says it completed", task, unit)
            evidence = {"commit": claim.sha, "tip": tip}
            findings.append(Finding(NAME, "claimed-in-commit", "warning", message, task.id,
                                    evidence))
        elif (mention := named.get(task.id)) is not None:
            message = _message(mention, tip, "names", task, unit)
            evidence = {"commit": mention.sha, "tip": tip}
            findings.append(Finding(NAME, "named-in-commit", "info", message, task.id, evidence))
    return findings


def _message(commit: Commit, tip: str, says: str, task: Task, unit: Unit) -> str:
    return (f'commit {short(commit.sha)} "{_subject(commit)}" on {tip} {says} task '
            f"{task.id}, which is still {task.status} in {unit.state_file}")


DETECTOR = MentionsDetector()
