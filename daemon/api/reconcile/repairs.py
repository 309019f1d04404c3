"""The repair classes: one small function per finding code, each an entry point of the
group `storyd.repairs` named by its code (daemon/entry_points.txt), held by the one
registry (storyd.core.registry) as any plugin's repair would be.

A function is given an `Ask` (the unit, the task, the finding, the parsed target file,
the evidence reader) and returns a `Repair` (field changes or a whole-file restore, with
the evidence behind them) or a string: why the finding is left alone. What a finding
points at (a commit, a replacement, a landed squash, a journal, a backup) comes from its
structured `evidence` (keys in docs/detectors.md), never from its message, so detectors
may reword messages freely; the evidence itself is read afresh here from git and disk.
To add a class, write one function and register it under its code; the planner repairs
a finding of that code from any source that declares the code (a detector's `codes`,
a format adapter's `codes` for `format` findings) and does the rest (docs/reconcile.md).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from storyd.api.reconcile.evidence import read_journal_entry, read_output
from storyd.api.reconcile.pieces import Ask, Change, Repair, RepairFunction
from storyd.api.reconcile.targets import utc_stamp
from storyd.core import registry
from storyd.core.formats.dialect import Path, lookup
from storyd.core.isotime import parse_epoch
from storyd.core.lifecycle import reclassify_story, reclassify_task
from storyd.core.regular import read_regular

__all__ = ["registered", "repair_codes", "sources"]

_OUTPUT_DONE = frozenset(("complete", "completed", "done", "success", "succeeded"))
_OUTPUT_FAILED = frozenset(("failed", "error"))
_RUNNING = frozenset(("running", "in_progress"))


def _completion(ask: Ask, task_path: Path, when: str | None, sha: str | None) -> list[Change]:
    """status → done, plus the commit and completion time where the format has them."""
    node = lookup(ask.document, task_path)
    node = node if isinstance(node, dict) else {}
    dialect = ask.dialect
    changes = [ask.field(task_path, "status", dialect.done_word(node.get("status")))]
    if sha is not None and dialect.sha_key and (dialect.add_sha or dialect.sha_key in node):
        changes.append(ask.field(task_path, dialect.sha_key, sha))
    if when is not None and dialect.time_key:
        changes.append(ask.field(task_path, dialect.time_key, when))
    return changes


def unrecorded_commit(ask: Ask) -> Repair | str:
    """A pending task that a commit on the branch names: DONE at that commit."""
    sha = ask.finding.evidence.get("commit")
    task_path = ask.task_path()
    if not sha or ask.task is None:
        return "the finding names no commit"
    if task_path is None:
        return f"task {ask.task.id} not found in {ask.target}"
    commit = ask.evidence.commit(sha)
    if commit is None:
        return f"commit {sha} is not in the repository"
    unproven = _unproven(ask, commit.sha)
    if unproven is not None:
        return unproven
    changes = _completion(ask, task_path, utc_stamp(commit.time), commit.sha)
    return Repair(changes, [commit.as_dict()])


def rewritten_commit(ask: Ask) -> Repair | str:
    """A DONE task whose commit was rewritten: the replacement with the same patch id."""
    replacement = ask.finding.evidence.get("replacement")
    task = ask.task
    if not replacement or task is None or not task.commit_sha:
        return "the commit is not on the branch and no replacement was found: left alone"
    task_path = ask.task_path()
    if task_path is None:
        return f"task {task.id} not found in {ask.target}"
    new = ask.evidence.commit(replacement)
    old = ask.evidence.commit(task.commit_sha)
    if new is None or old is None:
        return "the old or the new commit is not in the repository"
    if old.patch_id is None or old.patch_id != new.patch_id:
        return "the patch ids of the old and the new commit differ"
    unproven = _unproven(ask, new.sha)
    if unproven is not None:
        return unproven
    node = lookup(ask.document, task_path)
    keys = [k for k, v in node.items() if v == task.commit_sha] if isinstance(node, dict) else []
    if len(keys) != 1:
        return f"no single field of {task.id} holds {task.commit_sha}"
    change = ask.field(task_path, keys[0], new.sha)
    return Repair([change], [{"rewrittenFrom": old.as_dict()}, new.as_dict()])


def squash_landed(ask: Ask) -> Repair | str:
    """A DONE task whose commit landed through a squash or merge (issue 9's lifecycle): the
    story gets the status the producer's resume rules give a story whose PR merged.

    Only when the merge is what changes the producer's answer (PR_CREATED,
    PR_PENDING_REVIEW, PR_APPROVED → SUCCESS). Tasks still waiting on that PR become DONE
    when the squash names the story or its PR (not just this one task); a story with any
    other unfinished task is left alone.
    """
    landed_sha = ask.finding.evidence.get("landed")
    how = ask.finding.evidence.get("why", "")
    task = ask.task
    dialect = ask.dialect
    if not landed_sha or task is None or not dialect.stories:
        return "the finding names no landed commit of an epic story"
    story_path = dialect.story_path(ask.document, ask.unit)
    story = lookup(ask.document, story_path) if story_path is not None else None
    if story_path is None or not isinstance(story, dict):
        return f"story {ask.unit.key} not found in {ask.target}"
    landed = ask.evidence.commit(landed_sha)
    if landed is None:
        return f"the landed commit {landed_sha} is not in the repository"
    unproven = _unproven(ask, landed.sha)
    if unproven is not None:
        return unproven
    key = dialect.story_status_key(story_path)
    status = story.get(key)
    args = (status, story.get("retries", 0), story.get("prMergeStatus"))
    merged, why = reclassify_story(*args, merged=True)
    if merged == reclassify_story(*args)[0]:
        return f"story status {status!r}: the merge does not change what resume does with it"
    story_wide = how != "subject-names-task"
    changes = [Change((*story_path, key), f"story {key}", status, merged)]
    for other in ask.unit.tasks:
        if other.done:
            continue
        done = reclassify_task(other.status, merged=True)
        other_path = ask.dialect.task_path(ask.document, ask.unit, other.id)
        if done != "DONE" or other.status == done or not story_wide or other_path is None:
            return f"task {other.id} is {other.status}: the story is not finished"
        changes.append(ask.field(other_path, "status", dialect.done_word(other.status)))
    evidence = {**landed.as_dict(), **_named(ask.finding.evidence), "rule": why}
    return Repair(changes, [evidence])


def commit_gone(ask: Ask) -> Repair | str:
    """A DONE task whose commit is gone: never guessed, only reported."""
    return "the recorded commit is gone and nothing replaces it: left alone"


def journal_completed(ask: Ask) -> Repair | str:
    """issue-plan: journal.md records the task completed, the state says in_progress."""
    task = ask.task
    task_path = ask.task_path()
    if task is None or task_path is None:
        return "the task is not found in the state file"
    journal = ask.finding.evidence.get("journal")
    if not journal:
        return "the finding names no journal"
    entry = read_journal_entry(ask.workspace, journal, task.id)
    if entry is None:
        return f"{journal} has no completed entry for task {task.id}"
    when = entry.end if entry.end and parse_epoch(entry.end) is not None else None
    return Repair(_completion(ask, task_path, when, None), [entry.as_dict()])


def output_written(ask: Ask) -> Repair | str:
    """checkpoint: the task's output file exists while the state says running."""
    task_path = ask.task_path()
    node = lookup(ask.document, task_path) if task_path is not None else None
    if task_path is None or not isinstance(node, dict):
        return f"task {ask.finding.task} is not found in {ask.target}"
    status_now = node.get("status")
    if not isinstance(status_now, str) or status_now.strip().lower() not in _RUNNING:
        return f"task {ask.finding.task} is {status_now!r} now, not running"
    output = node.get("output")
    found = read_output(ask.workspace, output) if isinstance(output, str) else None
    if found is None:
        return "the output file cannot be read as JSON"
    status = (found.status or "").lower()
    if status in _OUTPUT_DONE:
        when = found.completed_at if parse_epoch(found.completed_at or "") else None
        changes = _completion(ask, task_path, when or utc_stamp(found.mtime), None)
    elif status in _OUTPUT_FAILED:
        changes = [ask.field(task_path, "status", "failed")]
    else:
        return f"the output {found.path} records no status storyd can map ({found.status!r})"
    return Repair(changes, [found.as_dict()])


