"""The `beads` format: beads' `.beads/issues.jsonl`, one issue a line.

Done is `closed`; `tombstone` issues are deleted (neither done nor pending). The next
task is `bd ready`'s first: status `open`, no `blocks` dependency on an issue that is
not closed or pinned, not under a blocked parent (`parent-child`), `defer_until` (its
own or its parent's) not in the future, ordered by priority (0 first), newest, id
(internal/storage/issueops/ready_work.go). A line that is not a JSON object (a torn
write) is a finding and is skipped; statuses agents invent (`done`, `frozen`) are
findings. One unit per file. Since v0.56 beads keeps its truth in Dolt (`.beads/dolt/`;
before, SQLite `.beads/*.db`) and the JSONL is an export that lags: a database changed
after the export gives the warning `export-lags` naming both times, and the unit's label
`export` says so. docs/formats.md.
"""

from __future__ import annotations

import os
import stat
import time

from storyd.core.formats.base import Adapter, Source, finding, make_task
from storyd.core.formats.common import ALL_DONE, FRESH_START, as_int, progress_labels, text_of
from storyd.core.isotime import parse_epoch
from storyd.core.jsonio import JSONError, loads
from storyd.core.model import DONE, Finding, Task, Unit

__all__ = ["ADAPTER", "DATABASES", "BeadsAdapter", "iso", "ready"]

PATH = ".beads/issues.jsonl"
KEY = "issues"
_DONE = frozenset(("closed",))
_PENDING = frozenset(("open", "in_progress", "blocked", "deferred", "pinned", "hooked"))
_VOCABULARY = ("closed", "open", "in_progress", "blocked", "deferred", "pinned", "hooked")
_SETTLED = frozenset(("closed", "pinned"))  # a blocker in these states blocks nothing


class _Issue:
    __slots__ = ("blockers", "created", "defer", "id", "parents", "priority", "status")

    def __init__(self, node: dict[str, object], ident: str, status: str) -> None:
        self.id = ident
        self.status = status
        priority = as_int(node.get("priority"))
        self.priority = 2 if priority is None else priority
        created = node.get("created_at")
        self.created = created if isinstance(created, str) else ""
        self.defer = parse_epoch(node.get("defer_until"))
        self.blockers: list[str] = []
        self.parents: list[str] = []
        deps = node.get("dependencies")
        for dep in deps if isinstance(deps, list) else ():
            if not isinstance(dep, dict):
                continue
            on = dep.get("depends_on_id")
            if not isinstance(on, str) or dep.get("issue_id", ident) != ident:
                continue
            if dep.get("type") == "blocks":
                self.blockers.append(on)
            elif dep.get("type") == "parent-child":
                self.parents.append(on)


def ready(issues: dict[str, _Issue], now: float) -> list[_Issue]:
    """`bd ready`'s list, in its default (priority) order."""
    blocked: dict[str, bool] = {}

    def is_blocked(issue: _Issue, depth: int = 0) -> bool:
        if issue.id in blocked:
            return blocked[issue.id]
        blocked[issue.id] = False  # a parent-child cycle ends here
        own = issue.status == "blocked" or any(
            b in issues and issues[b].status not in _SETTLED for b in issue.blockers
        )
        inherited = depth < 64 and any(
            p in issues and is_blocked(issues[p], depth + 1) for p in issue.parents
        )
        blocked[issue.id] = own or inherited
        return blocked[issue.id]

    def deferred(issue: _Issue) -> bool:
        own = issue.defer is not None and issue.defer > now
        return own or any(
            p in issues and (d := issues[p].defer) is not None and d > now for p in issue.parents
        )

    found = [i for i in issues.values()
             if i.status == "open" and not is_blocked(i) and not deferred(i)]
    found.sort(key=lambda i: i.id)
    found.sort(key=lambda i: i.created, reverse=True)
    found.sort(key=lambda i: i.priority)
    return found


# where beads (v0.56+: Dolt; before, SQLite) keeps the truth the JSONL is exported from
DATABASES = (".beads/dolt", ".beads/beads.db", ".beads/issues.db")


def _newest(path: str, depth: int = 4) -> float:
    """The newest mtime at `path` or below it, `depth` folders down (Dolt's
    `<db>/.dolt/noms/` files), links not followed, at most 200 names a folder."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0.0
    newest = st.st_mtime
    if depth and stat.S_ISDIR(st.st_mode):
        try:
            names = os.listdir(path)[:200]
        except OSError:
            return newest
        for name in names:
            newest = max(newest, _newest(os.path.join(path, name), depth - 1))
    return newest


def iso(when: float) -> str:
    """An epoch second as UTC ISO 8601 (`2026-01-02T03:04:05Z`)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


