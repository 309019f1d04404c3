"""The epic-level answer: the producer's resume reclassification, checked against git.

`storyd epic` and the socket's `epic` op both call `epic_view`. It reads one epic's
state file (any shape daemon/core/formats/epic.py reads), applies resume-workflow.md's
Step 1 (stories), Step 1b (tasks) and Step 2 (blocked stories), and says which stories
are executable next, which are blocked and why. Where the producer asks GitHub whether a
PR merged, this asks git (`Evidence`): the commit reachable from the base branch, or a
commit on it whose subject names the story id, the task id or the PR number (a merge
commit `Merge pull request #N`, a squash `... (#N)`).
"""

from __future__ import annotations

import os
import re
from typing import Any

from storyd.core import lifecycle
from storyd.core.errors import DataError, LockTimeout, StorydError
from storyd.core.formats.base import Source, load_json_object
from storyd.core.formats.epic import epic_state_file, epic_state_files, other_place, story_nodes
from storyd.core.locking import DEFAULT_LOCK_TIMEOUT
from storyd.core.pipeline import MAX_UNIT_TASKS

__all__ = ["EpicRead", "Evidence", "epic_view", "places", "read_epic", "render_text"]

SUBJECT_DEPTH = 500
"""How many commits of the base branch are searched for subjects naming an id."""
_TOKEN = re.compile(r"#\d+|[\w-]+")


class Evidence:
    """Git's word on what landed on the base branch (HEAD's branch, else HEAD)."""

    def __init__(self, workspace: str) -> None:
        from storyd.detectors.gitview import GitError, private_view

        self.base: str | None = None
        self.view: Any = None
        self.tip_sha: str | None = None
        self.named: dict[str, str] = {}  # casefolded token -> newest commit naming it
        view = private_view(workspace)  # this request's own: closed by close()
        if view is None:
            return
        try:
            self.base = view.current_branch() or "HEAD"
            self.tip_sha = view.tip_sha(self.base)
            if self.tip_sha is not None:
                for commit in reversed(view.commits(self.tip_sha, None, SUBJECT_DEPTH)):
                    subject = commit.message.strip().split("\n", 1)[0]
                    for token in _TOKEN.findall(subject):
                        self.named[token.casefold()] = commit.sha  # newest wins
            self.view = view
        except GitError:
            view.close()

    def close(self) -> None:
        """Release the repository handle."""
        if self.view is not None:
            self.view.close()

    def landed(self, sha: object, names: list[str]) -> dict[str, str] | None:
        """How a commit or an id reached the base branch: {commit, how}, or None."""
        if self.view is None or self.tip_sha is None or self.base is None:
            return None
        if isinstance(sha, str) and sha:
            info = self.view.lookup([sha]).get(sha)
            full = info.sha if info is not None and info.kind == "commit" else None
            if full and self.view.reachable([full], self.base, self.tip_sha).get(full):
                return {"commit": full, "how": f"{sha} is in the history of {self.base}"}
        for name in names:
            found = self.named.get(name.casefold())
            if found is not None:
                return {"commit": found, "how": f"a commit on {self.base} names {name}"}
        return None


def _names(story_id: str, pr: object, task_prs: object = None) -> list[str]:
    """The ids a merge commit may name: the story, its PR, its tasks' PRs (`taskPrs`,
    schemaVersion 2.0.0: task id to a PR number or to {prNumber}, or a list of those)."""
    names = [story_id]
    numbers = [pr]
    values = task_prs.values() if isinstance(task_prs, dict) else task_prs
    if isinstance(values, (list, type({}.values()))):
        for value in values:
            numbers.append(value.get("prNumber") if isinstance(value, dict) else value)
    for number in numbers:
        if isinstance(number, int) and not isinstance(number, bool) and f"#{number}" not in names:
            names.append(f"#{number}")
    return names


def _tasks(node: dict[str, object], evidence: Evidence) -> list[dict[str, object]]:
    tasks = node.get("tasks")
    if not isinstance(tasks, dict):
        return []
    rows = []
    for task_id, task in tasks.items():
        if not isinstance(task, dict):
            continue
        recorded = task.get("status")
        landed = None
        if lifecycle.norm(recorded) in ("PR_CREATED", "PR_APPROVED", "PR_PENDING_REVIEW"):
            landed = evidence.landed(task.get("commitSha"), _names(task_id, task.get("prNumber")))
        rows.append(
            {
                "id": task_id,
                "recorded": recorded,
                "status": lifecycle.reclassify_task(recorded, merged=landed is not None),
                "merged": landed,
            }
        )
    return rows


