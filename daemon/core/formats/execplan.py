"""The `execplan` format: OpenAI Codex ExecPlans, the living plan files `.agent/PLANS.md`
tells an agent to keep (`.agent/plans/`, `.agent/execplans/`, `plans/`, `docs/plans/`,
`docs/exec-plans/[<state>/]`, `docs/execplans/`).

An ExecPlan's mandatory `## Progress` section is "the only place checklists are allowed":
its checkbox lines are the tasks (`#1`, `#2`... by position: items are prose, not ids),
each ticked step stamped `- [x] (2025-10-01 13:00Z) ...`, partial work written `(completed:
X; remaining: Y)` on an open line. The next task is the first open step ("proceed to the
next milestone"). A file there without a Progress section is not an ExecPlan and is
refused; PLANS.md itself holds the rules, not a plan (a companion: label `guide`). A plan
under a `done`/`completed`/`archive` folder is finished: not in flight. docs/formats.md.
"""

from __future__ import annotations

import os

from storyd.core.errors import DataError
from storyd.core.formats.base import Adapter, Source, finding
from storyd.core.formats.checklist import boxes
from storyd.core.formats.common import ALL_DONE, FRESH_START, progress, text_of
from storyd.core.model import DONE, PENDING, Finding, Task, Unit

__all__ = ["ADAPTER", "ExecPlanAdapter", "parse", "stamp"]

FOLDERS = (".agent/plans", ".agent/execplans", "plans", "docs/plans", "docs/exec-plans",
           "docs/execplans")  # fmt: skip
GUIDES = (".agent/PLANS.md", "PLANS.md")
FINISHED = frozenset(("done", "completed", "complete", "archive", "archived", "finished"))
LIVING = ("surprises and discoveries", "decision log", "outcomes and retrospective")
_TICKED = frozenset("xX")


def stamp(text: str) -> tuple[str | None, str]:
    """A step's leading timestamp, `(2025-12-30 23:25Z)`, `(2026-02-07)`,
    `(2026-01-27 10:44-08:00)`, as ISO text (None: none, or `(TBD)`), and the rest."""
    if not text.startswith("("):
        return None, text
    close = text.find(")")
    if close < 0:
        return None, text
    inner, rest = text[1:close].strip(), text[close + 1 :].strip()
    date = inner[:10]
    if not (len(date) == 10 and date[4] == date[7] == "-"
            and date.replace("-", "").isdigit()):  # fmt: skip
        return None, rest if inner.lower() in ("tbd", "pending", "todo") else text
    when = inner[10:].strip()
    return (date + ("T" + when.replace(" ", "") if when else "")), rest


def _level(line: str) -> int:
    return len(line) - len(line.lstrip("#"))


def _sections(text: str) -> tuple[dict[str, tuple[int, int]], list[str]]:
    """Each heading's lower-cased text -> (first line, end line) of its section, and the
    text's lines; headings in code fences are not headings."""
    lines = text.splitlines()
    heads: list[tuple[int, int, str]] = []
    fenced = False
    for index, line in enumerate(lines):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and line.startswith("#") and line[_level(line):_level(line) + 1] == " ":
            title = line.lstrip("#").strip().rstrip(":").lower().replace("&", "and")
            heads.append((index, _level(line), " ".join(title.split())))
    found: dict[str, tuple[int, int]] = {}
    for n, (index, level, title) in enumerate(heads):
        end = next((i for i, lv, _ in heads[n + 1 :] if lv <= level), len(lines))
        found.setdefault(title, (index + 1, end))
    return found, lines


