"""The `gsd` format: GSD's (get-shit-done) `.planning/STATE.md`, with `ROADMAP.md`, the
phase folders' `NN-MM-PLAN.md`/`NN-MM-SUMMARY.md` and `HANDOFF.json` beside it.

The unit is the project (key `project`, state file `.planning/STATE.md`). Its tasks, in
phase order, are each phase's plans (`N-MM`) followed by the phase itself (`phase-N`,
from ROADMAP.md's `- [ ] **Phase N: Name**` list, else the phase folders, else
STATE.md's `Phase: X of Y`), the order the work completes in. A plan is done when its
`NN-MM-SUMMARY.md` exists (execute-phase skips plans that have one); a phase when all
its plans are, or, with no plan files on disk, when ROADMAP.md ticks it; a phase inside
a collapsed `<details>` milestone is archived: finished, not in flight. STATE.md names
the current position (`Phase:`, `Plan:`, `Status:`, and the tool-written front matter);
the next task follows resume-project's order: HANDOFF.json (paused work, resumed first),
a `.continue-here` file, a plan without a summary, then the current phase (plan it, or
move on when it is complete). Where STATE.md and ROADMAP.md disagree about the current
phase, a finding names both: GSD reads STATE.md first in every workflow, so its position
is the one storyd takes.
docs/formats.md.
"""

from __future__ import annotations

import os

from storyd.core.errors import DataError, StorydError
from storyd.core.formats.base import Adapter, Source, finding, nameable, walk
from storyd.core.formats.common import ALL_DONE, FRESH_START, as_int, one_line, text_of
from storyd.core.formats.yamlsubset import YamlError, nested
from storyd.core.jsonio import JSONError, loads
from storyd.core.model import DONE, PENDING, Finding, Task, Unit

__all__ = ["ADAPTER", "GsdAdapter", "Roadmap", "normal_state_status", "phase_number",
           "plan_id", "position"]

ROOT = ".planning"
STATE = ".planning/STATE.md"
ROADMAP = ".planning/ROADMAP.md"
HANDOFF = ".planning/HANDOFF.json"
PHASES = ".planning/phases"
KEY = "project"
# Patterns as text: `re` compiles each on first use and keeps it; a hook that reads no
# GSD project never imports `re` (tests/test_hook_imports.py)
_PHASE_LINE = r"^\s*[-*] \[([ xX])\] \**Phase (\d+(?:\.\d+)*)\b"
_PLAN_LINE = r"^\s*[-*] \[([ xX])\] (\d+(?:\.\d+)*-\d+[a-z]?)\b"
_PLAN_FILE = r"^(\d+(?:\.\d+)*-\d+[a-z]?)-(PLAN|SUMMARY)\.md$"
_POSITION_KEYS = {"current phase": "Phase", "current plan": "Plan", "phase": "Phase",
                  "plan": "Plan", "status": "Status", "last activity": "Last activity",
                  "stopped at": "Stopped at", "resume file": "Resume file"}
_SHOWN = 8


def phase_number(text: str) -> str | None:
    """The phase a text starts with, leading zeros dropped: `08 (x)` -> `8`, `41.1` ->
    `41.1`, `14-animation-engine` -> `14`; None when it starts with no number."""
    import re

    found = re.match(r"\s*(\d+(?:\.\d+)*)", text)
    if found is None:
        return None
    return ".".join(str(int(p)) for p in found.group(1).split("."))


def plan_id(text: str) -> str:
    """A plan id with its phase part unpadded, `08-03` -> `8-03`: one spelling for the
    folder's `08-03-PLAN.md`, ROADMAP.md's `8-03` and a commit's `feat(08-03)`."""
    phase, _, plan = text.rpartition("-")
    return f"{phase_number(phase) or phase}-{plan}"


def normal_state_status(text: str) -> str:
    """normalizeStateStatus: the front matter's `status` from STATE.md's Status text."""
    low = text.lower()
    if not low.strip():
        return "unknown"
    for words, word in ((("paused", "stopped"), "paused"),
                        (("executing", "in progress", "ready to execute"), "executing"),
                        (("planning", "ready to plan"), "planning"),
                        (("discussing",), "discussing"), (("verif",), "verifying"),
                        (("complete", "done"), "completed")):
        if any(w in low for w in words):
            return word
    return text.strip()


def position(body: str) -> dict[str, str]:
    """STATE.md's `## Current Position` (and `## Session Continuity`) lines, `Key: value`
    or table rows `| **Key** | value |`, under GSD's own key names."""
    found: dict[str, str] = {}
    section = ""
    for line in body.splitlines():
        if line.startswith("## "):
            section = line[3:].strip().lower()
            continue
        if section not in ("current position", "session continuity"):
            continue
        text = line.strip()
        if text.startswith("|"):
            cells = [c.strip().strip("*").strip() for c in text.strip("|").split("|")]
            if len(cells) < 2:
                continue
            name, value = cells[0], cells[1]
        else:
            name, colon, value = text.replace("**", "").partition(":")
            if not colon:
                continue
        key = _POSITION_KEYS.get(name.strip().lower())
        if key is not None and key not in found:
            found[key] = value.strip().strip("`").strip()
    return found