def _story(story_id: str, node: dict[str, object], evidence: Evidence) -> dict[str, object]:
    pr = node.get("prNumber")
    landed = evidence.landed(node.get("commitSha"), _names(story_id, pr, node.get("taskPrs")))
    status, reason = lifecycle.reclassify_story(
        node.get("status"),
        node.get("retries", 0),
        node.get("prMergeStatus"),
        merged=landed is not None and pr is not None,
    )
    tasks = _tasks(node, evidence)
    if node.get("status") is None and node.get("prMergeStatus") is None:
        derived = lifecycle.story_from_tasks([str(t["status"]) for t in tasks])
        if derived is not None:
            status, reason = derived
    deps = node.get("blockedBy", node.get("dependencies"))
    return {
        "title": node.get("title") if isinstance(node.get("title"), str) else None,
        "id": story_id,
        "recorded": node.get("status"),
        "status": status,
        "reason": reason,
        "phase": node.get("phase"),
        "prNumber": pr,
        "prMergeStatus": node.get("prMergeStatus"),
        "retries": node.get("retries"),
        "blockedBy": deps if "blockedBy" in node or "dependencies" in node else None,
        "merged": landed,
        "tasks": tasks,
    }


def _merge_mode(top: dict[str, object]) -> str | None:
    mode = top.get("mergeMode")
    inner = top.get("mode")
    if mode is None and isinstance(inner, dict):
        mode = inner.get("mergeMode")
    return mode if isinstance(mode, str) else None


def _on_base(row: dict[str, object], node: dict[str, object]) -> bool:
    """Whether a story's work counts as merged for its dependants (Step 2)."""
    if row["merged"] is not None or lifecycle.norm(node.get("prMergeStatus")) == "MERGED":
        return True
    return node.get("prNumber") is None  # no PR recorded: committed to the branch directly


def _breaker(top: dict[str, object]) -> dict[str, object] | None:
    breaker = top.get("circuitBreaker")
    if not isinstance(breaker, dict):
        return None
    recorded = breaker.get("state", breaker.get("status"))
    return {
        "recorded": recorded,
        "consecutiveFailures": breaker.get("consecutiveFailures"),
        "onResume": "CLOSED",  # Step 2b: --resume resets the breaker, so it blocks nothing
    }


def _inverse_blocks(nodes: list[tuple[str, dict[str, object]]]) -> dict[str, list[str]]:
    """schemaVersion 2.0.0's `blocks` (S blocks T), read as T's dependency on S."""
    inverse: dict[str, list[str]] = {}
    for story, node in nodes:
        blocks = node.get("blocks")
        if isinstance(blocks, list):
            for target in blocks:
                inverse.setdefault(str(target), []).append(story)
    return inverse


def _dependencies(row: dict[str, object], inverse: list[str]) -> object:
    """`blockedBy` (else `dependencies`) plus the stories whose `blocks` name this one."""
    deps = row["blockedBy"]
    if not inverse:
        return deps
    recorded = deps if isinstance(deps, list) else []
    if deps is not None and not isinstance(deps, list):
        return deps  # not a list: blocked_reason says so
    return [*recorded, *(s for s in inverse if s not in recorded)]


def _external_entries(value: object) -> list[dict[str, object]]:
    """`externalDependencies` as written: {"epics": [...]} or a list; entries are objects
    with an `id` (EPIC-0063) or bare ids."""
    if isinstance(value, dict):
        value = value.get("epics")
    if not isinstance(value, list):
        return []
    entries: list[dict[str, object]] = []
    for item in value:
        if isinstance(item, str):
            entries.append({"id": item})
        elif isinstance(item, dict) and isinstance(item.get("id"), str):
            entries.append(item)
    return entries


def _epic_digits(name: str) -> str | None:
    digits = "".join(c for c in name if c.isdigit())
    return digits.zfill(4) if digits and len(digits) <= 4 else None


