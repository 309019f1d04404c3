"""The epic-level answer: the producer's resume reclassification, checked against git.

`storyd epic` and the socket's `epic` op both call `epic_view`. It reads one epic's
state file (any shape daemon/formats/epic.py reads), applies resume-workflow.md's
Step 1 (stories), Step 1b (tasks) and Step 2 (blocked stories), and says which stories
are executable next, which are blocked and why. Where the producer asks GitHub whether a
PR merged, this asks git (`Evidence`): the commit reachable from the base branch, or a
commit on it whose subject names the story id, the task id or the PR number (a merge
commit `Merge pull request #N`, a squash `... (#N)`).
"""

from __future__ import annotations

import re
from typing import Any

from daemon import lifecycle
from daemon.formats.base import Source, load_json_object
from daemon.formats.epic import epic_state_file, story_nodes
from daemon.locking import DEFAULT_LOCK_TIMEOUT

__all__ = ["Evidence", "epic_view", "render_text"]

SUBJECT_DEPTH = 500
"""How many commits of the base branch are searched for subjects naming an id."""
_TOKEN = re.compile(r"#\d+|[\w-]+")


class Evidence:
    """Git's word on what landed on the base branch (HEAD's branch, else HEAD)."""

    def __init__(self, workspace: str) -> None:
        from detectors.gitview import GitError, find_root, open_view

        self.base: str | None = None
        self.view: Any = None
        self.tip_sha: str | None = None
        self.named: dict[str, str] = {}  # casefolded token -> newest commit naming it
        root = find_root(workspace)
        view = open_view(root) if root else None
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


def _names(story_id: str, pr: object) -> list[str]:
    names = [story_id]
    if isinstance(pr, int) and not isinstance(pr, bool):
        names.append(f"#{pr}")
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
    landed = evidence.landed(node.get("commitSha"), _names(story_id, pr))
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


def epic_view(
    workspace: str, epic_id: str, lock_timeout: float = DEFAULT_LOCK_TIMEOUT
) -> dict[str, object]:
    """The epic-level answer for an (already validated) epic id; StorydError on failure."""
    relpath = epic_state_file(workspace, epic_id)
    top = load_json_object(Source(workspace, lock_timeout).read(relpath, relpath), relpath)
    evidence = Evidence(workspace)
    try:
        nodes = [(k, n) for k, n in story_nodes(top, relpath) if isinstance(n, dict)]
        rows = [_story(k, n, evidence) for k, n in nodes]
    finally:
        evidence.close()
    statuses = {str(r["id"]): str(r["status"]) for r in rows}
    on_base = {str(r["id"]): _on_base(r, n) for r, (_, n) in zip(rows, nodes, strict=True)}
    no_merge = _merge_mode(top) == "no-merge"
    executable: list[str] = []
    blocked: list[dict[str, object]] = []
    for row in rows:
        story, status = str(row["id"]), str(row["status"])
        if status in ("BLOCKED", "PENDING"):
            deps = row["blockedBy"]
            if status == "PENDING" and deps is None:
                deps = []  # a pending story without recorded dependencies has none
            why = lifecycle.blocked_reason(deps, statuses, on_base, no_merge=no_merge)
            if why is None:
                row["status"] = "PENDING"
                executable.append(story)
            else:
                row["status"] = "BLOCKED" if status == "BLOCKED" else status
                blocked.append({"id": story, "reason": why})
        elif status != "SUCCESS":
            blocked.append({"id": story, "reason": f"{status}: {row['reason']}"})
    return {
        "epic": epic_id,
        "stateFile": relpath,
        "baseBranch": evidence.base,
        "mergeMode": _merge_mode(top),
        "circuitBreaker": _breaker(top),
        "stories": rows,
        "executable": executable,
        "blocked": blocked,
        "finished": [r["id"] for r in rows if r["status"] == "SUCCESS"],
    }


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
    for row in view["stories"]:  # type: ignore[attr-defined]
        merged = row["merged"]
        proof = f"  merged: {merged['commit'][:12]} ({merged['how']})" if merged else ""
        lines.append(f"  {row['id']:<18} {row['status']:<17} {row['reason']}{proof}")
    lines.extend(_id_lines("executable next", list(view["executable"])))  # type: ignore[call-overload]
    for item in view["blocked"]:  # type: ignore[attr-defined]
        lines.append(f"blocked: {item['id']}: {item['reason']}")
    breaker = view["circuitBreaker"]
    if breaker:
        lines.append(f"circuit breaker: recorded {breaker['recorded']}, reset on resume")  # type: ignore[index]
    return "\n".join(lines) + "\n"