class Roadmap:
    """ROADMAP.md's phase list and plan lines: ticks, and which sit in `<details>`."""

    def __init__(self, text: str | None) -> None:
        import re

        self.present = text is not None
        self.phases: dict[str, bool] = {}
        self.plans: dict[str, tuple[str, bool]] = {}
        self.archived: set[str] = set()
        folded = False
        for line in (text or "").splitlines():
            lowered = line.strip().lower()
            if lowered.startswith("<details"):
                folded = True
            elif lowered.startswith("</details"):
                folded = False
            if (got := re.match(_PHASE_LINE, line)) is not None:
                number = phase_number(got.group(2)) or got.group(2)
                if number not in self.phases:
                    self.phases[number] = got.group(1) in "xX"
                    if folded:
                        self.archived.add(number)
            elif (got := re.match(_PLAN_LINE, line)) is not None:
                plan = plan_id(got.group(2))
                self.plans.setdefault(plan, (plan.rpartition("-")[0], got.group(1) in "xX"))


class _Disk:
    """The phase folders: each plan's PLAN and SUMMARY files, CONTEXT files, continue-here."""

    def __init__(self, source: Source) -> None:
        import re

        self.plans: dict[str, dict[str, str]] = {}  # plan -> {"PLAN": path, "SUMMARY": path}
        self.contexts: set[str] = set()
        self.folders: dict[str, str] = {}
        self.continue_here: list[str] = []
        for path in walk(source.workspace, (ROOT,), lambda rel: rel.endswith(".md")):
            name = os.path.basename(path)
            if name.startswith(".continue-here"):
                self.continue_here.append(path)
            if not path.startswith(PHASES + "/"):
                continue
            folder = path.split("/")[2]
            number = phase_number(folder)
            if number is None:
                continue
            self.folders.setdefault(number, folder)
            if (got := re.match(_PLAN_FILE, name)) is not None:
                self.plans.setdefault(plan_id(got.group(1)), {})[got.group(2)] = path
            elif name.endswith("-CONTEXT.md"):
                self.contexts.add(number)
        hidden = source.path(ROOT)
        try:
            names = os.listdir(hidden)
        except (OSError, ValueError):
            names = []
        self.continue_here += sorted(f"{ROOT}/{n}" for n in names if n.startswith(".continue-here")
                                     and n.endswith(".md") and nameable(n))  # fmt: skip


def _key(number: str) -> tuple[int, ...]:
    return tuple(int(p) for p in number.split("."))


def _state(source: Source, relpath: str,
           findings: list[Finding]) -> tuple[dict[str, object], dict[str, str]]:  # fmt: skip
    text = text_of(source.read(relpath, "STATE.md")).lstrip("\ufeff")
    fields: dict[str, object] = {}
    body = text
    end = text.find("\n---", 3) if text.startswith("---\n") else -1
    if end >= 0:
        body = text[end + 4 :]
        try:
            fields = dict(nested(text[4:end], 2))
        except YamlError as exc:
            message = (f"{relpath}: front matter {exc}; not valid YAML, so GSD's own tools "
                       "cannot read it either: the body's Current Position is used")
            findings.append(finding("front-matter-unreadable", "warning", message))
    where = position(body)
    if "gsd_state_version" not in fields and "Phase" not in where and "Status" not in where:
        msg = (f"{relpath}: not a GSD STATE.md: no gsd_state_version front matter and no "
               "`## Current Position` with Phase:/Status: lines")
        raise DataError(msg)
    return fields, where


def _optional_text(source: Source, relpath: str) -> str | None:
    try:
        return text_of(source.read(relpath, os.path.basename(relpath)))
    except StorydError:
        return None


def _handoff(source: Source, findings: list[Finding]) -> dict[str, object] | None:
    if not source.exists(HANDOFF):
        return None
    text = _optional_text(source, HANDOFF)
    if text is None:
        return None
    try:
        value = loads(text.encode())
    except JSONError as exc:
        message = f"{HANDOFF}: invalid JSON ({one_line(str(exc))}); it is not followed"
        findings.append(finding("handoff-unreadable", "warning", message))
        return None
    return value if isinstance(value, dict) else None