class _Outside:
    """The external epics one view reads: through the view's own Source (so their files
    are among what it was read from), with what each id resolved to (`found`) and whether
    every one was read (`settled`: a lock held past the bound is not a state to keep)."""

    def __init__(self, workspace: str, source: Source) -> None:
        self.workspace = workspace
        self.source = source
        self.found: dict[str, tuple[str, ...]] = {}
        self.settled = True

    def reasons(self, entries: list[dict[str, object]]) -> dict[str, str | None]:
        """Each external epic id's `state` (an id named twice: unmet if either says so)."""
        why: dict[str, str | None] = {}
        for entry in entries:
            if str(entry["id"]) not in why or why[str(entry["id"])] is None:
                why[str(entry["id"])] = self.state(entry)
        return why

    def state(self, entry: dict[str, object]) -> str | None:
        """Why an external (blocking) epic dependency is unmet, None when it is met: the
        other epic's state file in this workspace says every story of it is finished."""
        if entry.get("blocking") is False:
            return None
        name = str(entry["id"])
        if lifecycle.canonical(entry.get("status")) in lifecycle.FINISHED_STATUSES:
            return None
        digits = _epic_digits(name)
        found = epic_state_files(self.workspace, digits) if digits else []
        if digits:
            self.found[digits] = tuple(found)
        if not found:
            return f"external {name} (no state file of it in this workspace)"
        try:
            top = load_json_object(self.source.read(found[0], found[0]), found[0])
            nodes = [n for _, n in story_nodes(top, found[0]) if isinstance(n, dict)]
        except StorydError as exc:  # unreadable or locked: named, never raised
            self.settled = self.settled and not isinstance(exc, LockTimeout)
            return f"external {name} ({found[0]} unreadable: {exc})"
        done = 0
        for node in nodes:
            status, _ = lifecycle.reclassify_story(node.get("status"), 0, node.get("prMergeStatus"))
            done += status == "SUCCESS"
        if nodes and done == len(nodes):
            return None
        return f"external {name} ({done} of {len(nodes)} stories finished in {found[0]})"


def _levels(rows: list[dict[str, object]]) -> dict[str, int]:
    """Each story's Kahn phase (x-internal-epic-build-plan: roots are phase 0)."""
    ids = [str(r["id"]) for r in rows]
    deps = {
        str(r["id"]): [str(d) for d in r["dependsOn"] if str(d) in ids]
        if isinstance(r["dependsOn"], list)
        else []
        for r in rows
    }
    level: dict[str, int] = {}
    while len(level) < len(ids):
        phase = [i for i in ids if i not in level and all(d in level for d in deps[i])]
        if not phase:  # a cycle: the rest after everything else
            phase = [i for i in ids if i not in level]
        depth = max(level.values(), default=-1) + 1
        level.update((i, depth) for i in phase)
    return level


def is_sequential(top: dict[str, object]) -> bool:
    """Whether the epic runs one story at a time: `"mode": "sequential"` (flowVersion 2+),
    or the older `"mode": {"sequential": true}` / `{"parallel": false}`."""
    mode = top.get("mode")
    if isinstance(mode, str):
        return mode.strip().lower() == "sequential"
    if isinstance(mode, dict):
        return mode.get("sequential") is True or mode.get("parallel") is False
    return False


def _sequence(top: dict[str, object], rows: list[dict[str, object]]) -> list[str] | None:
    """The order stories run in when the epic is sequential, else None (all at once):
    `executionOrder` as recorded, then the rest by recorded `phase`, Kahn phase, id."""
    recorded = top.get("executionOrder")
    if not is_sequential(top) and not isinstance(recorded, list):
        return None
    ids = [str(r["id"]) for r in rows]
    order = [str(i) for i in recorded if str(i) in ids] if isinstance(recorded, list) else []
    order = list(dict.fromkeys(order))
    level = _levels(rows)

    def key(row: dict[str, object]) -> tuple[int, int, str]:
        phase = row.get("phase")
        story = str(row["id"])
        recorded_phase = phase if isinstance(phase, int) and not isinstance(phase, bool) else None
        return (level[story] if recorded_phase is None else recorded_phase, level[story], story)

    return order + [str(r["id"]) for r in sorted(rows, key=key) if str(r["id"]) not in order]