def restore_backup(ask: Ask) -> Repair | str:
    """session: a torn or invalid state file whose `.bak` is valid: restore the `.bak`."""
    backup = ask.finding.evidence.get("backup")
    if backup != ask.unit.state_file + ".bak":
        return f"the finding names no backup of {ask.unit.state_file}"
    try:
        data = read_regular(os.path.join(ask.workspace, backup))
        document = json.loads(data)
    except (OSError, ValueError):
        return f"{backup} cannot be read as JSON"
    if not isinstance(document, dict):
        return f"{backup} does not hold a JSON object"
    evidence: list[dict[str, object]] = [{"backup": backup, "bytes": len(data)}]
    return Repair([], evidence, restore=data)


def restore_regressed(ask: Ask) -> Repair | str:
    """A finished task a later write lost (issue 33): its status, sha and completion
    time back as the version that held them had them (the finding's evidence, from the
    history database's marks)."""
    evidence = ask.finding.evidence
    why, status = evidence.get("why"), evidence.get("status")
    task_path = ask.task_path()
    if why == "unit-removed":
        return (f"unit {evidence.get('unit')} is gone from {ask.target}: storyd does not add "
                "units back; `storyd history` shows it as it was")  # fmt: skip
    if why == "removed" or task_path is None:
        return (f"task {ask.finding.task} is gone from {ask.target}: storyd does not add it "
                "back; `storyd history` shows it as it was")  # fmt: skip
    if not status:
        return "the finding names no status to restore"
    node = lookup(ask.document, task_path)
    node = node if isinstance(node, dict) else {}
    dialect = ask.dialect
    sha, when = evidence.get("sha"), evidence.get("completedAt")
    writes_sha = bool(sha and dialect.sha_key and (dialect.add_sha or dialect.sha_key in node))
    unproven = _unproven(ask, sha) if sha and writes_sha else _other_branch(ask)
    if unproven is not None:
        return unproven
    changes = []
    if why != "sha-replaced":
        changes.append(ask.field(task_path, "status", status))
    if sha and writes_sha:
        changes.append(ask.field(task_path, dialect.sha_key, sha))  # type: ignore[arg-type]
    if when and dialect.time_key:
        changes.append(ask.field(task_path, dialect.time_key, when))
    held = {"history": "a version seen", "at": evidence.get("seen"), "had status": status,
            "sha": sha, "completedAt": when}  # fmt: skip
    return Repair(changes, [{k: v for k, v in held.items() if v}])


