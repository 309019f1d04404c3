"""What changed between two versions of a unit, and what a new version lost.

Pure functions over `storyd.core.model` tasks, no I/O but the one git question a
replaced sha asks (`ancestor`, given by the caller). A unit's *held progress* (its
marks) is every task some version had finished, as that version had it: status, sha,
completion time, and when it was seen. A new version keeps the marks of the tasks it
still has finished, updates those it moved forward, and is *regressed* where it lost one:
a finished task back to not done, a finished task removed, a commit sha replaced by
another while the old one is still on the branch (no rewrite evidence).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from storyd.core.model import DONE, Finding, Task, Unit

__all__ = [
    "CODE",
    "DETECTOR",
    "Mark",
    "Packed",
    "advance",
    "changes",
    "expand",
    "gone_findings",
    "lost",
    "pack",
    "regressed_findings",
    "task_rows",
    "unchanged",
]

CODE = "regressed"
DETECTOR = "history"  # an engine-owned source (core.model.OWN_DETECTORS)

Mark = tuple[str, str | None, str | None, float]
"""A finished task as the version that held it had it: status, sha, completedAt, seen at."""
Packed = tuple[object, ...]
"""A unit's marks as the daemon holds them, one tuple: when they are exactly the finished
tasks of a build, as its very strings (nearly always), that build's tasks tuple (the
engine's own) and each finished task's seen at; else flat, five items a mark (task id,
status, sha, completedAt, seen at), the unit's finished tasks first in its task order."""
Row = tuple[str, str, str, str | None, str | None]
"""A task as history stores it: id, status, bucket, sha, completedAt."""


def task_rows(tasks: tuple[Task, ...]) -> list[Row]:
    """The tasks of a version as history stores them."""
    return [(t.id, t.status, t.bucket, t.commit_sha, t.completed_at) for t in tasks]


def changes(before: list[Row] | None, after: list[Row] | None) -> list[str]:
    """What changed, in words: `TASK-1 pending → DONE at abc1234`, `TASK-2 added`..."""
    if after is None:
        return ["unit removed"]
    old = {r[0]: r for r in before or ()}
    said: list[str] = []
    for tid, status, _bucket, sha, _when in after:
        prev = old.pop(tid, None)
        at = f" at {sha[:12]}" if sha else ""
        if prev is None:
            said.append(
                f"{tid} added ({status}{at})" if before is not None else f"{tid} {status}{at}"
            )
        elif prev[1] != status:
            said.append(f"{tid} {prev[1]} → {status}{at}")
        elif prev[3] != sha:
            said.append(f"{tid} sha {(prev[3] or 'none')[:12]} → {(sha or 'none')[:12]}")
        elif prev[4] != _when:
            said.append(f"{tid} completedAt {prev[4]} → {_when}")
    said.extend(f"{tid} removed" for tid in old)
    return said


def lost(
    marks: Mapping[str, Mark], unit: Unit, ancestor: Callable[[str], bool]
) -> list[tuple[str, str, Mark]]:
    """(task, why, mark) for every finished task `unit` lost: `undone`, `removed` or
    `sha-replaced` (`ancestor(sha)`: the old sha is still on the branch)."""
    if not marks:
        return []
    now = {t.id: t for t in unit.tasks}
    found = []
    for tid, mark in marks.items():
        task = now.get(tid)
        if task is None:
            found.append((tid, "removed", mark))
        elif not task.done:
            found.append((tid, "undone", mark))
        elif mark[1] and task.commit_sha and task.commit_sha != mark[1] and ancestor(mark[1]):
            found.append((tid, "sha-replaced", mark))
    return found


def advance(
    marks: Mapping[str, Mark], unit: Unit, at: float, keep: set[str]
) -> dict[str, Mark] | None:
    """The marks after `unit` (None: unchanged): finished tasks are marked as they are
    now, but for the lost ones in `keep`, whose marks stay until progress comes back.

    A mark that holds the same progress with another read's strings takes this read's
    (keeping when it was seen): the marks then pin no string of a read the engine has
    let go (at 10,000 stories, a re-read's 1.3 MB of task ids and shas)."""
    new = dict(marks)
    shared = True  # every kept mark's strings are this unit's
    for task in unit.tasks:
        if not task.done or task.id in keep:
            continue
        mark = new.get(task.id)
        state = (task.status, task.commit_sha, task.completed_at)
        if mark is None or mark[:3] != state:
            new[task.id] = (*state, at)
        elif mark[0] is not state[0] or mark[1] is not state[1] or mark[2] is not state[2]:
            new[task.id] = (*state, mark[3])
            shared = False
    if not shared:  # the keys too: a dict keeps the key it was first given
        ids = {t.id: t.id for t in unit.tasks}
        return {ids.get(k, k): m for k, m in new.items()}
    return None if new == marks else new