class GsdAdapter(Adapter):
    """.planning/STATE.md with ROADMAP.md, phases/ and HANDOFF.json: one unit."""

    name = "gsd"
    convention = "GSD (get-shit-done), .planning/STATE.md with ROADMAP.md and phases/NN-slug/"
    roots = (ROOT,)
    ordered = True
    records_commits = False  # commits name `feat(18-01)`, `docs(phase-91)`: task-named
    codes = ("front-matter-unreadable", "handoff-left-behind", "handoff-unreadable",
             "progress-counters", "state-roadmap-disagree")

    def matches(self, relpath: str) -> bool:
        return relpath == STATE

    def owner(self, relpath: str) -> str | None:
        inside = relpath.startswith(ROOT + "/") and "" not in relpath.split("/")
        return STATE if inside else None

    def load(self, source: Source, relpath: str) -> list[Unit]:
        findings: list[Finding] = []
        fields, where = _state(source, relpath, findings)
        roadmap = Roadmap(_optional_text(source, ROADMAP) if source.exists(ROADMAP) else None)
        disk = _Disk(source)
        current = phase_number(where.get("Phase", "")) or phase_number(
            str(fields.get("current_phase") or ""))
        tasks = _tasks(roadmap, disk, current, where)
        status = where.get("Status") or str(fields.get("status") or "")
        findings.extend(_ledgers(relpath, roadmap, current, status))
        findings.extend(_counters(relpath, fields))
        handoff = _handoff(source, findings)
        nxt = _next(tasks, disk, current, handoff)
        finished = not tasks and normal_state_status(status) == "completed"
        if finished or (tasks and all(t.bucket == DONE for t in tasks)):
            point = ALL_DONE
            if handoff is not None:
                message = (f"{HANDOFF} is still there with every phase done: resume-project "
                           "deletes it once resumed (one-shot), so it is stale")
                findings.append(finding("handoff-left-behind", "info", message))
        elif nxt is None or (handoff is None and not disk.plans
                             and not any(t.bucket == DONE for t in tasks)):
            point = FRESH_START
        else:
            point = f"task-{nxt['task']}"
        labels = _labels(tasks, fields, where, roadmap, current, status)
        return [Unit("gsd", relpath, KEY, tuple(tasks), resume_point=point,
                     findings=tuple(findings), labels=labels, next=nxt)]


def _tasks(roadmap: Roadmap, disk: _Disk, current: str | None,
           where: dict[str, str]) -> list[Task]:  # fmt: skip
    phases = dict.fromkeys(roadmap.phases)
    phases.update(dict.fromkeys(disk.folders))
    phases.update(dict.fromkeys(p.rpartition("-")[0] for p in disk.plans))
    synthetic = False
    if not phases and current is not None:
        import re

        total = re.match(r"\s*\d+(?:\.\d+)*\s+of\s+(\d+)", where.get("Phase", ""))
        last = int(total.group(1)) if total else 0
        phases = dict.fromkeys([str(n) for n in range(1, last + 1)] or [current])
        synthetic = True
    tasks: list[Task] = []
    for number in sorted(phases, key=_key):
        plans = sorted((p for p in disk.plans if p.rpartition("-")[0] == number),
                       key=lambda p: p.rpartition("-")[2])
        plan_tasks = []
        for plan in plans:
            done = "SUMMARY" in disk.plans[plan]
            extra: dict[str, object] = {"phase": number, "kind": "plan",
                                        "file": disk.plans[plan].get("PLAN")}
            plan_tasks.append(Task(plan, "complete" if done else "planned",
                                   DONE if done else PENDING, extra=extra))
        if not plans:
            for plan, (phase, ticked) in roadmap.plans.items():
                if phase == number:
                    plan_tasks.append(Task(plan, "complete" if ticked else "planned",
                                           DONE if ticked else PENDING,
                                           extra={"phase": number, "kind": "plan",
                                                  "from": "ROADMAP.md"}))
        archived = number in roadmap.archived
        if plans:
            done = all(t.bucket == DONE for t in plan_tasks)
            why = "all its plans have a SUMMARY.md" if done else "plans without a SUMMARY.md"
        elif synthetic:
            done = current is not None and _key(number) < _key(current)
            why = "before STATE.md's current phase" if done else "STATE.md's position"
        else:
            done = archived or roadmap.phases.get(number, False)
            why = "ROADMAP.md (no plan files on disk)"
        status = "archived" if archived else "complete" if done else (
            "current" if number == current else "pending")
        extra = {"kind": "phase", "by": why, "folder": disk.folders.get(number)}
        tasks.extend(plan_tasks)  # a phase completes after its plans: the order of the work
        tasks.append(Task(f"phase-{number}", status, DONE if done else PENDING, extra=extra))
    return tasks


