"""The producer's lifecycle: what a story's or task's recorded status means on resume.

seed 000's envelope is structural; its producer (x-dev-epic-implement, resume-workflow.md)
reclassifies statuses before it picks the next stories. This module is that table, as
plain functions on plain values: no imports, so the `storyd resume` path can use it.
Git evidence (a PR merged) comes from the caller as a flag; this module never asks git.
"""

from __future__ import annotations

__all__ = [
    "MAX_RETRIES",
    "VOCABULARY",
    "blocked_reason",
    "canonical",
    "finished_reason",
    "norm",
    "reclassify_story",
    "reclassify_task",
]

MAX_RETRIES = 2
"""resume-workflow.md: `MAX_RETRIES` defaults to 2."""

ENGLISH = (
    "PENDING",
    "IN_PROGRESS",
    "PARTIAL",
    "SUCCESS",
    "COMPLETE",
    "COMPLETED",
    "DONE",
    "MERGED",
    "PR_CREATED",
    "PR_PENDING_REVIEW",
    "PR_APPROVED",
    "PR_MERGED",
    "FAILED",
    "BLOCKED",
    "DEFERRED",
    "UNKNOWN",
)
"""The producer's state-file statuses (x-epic-implement, resume-workflow.md; the seed)."""
PORTUGUESE = {
    "Pendente": "PENDING",
    "Planejada": "PENDING",
    "Em Andamento": "IN_PROGRESS",
    "Concluída": "COMPLETE",
    "Concluida": "COMPLETE",
    "Falha": "FAILED",
    "Bloqueada": "BLOCKED",
    "Refinada": "PENDING",
}
"""Its own words, as it spells them (x-epic-map: `Pendente`, `Planejada`, `Em Andamento`,
`Concluída`, `Falha`, `Bloqueada`; full-protocol.md also writes `Concluida`), which its
schemaVersion 2.0.0 state files carry as story statuses, and `refinada` (refined, ready
to run: its refinement gate, epic 0071's state file)."""
VOCABULARY: dict[str, str] = {
    **{word: word for word in ENGLISH},
    **{word.upper(): meaning for word, meaning in PORTUGUESE.items()},
}
"""THE status table: every story or task status the producer writes (upper case) and the
English status it means. The epic adapter's task buckets, `storyd epic`'s
reclassification and the `unknown-story-status` finding all read it."""

TASK_DONE = frozenset(("DONE", "MERGED", "COMPLETE", "SUCCESS", "PR_MERGED"))
"""Statuses (after `canonical`) in seed 000's DONE bucket, plus the producer's PR_MERGED
and SUCCESS (resume-workflow.md Step 1b)."""
SEED_DONE = frozenset(("DONE", "MERGED", "COMPLETE"))
"""Seed 000's own DONE bucket (`done`, `merged`, `complete`, `Concluída`): the envelope's."""

SEED_TASK_PENDING = frozenset(
    (
        "PENDING",
        "IN_PROGRESS",
        "PR_CREATED",
        "PR_APPROVED",
        "PR_MERGED",
        "FAILED",
        "BLOCKED",
        "UNKNOWN",
    )
)
"""Seed 000's PENDING bucket (after `canonical`). SUCCESS, DEFERRED and the like are no
task status of the seed's: a task carrying one stays unknown (a warning), as before."""


def task_buckets() -> tuple[frozenset[str], frozenset[str]]:
    """(done, pending) task statuses in lower case, for `make_task`, from VOCABULARY."""
    spellings = [(k, v) for k, v in VOCABULARY.items()]
    spellings += [(k.replace(" ", "_"), v) for k, v in VOCABULARY.items() if " " in k]
    done = frozenset(k.lower() for k, v in spellings if v in SEED_DONE)
    pending = frozenset(k.lower() for k, v in spellings if v in SEED_TASK_PENDING)
    return done, pending


def story_words() -> list[str]:
    """The vocabulary as the producer spells it, for messages."""
    return [*ENGLISH, *PORTUGUESE]


def story_status_known(status: object) -> bool:
    """Whether a story's recorded status is in the vocabulary (a missing one is PENDING)."""
    return _missing(status) or canonical(status) is not None


def _missing(status: object) -> bool:
    """No status recorded (null, false, blank): the producer's PENDING."""
    return status is None or status is False or (isinstance(status, str) and not status.strip())


FINISHED_STATUSES = frozenset(("SUCCESS", "COMPLETE", "COMPLETED", "PR_MERGED", "DONE", "MERGED"))
"""Story statuses the producer never re-executes (PR_MERGED is reclassified to SUCCESS)."""
_PR_WAITING = frozenset(("PR_CREATED", "PR_PENDING_REVIEW", "PR_APPROVED"))
_TO_PENDING = frozenset(("IN_PROGRESS", "PARTIAL"))


def norm(status: object) -> str:
    """A status as the producer compares it: trimmed, upper-case; non-strings give ''."""
    return status.strip().upper() if isinstance(status, str) else ""


def canonical(status: object) -> str | None:
    """The English status a recorded one means (`Pendente` is PENDING), None if unknown.

    Trimmed, NFC, case-insensitive; `Em Andamento`, `EM_ANDAMENTO` and `em-andamento`
    are one status. A missing status (None) is not unknown: the caller decides.
    """
    text = norm(status)
    if not text.isascii():
        import unicodedata

        text = unicodedata.normalize("NFC", text)
    found = VOCABULARY.get(text)
    if found is None and (" " in text or "-" in text or "_" in text):
        found = VOCABULARY.get(" ".join(text.replace("_", " ").replace("-", " ").split()))
        found = found or VOCABULARY.get("_".join(text.replace("-", " ").split()))
    return found


def finished_reason(status: object, pr_merge_status: object = None) -> str | None:
    """Why a story's own record says it is finished, or None when it does not."""
    if canonical(status) in FINISHED_STATUSES:
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
    if _missing(status):
        current = "PENDING"
    else:
        mapped = canonical(status)
        if mapped is None:
            shown = norm(status) or repr(status)
            return shown, f"unknown status {status!r}; left as recorded"
        current = mapped
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
    current = canonical(status) or norm(status) or "PENDING"
    if current in TASK_DONE:
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
