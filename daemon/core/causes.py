"""One cause, one line: a unit's findings that say the same thing about many tasks
become one finding naming the count, the ids in its evidence.

Findings are one cause when they have the same detector, code, severity and evidence
and the same message once the task's id is taken out of it: 125 beads issues with the
status `done` an agent invented are one `unknown-status` warning ("... for task bd-1
(and 124 others: 125 tasks) ..."), evidence `{"count": "125", "tasks": "bd-1,..."}`.
Findings that are all of one task (the same line said twice) are one finding.

A code that reconcile repairs (a `storyd.repairs` entry point) is left one finding per
task: a repair acts on its finding's task. The formats' findings pass through here when
a state file is read (storyd.core.pipeline), the detectors' when they have run
(storyd.detectors.runner).
"""

from __future__ import annotations

from storyd.core.model import Finding

__all__ = ["one_line_each"]

_MARK = "\0"  # where a task's id stood in a message
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def one_line_each(findings: tuple[Finding, ...]) -> tuple[Finding, ...]:
    """`findings` with each cause said once, in the order each was first said."""
    if len(findings) < 2:
        return findings
    kinds: dict[tuple[str, str, str], int] = {}
    for f in findings:
        kind = (f.detector, f.code, f.severity)
        kinds[kind] = kinds.get(kind, 0) + 1
    if all(n == 1 for n in kinds.values()):
        return findings  # the usual case: nothing repeats
    repaired = _repaired()
    groups: dict[object, list[Finding]] = {}
    for f in findings:
        if kinds[(f.detector, f.code, f.severity)] == 1 or f.code in repaired:
            groups[id(f)] = [f]
            continue
        key = (f.detector, f.code, f.severity, tuple(sorted(f.evidence.items())),
               _masked(f.message, f.task))  # fmt: skip
        groups.setdefault(key, []).append(f)
    if len(groups) == len(findings):
        return findings
    return tuple(f for group in groups.values() for f in _merged(group))


def _repaired() -> frozenset[str]:
    """The codes reconcile repairs (read only when some code repeats)."""
    from storyd.core import registry

    return frozenset(registry.get().names(registry.REPAIRS))


def _masked(message: str, task: str | None) -> str:
    """`message` with each whole occurrence of `task` (not inside a longer id: `7` in
    `7.7` or `T17` stays) replaced by a mark."""
    if not task:
        return message
    out, start = [], 0
    while (at := message.find(task, start)) >= 0:
        end = at + len(task)
        before = message[at - 1] if at else " "
        after = message[end] if end < len(message) else " "
        dotted = after == "." and end + 1 < len(message) and message[end + 1] in _ID_CHARS
        if before in _ID_CHARS or before == "." or after in _ID_CHARS or dotted:
            out.append(message[start:end])
        else:
            out.append(message[start:at] + _MARK)
        start = end
    out.append(message[start:])
    return "".join(out)


def _merged(group: list[Finding]) -> tuple[Finding, ...]:
    """A cause's findings as one: the first as it was when all are of one task, else its
    words with the task's place naming the count, and the ids in the evidence. A group
    whose evidence already has `count` or `tasks` keys is left as it is."""
    first = group[0]
    ids = list(dict.fromkeys(f.task for f in group if f.task))
    if len(ids) < 2:
        return (first,)
    evidence = dict(first.evidence)
    if "count" in evidence or "tasks" in evidence:
        return tuple(group)
    many = f"{ids[0]} (and {len(ids) - 1} other{'s' * (len(ids) > 2)}: {len(ids)} tasks)"
    words = _masked(first.message, first.task)
    if _MARK in words:
        message = words.replace(_MARK, many, 1).replace(_MARK, ids[0])
    else:
        shown = ", ".join(ids[:10]) + (", ..." if len(ids) > 10 else "")
        message = f"{first.message} ({len(ids)} tasks: {shown})"
    evidence.update(count=str(len(ids)), tasks=",".join(ids))
    return (Finding(first.detector, first.code, first.severity, message, None, evidence),)