def _older_copy(workspace: str, relpath: str) -> str | None:
    """The same epic under docs/stories/ when plans/ holds the one read (not read)."""
    other = other_place(relpath)
    if other is None or not relpath.startswith("plans/"):
        return None
    return other if os.path.isfile(os.path.join(workspace, other)) else None


def _bounded(relpath: str, epic_id: str, nodes: list[tuple[str, dict[str, object]]]) -> None:
    """Refuse (DataError, 65) an epic whose view would hold more tasks than one resume
    answer may: the view is bounded like every answer (pipeline.MAX_UNIT_TASKS)."""
    total = 0
    for _, node in nodes:
        tasks = node.get("tasks")
        total += len(tasks) if isinstance(tasks, (dict, list)) else 0
    if total > MAX_UNIT_TASKS:
        msg = (
            f"{relpath}: epic {epic_id} holds {total:,} tasks, more than the "
            f"{MAX_UNIT_TASKS:,} one answer may have; its view is not answered "
            "(resume one story instead)"
        )
        raise DataError(msg)


class EpicRead:
    """One epic view and what it was read from: `seen` (workspace-relative path -> its
    signature as read: the epic's state file and its external epics'), `places` (which
    files the ids resolved to; `places` gives them as the folders say now) and `settled`
    (False when an external epic's lock was held past the bound: not a view to keep)."""

    __slots__ = ("externals", "places", "seen", "settled", "view")

    def __init__(self, view: dict[str, object], source: Source, outside: _Outside) -> None:
        self.view = view
        self.seen = dict(source.seen)
        self.externals = tuple(outside.found)
        relpath = str(view["stateFile"])
        self.places = (relpath, view["olderCopy"], tuple(outside.found.items()))
        self.settled = outside.settled


def places(workspace: str, epic_id: str, externals: tuple[str, ...]) -> tuple[object, ...]:
    """Which files a view of `epic_id` reads, as the folders say now (`EpicRead.places`
    of a read that resolved the external epics `externals`); StorydError as a read."""
    relpath = epic_state_file(workspace, epic_id)
    found = tuple((d, tuple(epic_state_files(workspace, d))) for d in externals)
    return (relpath, _older_copy(workspace, relpath), found)


def epic_view(
    workspace: str, epic_id: str, lock_timeout: float = DEFAULT_LOCK_TIMEOUT
) -> dict[str, object]:
    """The epic-level answer for an (already validated) epic id; StorydError on failure."""
    return read_epic(workspace, epic_id, lock_timeout).view