def _export_lag(source: Source, relpath: str) -> Finding | None:
    """The finding `export-lags` when a beads database beside the JSONL changed after it:
    the JSONL is an export (beads #4033, #3931) and its state is not current."""
    try:
        exported = os.stat(source.path(relpath)).st_mtime
    except OSError:
        return None
    for database in DATABASES:
        if not source.exists(database):
            continue
        changed = _newest(source.path(database))
        if changed > exported + 1.0:  # mtimes are coarser than writes: a second's grace
            message = (f"{relpath} is an export of beads' database {database}, which changed "
                       f"at {iso(changed)}, after the export at {iso(exported)}: the issues "
                       "here may not be current (run `bd export` or read `bd list --json`)")
            return finding("export-lags", "warning", message, evidence={
                "exported": iso(exported), "database": database, "changed": iso(changed)})
    return None


def _lines(data: bytes) -> list[tuple[int, bytes]]:
    return [(n, line) for n, line in enumerate(data.split(b"\n"), 1) if line.strip()]


class BeadsAdapter(Adapter):
    """.beads/issues.jsonl, one unit."""

    name = "beads"
    convention = "beads, .beads/issues.jsonl"
    roots = (".beads",)
    time_sensitive = True  # `defer_until` passes with the clock alone
    ordered = False  # sorted by id, not by when work is done
    records_commits = False  # commit messages name tasks: task-named
    codes = ("duplicate-task-id", "export-lags", "missing-task-id", "no-next-task",
             "torn-line", "unknown-status")

    def matches(self, relpath: str) -> bool:
        return relpath == PATH

    def load(self, source: Source, relpath: str) -> list[Unit]:
        data = source.read(relpath, "issues.jsonl")
        if data[:3] == b"\xef\xbb\xbf" or not data.isascii():
            data = text_of(data).lstrip("\ufeff").encode()
        tasks: list[Task] = []
        findings: list[Finding] = []
        issues: dict[str, _Issue] = {}
        torn = []
        for number, line in _lines(data):
            try:
                node = loads(line)
            except JSONError:
                node = None
            if not isinstance(node, dict):
                torn.append(number)
                continue
            ident = node.get("id")
            if not isinstance(ident, str) or not ident.strip():
                message = f"line {number} holds an issue without a string id; skipped"
                findings.append(finding("missing-task-id", "warning", message))
                continue
            if node.get("status") == "tombstone":
                continue  # deleted (beads 2025-12 .. 2026-02): gone, not pending
            if ident in issues:
                message = f"issue {ident} appears again at line {number}; the later line wins"
                findings.append(finding("duplicate-task-id", "warning", message, ident))
                tasks = [t for t in tasks if t.id != ident]
            task, unknown = make_task(ident, node.get("status"), done=_DONE, pending=_PENDING,
                                      default="open", completed_at=node.get("closed_at"),
                                      extra={"title": node.get("title")})
            tasks.append(task)
            if unknown is not None:
                findings.append(unknown)
            issues[ident] = _Issue(node, ident, task.status.lower())
        if torn:
            shown = ", ".join(map(str, torn[:10]))
            message = (f"{len(torn)} line(s) of {relpath} are not JSON objects (line {shown}): "
                       f"a torn or hand-edited write; those issues are not counted")
            findings.append(finding("torn-line", "warning", message,
                                    evidence={"lines": ",".join(map(str, torn[:100]))}))
        lag = _export_lag(source, relpath)
        if lag is not None:
            findings.append(lag)
        unit = self._unit(relpath, tasks, issues, findings)
        if lag is not None:
            unit.labels["export"] = "lags the database"
        return [unit]

    @staticmethod
    def _unit(relpath: str, tasks: list[Task], issues: dict[str, _Issue],
              findings: list[Finding]) -> Unit:
        queue = ready(issues, time.time())
        working = [i.id for i in issues.values() if i.status == "in_progress"]
        nxt: dict[str, object] | None = None
        if queue:
            first = queue[0]
            nxt = {"task": first.id, "why": "bd ready's first: open, no open blocker, "
                   "by priority", "priority": str(first.priority),
                   "ready": [i.id for i in queue[:20]], "inProgress": working[:20]}
        elif working:
            nxt = {"task": working[0], "why": "nothing is ready; this issue is in progress",
                   "ready": [], "inProgress": working[:20]}
        if tasks and all(t.bucket == DONE for t in tasks):
            point = ALL_DONE
        elif nxt is None:
            point = "blocked" if tasks else FRESH_START
        elif not any(t.bucket == DONE for t in tasks) and not working:
            point = FRESH_START
        else:
            point = f"task-{nxt['task']}"
        if point == "blocked":
            message = "no issue is ready and none is in progress: every open issue is blocked"
            findings.append(finding("no-next-task", "warning", message))
        labels = progress_labels(tasks, _VOCABULARY)
        labels["ready"] = str(len(queue))
        return Unit("beads", relpath, KEY, tuple(tasks), resume_point=point,
                    findings=tuple(findings), labels=labels, next=nxt)


ADAPTER = BeadsAdapter()