def pack(marks: Mapping[str, Mark], unit: Unit | None = None) -> Packed:
    """The marks as one tuple (a dict and a tuple a mark cost ~2.5x the memory at 10,000
    units): over `unit`'s tasks when they are its finished tasks as they are (a third of
    the flat tuple's size), else flat in `unit`'s tasks' order, so that `unchanged` can
    walk both."""
    if unit is not None and marks:
        over = _over(marks, unit)
        if over is not None:
            return over
    order = [t.id for t in unit.tasks if t.id in marks] if unit is not None else []
    chosen = set(order)
    rest = [tid for tid in marks if tid not in chosen] if len(order) < len(marks) else []
    flat: list[object] = []
    for tid in (*order, *rest):
        flat += (tid, *marks[tid])
    return tuple(flat)


def _over(marks: Mapping[str, Mark], unit: Unit) -> Packed | None:
    """(unit.tasks, seen...) when the marks are the unit's finished tasks, as its very
    strings; else None."""
    seen: list[object] = [unit.tasks]
    for task in unit.tasks:
        if task.bucket != DONE:
            continue
        mark = marks.get(task.id)
        if mark is None or mark[0] is not task.status or mark[1] is not task.commit_sha or (
            mark[2] is not task.completed_at
        ):
            return None
        seen.append(mark[3])
    return tuple(seen) if len(seen) == len(marks) + 1 else None


def _is_over(packed: Packed) -> bool:
    return bool(packed) and type(packed[0]) is tuple


def expand(packed: Packed) -> dict[str, Mark]:
    """The marks of a packed tuple, as the rules and the database take them."""
    if _is_over(packed):
        tasks: tuple[Task, ...] = packed[0]  # type: ignore[assignment]
        seen: tuple[float, ...] = packed[1:]  # type: ignore[assignment]
        done = (t for t in tasks if t.bucket == DONE)
        return {t.id: (t.status, t.commit_sha, t.completed_at, at)
                for t, at in zip(done, seen, strict=True)}  # fmt: skip
    return {packed[i]: packed[i + 1 : i + 5] for i in range(0, len(packed), 5)}  # type: ignore[misc]


def unchanged(packed: Packed, unit: Unit) -> bool:
    """Whether `unit` finishes exactly the marked tasks, as the very strings the marks
    hold (the same read): then nothing is lost and nothing moves, and the rules need
    not run (the call the daemon makes for every unit it builds). Marks over another
    build's tasks are not unchanged: they are packed again over this one's."""
    if _is_over(packed):
        return packed[0] is unit.tasks
    at, end = 0, len(packed)
    for task in unit.tasks:
        if task.bucket != DONE:
            continue
        if at == end or packed[at] is not task.id or packed[at + 1] is not task.status or (
            packed[at + 2] is not task.commit_sha or packed[at + 3] is not task.completed_at
        ):
            return False
        at += 5
    return at == end


_WORDS = {
    "undone": "task {task} was {status} (seen {seen}) and is not done now",
    "removed": "task {task} was {status} (seen {seen}) and is gone from the state file",
    "sha-replaced": "task {task} was done at {sha} (seen {seen}), still on the branch, "
    "and now names another commit",
}


def regressed_findings(
    found: list[tuple[str, str, Mark]], iso: Callable[[float], str], branch: str | None = None
) -> tuple[Finding, ...]:
    """One `regressed` warning per lost task, naming the version that had it and when
    (and `branch`, the branch its lineage is on, when HEAD named one)."""
    out = []
    for tid, why, (status, sha, when, seen) in found:
        evidence = {"why": why, "status": status, "seen": iso(seen)}
        if branch:
            evidence["branch"] = branch
        if sha:
            evidence["sha"] = sha
        if when:
            evidence["completedAt"] = when
        message = _WORDS[why].format(
            task=tid, status=status, seen=evidence["seen"], sha=(sha or "")[:12]
        )
        out.append(Finding(DETECTOR, CODE, "warning", message, tid, evidence))
    return tuple(out)


def gone_findings(
    held: Mapping[str, Mapping[str, Mark]], present: frozenset[str], iso: Callable[[float], str]
) -> tuple[Finding, ...]:
    """One `regressed` warning per unit that had finished tasks and is gone from its
    state file (`held`: the file's units' marks; `present`: the keys it holds now). The
    file's remaining units carry them, as they carry a file's `state-unreadable`."""
    out = []
    for key in sorted(k for k, marks in held.items() if marks and k not in present):
        marks = held[key]
        seen = max(m[3] for m in marks.values())
        evidence = {"why": "unit-removed", "unit": key, "tasks": str(len(marks)),
                    "seen": iso(seen)}  # fmt: skip
        message = (f"unit {key}, with {len(marks)} finished task(s) (seen {evidence['seen']}), "
                   "is gone from the state file")  # fmt: skip
        out.append(Finding(DETECTOR, CODE, "warning", message, None, evidence))
    return tuple(out)
