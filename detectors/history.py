"""commit-in-history: is each DONE task's commitSha in the history of the branch?

For every DONE task with a commitSha, against the tip (the unit's branch, else the
`branch` option, else the checked-out branch, else HEAD):

    missing       error    the object is not in the repository
    unknown       info     ... in a shallow clone, where history is cut off
    unreachable   error    it exists but the tip does not reach it (amend, rebase, reset,
                           force-push); `warning` with `rewritten: now <sha>` when a commit
                           with the same patch id is on the branch
    squash-merged info     it is not in the tip's history, but its work landed through a
                           squash (or a merge of a rewritten branch): a commit on the tip
                           whose subject names the task id, the story id or the PR number
                           (`#N`, `Merge pull request #N`), or whose patch id equals the
                           combined change of the unit's lost commits
    ambiguous     warning  an abbreviated sha matches more than one object
    invalid-sha   warning  not a hexadecimal object name
    not-a-commit  error    it names a tree, blob or tag
    no-tip        info     the tip names no commit
    repository-corrupt  warning  the ref files name a commit git cannot read (a
                           truncated pack, lost objects): never "0 problems"
    no-repository info     the workspace is not in a git repository (or git is absent)

"Exists" never means "in history": reachability comes from the tip's walk.
Options: `branch`, `patch_id_depth` (default 500 commits).
"""

from __future__ import annotations

from storyd.core.model import Finding, Task, Unit, Wording
from storyd.detectors import Context
from storyd.detectors.codes import CODES
from storyd.detectors.common import git_failed, int_option, no_tip, tip_name
from storyd.detectors.gitview import AMBIGUOUS, FOUND, INVALID, GitError, GitView, ObjectInfo

__all__ = ["DETECTOR", "HistoryDetector"]

NAME = "commit-in-history"
# One shared message for every missing commit: a fresh clone of another branch can miss
# thousands.
_MISSING_WORDS = Wording("commit {commit} of {task} does not exist in the repository")
DEFAULT_PATCH_ID_DEPTH = 500


class HistoryDetector:
    """Checks DONE tasks' commitSha against the branch's history."""

    name = NAME
    codes = CODES[NAME]  # every finding code it raises (docs/detectors.md)

    def check(self, unit: Unit, context: Context) -> list[Finding]:
        """One finding per DONE task whose commit is not (provably) on the branch."""
        tasks = [t for t in unit.tasks if t.done and t.commit_sha]
        if not tasks:
            return []
        git = context.git
        if git is None:
            message = (
                "the workspace is not in a git repository (or git is absent); commitSha not checked"
            )
            return [Finding(NAME, "no-repository", "info", message)]
        try:
            tip = tip_name(unit, context, git)
            tip_sha = git.tip_sha(tip)
            if tip_sha is None:
                return [no_tip(NAME, tip, context.workspace)]
            depth = int_option(context.options, "patch_id_depth", DEFAULT_PATCH_ID_DEPTH)
            judge = _Judge(git, tip, tip_sha, depth, _names(unit))
            return [f for f in judge.all(tasks) if f is not None]
        except GitError as exc:
            return [git_failed(NAME, exc)]