def _unproven(ask: Ask, sha: str) -> str | None:
    """Why commit `sha` may not be written: HEAD's history does not hold it (issue 40:
    a repair writes only what git proves, never another branch's or a rewritten sha)."""
    if ask.evidence.on_head(sha):
        return None
    return (f"commit {sha[:12]} is not in the history of the work tree's HEAD: storyd "
            "writes only commits HEAD reaches")  # fmt: skip


def _other_branch(ask: Ask) -> str | None:
    """Why a status seen on another branch may not be written back on this one (a
    format with no commit sha: the branch the version was seen on is the proof)."""
    seen = ask.finding.evidence.get("branch")
    if not seen:
        return None
    from storyd.api.history_lineage import branch, stamp

    now = branch(stamp(ask.workspace))
    if now == seen:
        return None
    return (f"the version that had it was seen on branch {seen}, and HEAD is on "
            f"{now or 'no branch'}: storyd writes back only this branch's progress")


def _named(evidence: Mapping[str, str]) -> dict[str, str]:
    """The squash finding's reason (`why`, and the id its subject `named`) for the plan."""
    return {k: evidence[k] for k in ("why", "named") if k in evidence}


def _check(candidate: object, entry: registry.Entry) -> str | None:
    """Why a repair plugin is refused, or None."""
    return None if callable(candidate) else "not a callable repair(ask)"


def registered() -> dict[str, RepairFunction]:
    """Every installed repair by the finding code it repairs (broken plugins skipped)."""
    plugins = registry.get()
    found = {}
    for code in plugins.names(registry.REPAIRS):
        function = plugins.one(registry.REPAIRS, code, _check)
        if function is not None:
            found[code] = function
    return found  # type: ignore[return-value]


def repair_codes() -> tuple[str, ...]:
    """The finding codes a reconcile acts on (what `--only` and `auto` accept)."""
    return registry.get().names(registry.REPAIRS)


def sources() -> dict[str, frozenset[str]]:
    """Who may raise each code: every detector by name, and `format` (any format's
    adapter), each with the codes it declares."""
    from storyd import detectors
    from storyd.core.formats import all_adapters

    declared = detectors.declared()
    declared["format"] = frozenset(c for a in all_adapters() for c in a.codes)
    declared["history"] = frozenset(("regressed",))  # the engine's own (api/history_rules.py)
    return declared