def _ledgers(relpath: str, roadmap: Roadmap, current: str | None,
             status: str) -> list[Finding]:  # fmt: skip
    if current is None or current not in roadmap.phases or current in roadmap.archived:
        return []
    ticked = roadmap.phases[current]
    complete = normal_state_status(status) == "completed"
    if ticked and not complete:
        says = f"phase {current} is current ({status or 'no Status'})"
        other = f"ticks phase {current} done"
    elif complete and not ticked:
        says = f"phase {current} is complete ({status})"
        other = f"leaves phase {current} unticked"
    else:
        return []
    message = (f"{relpath} says {says} while {ROADMAP} {other}: GSD reads STATE.md first in "
               "every workflow and counts a phase done when every plan has its SUMMARY.md, "
               "ticking ROADMAP.md at the transition; storyd takes STATE.md's position")
    evidence = {"state": status, "roadmap": "ticked" if ticked else "unticked",
                "phase": current}
    return [finding("state-roadmap-disagree", "warning", message, f"phase-{current}", evidence)]


def _counters(relpath: str, fields: dict[str, object]) -> list[Finding]:
    progress = fields.get("progress")
    if not isinstance(progress, dict):
        return []
    got = {k: as_int(progress.get(k)) for k in ("total_phases", "completed_phases",
                                                  "total_plans", "completed_plans", "percent")}
    found: list[Finding] = []
    for done, total in (("completed_plans", "total_plans"), ("completed_phases", "total_phases")):
        if (d := got[done]) is not None and (t := got[total]) is not None and d > t:
            message = (f"{relpath}'s front matter counts {done} {d} of {total} {t}: more done "
                       "than there are; the counters are not trusted, the files are")
            found.append(finding("progress-counters", "warning", message))
    return found


def _next(tasks: list[Task], disk: _Disk, current: str | None,
          handoff: dict[str, object] | None) -> dict[str, object] | None:  # fmt: skip
    by_id = {t.id: t for t in tasks}
    if handoff is not None:
        plan = str(handoff.get("plan") or "")
        phase = phase_number(str(handoff.get("phase") or "")) or current
        target = plan_id(plan) if plan_id(plan) in by_id else (
            f"phase-{phase}" if f"phase-{phase}" in by_id else None)
        if target is not None or not tasks:
            return {"task": target or f"phase-{phase}", "why": "HANDOFF.json: paused work is "
                    "resumed first (resume-project's highest priority; one-shot)",
                    "status": str(handoff.get("status") or ""), "plan": plan or None,
                    "nextAction": handoff.get("next_action"), "file": HANDOFF}
    if disk.continue_here:
        return {"task": f"phase-{current}" if current else None, "why": "a .continue-here "
                "file: resume where it says (resume-project's second priority)",
                "file": disk.continue_here[0]}
    for task in tasks:
        if task.extra.get("kind") == "plan" and task.bucket != DONE and "file" in task.extra \
                and task.extra["file"]:  # fmt: skip
            return {"task": task.id, "why": "a PLAN.md without its SUMMARY.md: complete the "
                    "incomplete plan (execute-phase runs plans without a summary)",
                    "status": task.status, "phase": task.extra["phase"],
                    "file": task.extra["file"]}
    here = by_id.get(f"phase-{current}") if current else None
    if here is not None and here.bucket != DONE:
        action = "plan" if current in disk.contexts else "discuss"
        return {"task": here.id, "why": f"STATE.md's current phase has no plan left to run: "
                f"{action} it next (/gsd-{action}-phase {current})", "status": here.status}
    first = next((t for t in tasks if t.bucket != DONE and t.extra.get("kind") == "phase"),
                 None)
    if first is None:
        return None
    why = ("the current phase is complete: transition to the next phase" if here is not None
           else "the first phase not done, in ROADMAP.md's order")
    return {"task": first.id, "why": why, "status": first.status}


def _labels(tasks: list[Task], fields: dict[str, object], where: dict[str, str],
            roadmap: Roadmap, current: str | None, status: str) -> dict[str, str]:  # fmt: skip
    phases = [t for t in tasks if t.extra.get("kind") == "phase"]
    plans = [t for t in tasks if t.extra.get("kind") == "plan"]
    labels = {
        "phases": f"{sum(t.bucket == DONE for t in phases)}/{len(phases)}",
        "plans": f"{sum(t.bucket == DONE for t in plans)}/{len(plans)}",
        "status": normal_state_status(status),
    }
    if current is not None:
        labels["phase"] = current
    for key in ("Plan", "Stopped at", "Resume file", "Last activity"):
        if where.get(key):
            first, *rest = key.split()
            labels[first.lower() + "".join(w.title() for w in rest)] = one_line(where[key], 120)
    for key in ("milestone", "stopped_at"):
        if isinstance(fields.get(key), str) and fields[key]:
            labels[key] = one_line(str(fields[key]), 120)
    if roadmap.archived:
        labels["archivedPhases"] = str(len(roadmap.archived))
    if not roadmap.present:
        labels["roadmap"] = "absent"
    return labels


ADAPTER = GsdAdapter()