class _Judge:
    """Judges the commits of one unit's DONE tasks against one tip."""

    def __init__(
        self, git: GitView, tip: str, tip_sha: str, depth: int, names: frozenset[str] = frozenset()
    ) -> None:
        self.git = git
        self.names = names  # the unit's own ids (story id, PR numbers as `#N`), casefolded
        self.combined: str | None = None  # the lost commits' combined patch id
        self.tip = tip
        self.tip_sha = tip_sha
        self.depth = depth
        self.shallow = git.is_shallow()
        self.reached: dict[str, bool] = {}
        self.lost: list[str] = []
        self.replaced: dict[str, str | None] = {}

    def all(self, tasks: list[Task]) -> list[Finding | None]:
        """A finding or None per task, asking cat-file and the walk once for them all
        (the walk begun first: git walks while cat-file answers)."""
        self.git.prefetch_walk(self.tip, self.tip_sha)
        infos = self.git.lookup(t.commit_sha for t in tasks if t.commit_sha)
        commits = [i.sha for i in infos.values() if i.kind == "commit" and i.sha]
        self.reached = self.git.reachable(commits, self.tip, self.tip_sha)
        lost = [c for c in commits if not self.reached.get(c, False)]
        if lost and not self.shallow:
            self.replaced = self.git.replacements(lost, self.tip, self.depth)
            self.lost = lost
        return [self.judge(t, infos[t.commit_sha or ""]) for t in tasks]

    def judge(self, task: Task, info: ObjectInfo) -> Finding | None:
        """The finding for one task's commit, or None when it is on the branch."""
        sha, tid = task.commit_sha, task.id
        if info.state == INVALID:
            return Finding(
                NAME,
                "invalid-sha",
                "warning",
                f"commitSha {sha!r} of {tid} is not a hexadecimal object name",
                tid,
            )
        if info.state == AMBIGUOUS:
            return Finding(
                NAME,
                "ambiguous",
                "warning",
                f"commitSha {sha} of {tid} is ambiguous: more than one object "
                "starts with it; record more digits",
                tid,
                {"commit": sha or ""},
            )
        if info.state != FOUND or info.sha is None:
            if self.shallow:
                return _unknown(task, "is not in this shallow clone")
            return Finding(
                NAME,
                "missing",
                "error",
                _MISSING_WORDS,
                tid,
                {"commit": sha or ""},
            )
        if info.kind != "commit":
            return Finding(
                NAME,
                "not-a-commit",
                "error",
                f"commitSha {sha} of {tid} names a {info.kind}, not a commit",
                tid,
            )
        if self.reached.get(info.sha, False):
            return None
        if self.shallow:
            return _unknown(task, f"is not in the shallow history of {self.tip}")
        return self.unreachable(task, info.sha)

    def unreachable(self, task: Task, sha: str) -> Finding:
        """`unreachable`, with the replacement found by patch id when there is one."""
        text = (
            f"commit {task.commit_sha} of {task.id} is not in the history of {self.tip} "
            "(amended, rebased, reset or force-pushed)"
        )
        evidence = {"commit": sha, "tip": self.tip}
        new = self.replaced.get(sha)
        if new is not None:
            rewritten = {**evidence, "replacement": new}
            message = f"{text}; rewritten: now {new}"
            return Finding(NAME, "unreachable", "warning", message, task.id, rewritten)
        landed = self.squash(task, sha)
        if landed is not None:
            message = (
                f"commit {task.commit_sha} of {task.id} is not in the history of {self.tip}, "
                f"but its work landed there through a squash: {landed['landed']} "
                f"({_why_words(landed)})"
            )
            return Finding(NAME, "squash-merged", "info", message, task.id, {**evidence, **landed})
        return Finding(NAME, "unreachable", "error", text, task.id, evidence)

    def squash(self, task: Task, sha: str) -> dict[str, str] | None:
        """The landed commit and why (evidence keys `landed`, `why`, `named`) when the tip
        holds a squash of this task's work."""
        candidates = self.git.commits(self.tip_sha, sha, self.depth)
        wanted = self.names | {task.id.casefold()}
        pr = task.extra.get("prNumber")
        if isinstance(pr, int) and not isinstance(pr, bool):
            wanted = wanted | {f"#{pr}"}
        for commit in candidates:
            subject = commit.message.strip().split("\n", 1)[0]
            named = sorted(wanted & _tokens(subject))
            if named:
                return {"landed": commit.sha, "why": _named_kind(named[0], task), "named": named[0]}
        if self.combined is None and self.lost:
            self.combined = self.git.combined_patch_id(self.lost[0], self.lost[-1]) or ""
        if self.combined:
            ids = self.git.patch_ids([c.sha for c in candidates if len(c.sha) == 40])
            for commit in candidates:
                if ids.get(commit.sha) == self.combined:
                    return {"landed": commit.sha, "why": "patch-id"}
        return None


_TOKEN = r"#\d+|[\w-]+"  # compiled by `re` at its first use (its own cache)


def _tokens(subject: str) -> set[str]:
    """A subject's words and `#N` references, casefolded."""
    import re  # only for a squash's subject (`re` costs a hook's start)

    return {t.casefold() for t in re.findall(_TOKEN, subject)}


def _names(unit: Unit) -> frozenset[str]:
    """The ids a squash subject may name for this unit: its story id and PR number."""
    names = {unit.key.casefold()} if unit.format == "epic" else set()
    pr = unit.labels.get("pr")
    if pr:
        names.add(f"#{pr}")
    return frozenset(names)


def _named_kind(token: str, task: Task) -> str:
    """Which id a squash subject named: the task's, the PR's (`#N`) or the story's."""
    if token == task.id.casefold():
        return "subject-names-task"
    return "subject-names-pr" if token.startswith("#") else "subject-names-story"


def _why_words(landed: dict[str, str]) -> str:
    """The squash evidence's reason in words, for the message."""
    if landed["why"] == "patch-id":
        return "same patch id as the combined change of the lost commits"
    return f"its subject names {landed['named']}"


def _unknown(task: Task, why: str) -> Finding:
    message = (
        f"commit {task.commit_sha} of {task.id} {why}; history is incomplete, so it "
        "cannot be checked (git fetch --unshallow)"
    )
    return Finding(NAME, "unknown", "info", message, task.id, {"commit": task.commit_sha or ""})


DETECTOR = HistoryDetector()