def read_epic(
    workspace: str, epic_id: str, lock_timeout: float = DEFAULT_LOCK_TIMEOUT
) -> EpicRead:
    """`epic_view`'s answer with what it was read from (the daemon keeps it while those
    files are as read: daemon/server/epicviews.py)."""
    relpath = epic_state_file(workspace, epic_id)
    source = Source(workspace, lock_timeout)
    top = load_json_object(source.read(relpath, relpath), relpath)
    nodes = [(k, n) for k, n in story_nodes(top, relpath) if isinstance(n, dict)]
    _bounded(relpath, epic_id, nodes)
    evidence = Evidence(workspace)
    try:
        rows = [_story(k, n, evidence) for k, n in nodes]
    finally:
        evidence.close()
    inverse = _inverse_blocks(nodes)
    epic_external = _external_entries(top.get("externalDependencies"))
    for row, (_, node) in zip(rows, nodes, strict=True):
        row["dependsOn"] = _dependencies(row, inverse.get(str(row["id"]), []))
        own = _external_entries(node.get("externalDependencies"))
        row["external"] = [str(e["id"]) for e in epic_external + own]
    others = _Outside(workspace, source)
    external_why = others.reasons(
        epic_external
        + [e for _, n in nodes for e in _external_entries(n.get("externalDependencies"))]
    )
    statuses = {str(r["id"]): str(r["status"]) for r in rows}
    on_base = {str(r["id"]): _on_base(r, n) for r, (_, n) in zip(rows, nodes, strict=True)}
    no_merge = _merge_mode(top) == "no-merge"
    ready: list[str] = []
    blocked: list[dict[str, object]] = []
    for row in rows:
        story, status = str(row["id"]), str(row["status"])
        if status in ("BLOCKED", "PENDING"):
            deps = row["dependsOn"]
            if status == "PENDING" and deps is None:
                deps = []  # a pending story without recorded dependencies has none
            why = lifecycle.blocked_reason(deps, statuses, on_base, no_merge=no_merge)
            outside = [
                why_not
                for e in row["external"]  # type: ignore[attr-defined]
                if (why_not := external_why.get(e)) is not None
            ]
            if outside:
                why = "; ".join(([why] if why else []) + ["waiting for " + ", ".join(outside)])
            if why is None:
                row["status"] = "PENDING"
                ready.append(story)
            else:
                row["status"] = "BLOCKED" if status == "BLOCKED" else status
                blocked.append({"id": story, "reason": why})
        elif status != "SUCCESS":
            blocked.append({"id": story, "reason": f"{status}: {row['reason']}"})
    order = _sequence(top, rows)
    queued: list[dict[str, object]] = []
    executable = ready
    if order is not None:
        first = [s for s in order if s in ready][:1]
        executable = first
        queued = [
            {"id": s, "reason": f"sequential: runs after {first[0]}"}
            for s in order
            if s in ready and s not in first
        ]
    view: dict[str, object] = {
        "epic": epic_id,
        "stateFile": relpath,
        "olderCopy": _older_copy(workspace, relpath),
        "baseBranch": evidence.base,
        "mergeMode": _merge_mode(top),
        "mode": "sequential" if order is not None else "parallel",
        "order": order,
        "circuitBreaker": _breaker(top),
        "externalDependencies": [
            {"id": k, "met": v is None, "reason": v} for k, v in external_why.items()
        ],
        "stories": rows,
        "executable": executable,
        "queued": queued,
        "blocked": blocked,
        "finished": [r["id"] for r in rows if r["status"] == "SUCCESS"],
    }
    return EpicRead(view, source, others)


_SHOWN = 20  # ids listed in the human form; --json has them all
_WIDTH = 100


def _id_lines(title: str, ids: list[str]) -> list[str]:
    """`title: a, b, c` wrapped at 100 columns; past 20 ids, the count, the first 20 and
    how many more (3,000 stories once printed 1,700 ids on one line)."""
    import textwrap

    if not ids:
        return [f"{title}: none"]
    head = f"{title}: "
    if len(ids) > _SHOWN:
        head = f"{title}: {len(ids):,} stories, the first {_SHOWN}: "
    body = ", ".join(ids[:_SHOWN])
    lines = textwrap.wrap(
        head + body, _WIDTH, subsequent_indent="  ", break_on_hyphens=False, break_long_words=False
    )
    if len(ids) > _SHOWN:
        lines.append(f"  ... and {len(ids) - _SHOWN:,} more (`storyd epic --json` lists them all)")
    return lines


def render_text(view: dict[str, object]) -> str:
    """The human form: one line per story, then the executable and blocked lists."""
    lines = [f"epic {view['epic']}  {view['stateFile']}  base: {view['baseBranch'] or '-'}"]
    if view.get("olderCopy"):
        lines.append(f"  also kept at {view['olderCopy']} (the older location; not read)")
    for row in view["stories"]:  # type: ignore[attr-defined]
        merged = row["merged"]
        proof = f"  merged: {merged['commit'][:12]} ({merged['how']})" if merged else ""
        lines.append(f"  {row['id']:<18} {row['status']:<17} {row['reason']}{proof}")
    executable = list(view["executable"])  # type: ignore[call-overload]
    lines.extend(_id_lines("executable next", executable))
    if view.get("mode") == "sequential":
        lines[-1] += "  (sequential: one story at a time)"
    for item in view.get("queued") or []:  # type: ignore[attr-defined]
        lines.append(f"queued: {item['id']}: {item['reason']}")
    for item in view["blocked"]:  # type: ignore[attr-defined]
        lines.append(f"blocked: {item['id']}: {item['reason']}")
    breaker = view["circuitBreaker"]
    if breaker:
        lines.append(f"circuit breaker: recorded {breaker['recorded']}, reset on resume")  # type: ignore[index]
    return "\n".join(lines) + "\n"
