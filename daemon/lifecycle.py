"""The producer's lifecycle: what a story's or task's recorded status means on resume.

seed 000's envelope is structural; its producer (x-dev-epic-implement, resume-workflow.md)
reclassifies statuses before it picks the next stories. This module is that table, as
plain functions on plain values: no imports, so the `storyd resume` path can use it.
Git evidence (a PR merged) comes from the caller as a flag; this module never asks git.
"""

from __future__ import annotations

__all__ = [
    "MAX_RETRIES",
    "blocked_reason",
    "finished_reason",
    "norm",
    "reclassify_story",
    "reclassify_task",
]

MAX_RETRIES = 2
"""resume-workflow.md: `MAX_RETRIES` defaults to 2."""

FINISHED_STATUSES = frozenset(("SUCCESS", "COMPLETE", "COMPLETED", "PR_MERGED", "DONE", "MERGED"))
"""Story statuses the producer never re-executes (PR_MERGED is reclassified to SUCCESS)."""
_PR_WAITING = frozenset(("PR_CREATED", "PR_PENDING_REVIEW", "PR_APPROVED"))
_TO_PENDING = frozenset(("IN_PROGRESS", "PARTIAL"))
# The seed's DONE bucket (done, merged, complete, Concluída) plus the producer's PR_MERGED
_TASK_DONE = frozenset(
    ("DONE", "PR_MERGED", "MERGED", "COMPLETE", "SUCCESS", "CONCLUÍDA", "CONCLUIDA")
)


def norm(status: object) -> str:
    """A status as the producer compares it: trimmed, upper-case; non-strings give ''."""
    return status.strip().upper() if isinstance(status, str) else ""


def finished_reason(status: object, pr_merge_status: object = None) -> str | None:
    """Why a story's own record says it is finished, or None when it does not."""
    if norm(status) in FINISHED_STATUSES:
        return f"status {status!r}"
    if norm(pr_merge_status) == "MERGED":
        return "prMergeStatus 'MERGED'"
    return None


def reclassify_story(
    status: object,
    retries: object = 0,
    pr_merge_status: object = None,
    *,
    merged: bool = False,
    max_retries: int = MAX_RETRIES,
) -> tuple[str, str]:
    """(new status, why) per resume-workflow.md Step 1; `merged` is git's word on the PR."""
    current = norm(status) or "PENDING"
    if current in FINISHED_STATUSES:
        return "SUCCESS", "finished; never re-executed"
    if current in _TO_PENDING:
        return "PENDING", f"{current} is interrupted work"
    if current in _PR_WAITING:
        if merged or norm(pr_merge_status) == "MERGED":
            return "SUCCESS", "its PR merged"
        return current, "its PR is not merged yet"
    if current == "FAILED":
        count = retries if isinstance(retries, int) and not isinstance(retries, bool) else 0
        if count < max_retries:
            return "PENDING", f"FAILED with {count} of {max_retries} retries: retry candidate"
        return "FAILED", f"FAILED with {count} retries: retry budget exhausted"
    if current == "BLOCKED":
        return "BLOCKED", "re-evaluated against its dependencies"
    if current == "DEFERRED":
        return "DEFERRED", "deferred by the producer; not executed"
    if current == "PENDING":
        return "PENDING", "not started"
    return current, "unknown status; left as recorded"


def reclassify_task(status: object, *, merged: bool = False) -> str:
    """A task's status after resume-workflow.md Step 1b (BLOCKED is left to the caller)."""
    current = norm(status) or "PENDING"
    if current in _TASK_DONE:
        return "DONE"
    if current == "IN_PROGRESS":
        return "PENDING"
    if current in _PR_WAITING:
        return "DONE" if merged else current
    return current


def story_from_tasks(task_statuses: list[str]) -> tuple[str, str] | None:
    """(status, why) for a story that records no status of its own (the seed's shape),
    from its reclassified tasks; None when it has no tasks either."""
    if not task_statuses:
        return None
    done = sum(1 for status in task_statuses if status == "DONE")
    if done == len(task_statuses):
        return "SUCCESS", f"no story status; all {done} tasks DONE"
    if done:
        return "PENDING", f"no story status; {done} of {len(task_statuses)} tasks DONE: resume"
    return "PENDING", "not started"


def blocked_reason(
    blocked_by: object,
    statuses: dict[str, str],
    merged: dict[str, bool],
    *,
    no_merge: bool = False,
) -> str | None:
    """Step 2: why a story stays blocked (None: its dependencies are satisfied).

    `statuses` are the reclassified story statuses; `merged` says whether each story's
    work is on the base branch (needed unless the epic runs with mergeMode no-merge).
    """
    if blocked_by is None:
        return "blockedBy is undefined (unknown dependencies)"
    if not isinstance(blocked_by, list):
        return f"blockedBy is not a list: {blocked_by!r}"
    waiting = []
    for dep in blocked_by:
        name = str(dep)
        if name not in statuses:
            waiting.append(f"{name} (not in the state file)")
        elif statuses[name] != "SUCCESS":
            waiting.append(f"{name} ({statuses[name]})")
        elif not no_merge and not merged.get(name, False):
            waiting.append(f"{name} (SUCCESS, not merged)")
    return "waiting for " + ", ".join(waiting) if waiting else None