def parse(text: str, relpath: str) -> tuple[list[Task], list[Finding]]:
    """The Progress steps of an ExecPlan and what the file shows; DataError when it has
    no Progress section (not an ExecPlan)."""
    sections, lines = _sections(text)
    if "progress" not in sections:
        msg = (f"{relpath}: not an ExecPlan: it has no `## Progress` section, which "
               "PLANS.md makes mandatory")
        raise DataError(msg)
    start, end = sections["progress"]
    tasks: list[Task] = []
    findings: list[Finding] = []
    unstamped = []
    for box in boxes("\n".join(lines[start:end])):
        if box.mark not in _TICKED and box.mark != " ":
            continue
        line = start + box.line
        ident = f"#{len(tasks) + 1}"
        when, rest = stamp(box.text.strip())
        ticked = box.mark in _TICKED
        partial = not ticked and "remaining:" in rest.lower()
        status = "done" if ticked else "partial" if partial else "open"
        extra: dict[str, object] = {"line": line, "description": rest, "stamp": when}
        tasks.append(Task(ident, status, DONE if ticked else PENDING,
                          completed_at=when if ticked else None, extra=extra))
        if ticked and when is None:
            unstamped.append(ident)
    if unstamped:
        message = (f"{len(unstamped)} ticked Progress step(s) ({', '.join(unstamped[:10])}) "
                   "carry no timestamp: PLANS.md stamps each, `- [x] (2025-10-01 13:00Z) ...`")
        findings.append(finding("unstamped-step", "info", message))
    inside = range(start, end)
    outside = [b.line for b in boxes(text) if b.line - 1 not in inside]
    if outside:
        shown = ", ".join(map(str, outside[:10]))
        message = (f"{len(outside)} checkbox line(s) outside Progress (line {shown}): "
                   "PLANS.md allows checklists only there; they are not steps")
        findings.append(finding("checklist-outside-progress", "info", message))
    missing = [name for name in LIVING if name not in sections]
    if missing:
        message = f"living section(s) missing: {', '.join(missing)} (PLANS.md: mandatory)"
        findings.append(finding("missing-living-section", "info", message))
    if not tasks:
        findings.append(finding("no-tasks", "info", f"{relpath}: Progress holds no step"))
    return tasks, findings


class ExecPlanAdapter(Adapter):
    """ExecPlan files in the plan folders, one unit per plan."""

    name = "execplan"
    convention = ("Codex ExecPlans (.agent/PLANS.md), plans in .agent/plans/, "
                  ".agent/execplans/, plans/, docs/plans/, docs/exec-plans/")
    roots = (".agent", "plans", "docs/plans", "docs/exec-plans", "docs/execplans")
    records_commits = False  # steps are prose: no commit can name one
    codes = ("archived-with-open-tasks", "checklist-outside-progress", "missing-living-section",
             "no-tasks", "unstamped-step")

    def matches(self, relpath: str) -> bool:
        if not relpath.endswith(".md") or os.path.basename(relpath) in ("PLANS.md",):
            return False
        folder, _, name = relpath.rpartition("/")
        if not name or name.startswith((".", "_")) or name.lower() == "readme.md":
            return False
        if folder in FOLDERS:
            return True
        parent, _, state = folder.rpartition("/")
        return parent == "docs/exec-plans" and bool(state) and not state.startswith((".", "_"))

    def owner(self, relpath: str) -> str | None:
        return relpath if self.matches(relpath) else None

    def load(self, source: Source, relpath: str) -> list[Unit]:
        tasks, findings = parse(text_of(source.read(relpath, os.path.basename(relpath))),
                                relpath)
        folder = relpath.rpartition("/")[0]
        finished = folder.rpartition("/")[2].lower() in FINISHED
        open_ = [t for t in tasks if t.bucket != DONE]
        key = os.path.basename(relpath)[:-3]
        labels = {"plan": key, "progress": progress(tasks)}
        guide = next((g for g in GUIDES if source.exists(g)), None)
        if guide is not None:
            labels["guide"] = guide
        nxt = None
        if finished:
            labels["finished"] = folder
            if open_:
                message = (f"{relpath} sits in {folder}/ (finished) with {len(open_)} of "
                           f"{len(tasks)} Progress steps open: the folder says done, the "
                           "Progress list does not; the plan is read as finished, not in flight")
                findings.append(finding("archived-with-open-tasks", "warning", message))
            point = ALL_DONE
        elif not open_:
            point = ALL_DONE if tasks else FRESH_START
        else:
            first = open_[0]
            nxt = {"task": first.id, "why": "the first open Progress step (an ExecPlan's "
                   "steps run in order: proceed to the next milestone)",
                   "status": first.status, "line": first.extra["line"],
                   "description": first.extra["description"]}
            started = len(open_) < len(tasks) or first.status == "partial"
            point = f"task-{first.id}" if started else FRESH_START
        return [Unit("execplan", relpath, key, tuple(tasks), resume_point=point,
                     findings=tuple(findings), labels=labels, next=nxt)]


ADAPTER = ExecPlanAdapter()
