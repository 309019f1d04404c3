"""The `beads` format: beads' `.beads/issues.jsonl`, one issue a line.

Done is `closed`; `tombstone` issues are deleted (neither done nor pending). The next
task is `bd ready`'s first: status `open`, no `blocks` dependency on an issue that is
not closed or pinned, not under a blocked parent (`parent-child`), `defer_until` (its
own or its parent's) not in the future, ordered by priority (0 first), newest, id
(internal/storage/issueops/ready_work.go). A line that is not a JSON object (a torn
write) is a finding and is skipped; statuses agents invent (`done`, `frozen`) are
findings. One unit per file.

Since v0.56 beads keeps its truth in Dolt (`.beads/dolt/`; before, SQLite `.beads/*.db`)
and the JSONL is an export that lags, or is absent. When `.beads/metadata.json` names a
database that is here, storyd asks `bd` on the user's PATH for it, read-only
(core/formats/beads_bd.py, imported only then): its `list --json` and its own `ready`
list; the unit's label `source` says so. A `bd` that fails, overruns or prints junk is a
`bd-unreadable` finding and the JSONL is read. Without bd, a database changed after the
export gives the warning `export-lags` naming both times (label `export`); an absent
JSONL with beads' metadata here is the unit's one-line error, never "no format".
docs/formats.md.
"""

from __future__ import annotations

import os
import time

from storyd.core.errors import StateFileMissing
from storyd.core.formats.base import Adapter, Source, finding, make_task
from storyd.core.formats.beads_store import DEFAULTS, META, Store, newest, store_of
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


DATABASES = DEFAULTS  # where beads keeps the truth the JSONL is exported from


def iso(when: float) -> str:
    """An epoch second as UTC ISO 8601 (`2026-01-02T03:04:05Z`)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


def _export_lag(source: Source, relpath: str, store: Store) -> Finding | None:
    """The finding `export-lags` when beads' database beside the JSONL changed after it:
    the JSONL is an export (beads #4033, #3931) and its state is not current."""
    database = store.database
    if database is None:
        return None
    try:
        exported = os.stat(source.path(relpath)).st_mtime
    except OSError:
        return None
    changed = newest(source.path(database))
    if changed <= exported + 1.0:  # mtimes are coarser than writes: a second's grace
        return None
    message = (f"{relpath} is an export of beads' database {database}, which changed "
               f"at {iso(changed)}, after the export at {iso(exported)}: the issues "
               "here may not be current (run `bd export` or read `bd list --json`)")
    return finding("export-lags", "warning", message, evidence={
        "exported": iso(exported), "database": database, "changed": iso(changed)})


def _absent(relpath: str, store: Store, asked: bool) -> str:
    """Why no issue can be shown: the JSONL is absent, and the database is not read."""
    where = store.database
    if store.remote is not None:
        return (f"{relpath} is absent and beads keeps its issues on the Dolt server "
                f"{store.remote} ({META}), which storyd does not contact: run "
                f"`bd export -o {relpath}`")
    if where is None:
        return (f"{relpath} is absent and so is beads' database ({META} is here; a clone "
                "does not carry the Dolt database): no issue can be shown; run "
                f"`bd export -o {relpath}` where the database is")
    if asked:
        return (f"{relpath} is absent and `bd` could not read beads' database {where}: "
                "no issue can be shown")
    return (f"{relpath} is absent and beads keeps its issues in its database {where}: "
            f"put `bd` on PATH (storyd reads the database through it) or run "
            f"`bd export -o {relpath}`")


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
    codes = ("bd-unreadable", "duplicate-task-id", "export-lags", "metadata-unreadable",
             "missing-task-id", "no-next-task", "torn-line", "unknown-status")

    def matches(self, relpath: str) -> bool:
        return relpath in (PATH, META)  # metadata.json: the issues when the JSONL is absent

    def load(self, source: Source, relpath: str) -> list[Unit]:
        if relpath == META and source.exists(PATH):
            return []  # the JSONL's unit is the issues' one
        store = store_of(source)
        jsonl = PATH if relpath == PATH else store.export or PATH  # JSONL era: its name
        findings = [finding("metadata-unreadable", "warning", p) for p in store.problems]
        asked = False
        if store.has_meta and store.database is not None:
            if store.remote is not None:
                message = (f"{META} names the Dolt server {store.remote}: storyd does not "
                           f"contact it; {jsonl} (an export that may lag) is read")
                findings.append(finding("bd-unreadable", "info", message))
            else:
                got = _ask_bd(source, jsonl, findings, store)
                asked = got is not None or any(f.code == "bd-unreadable" for f in findings)
                if got is not None:
                    nodes, ready_ids = got
                    unit = self._build(relpath, nodes, findings, ready_ids)
                    unit.labels["source"] = "bd (the database)"
                    return [unit]
        try:
            data = source.read(jsonl, jsonl.rsplit("/", 1)[-1])
        except StateFileMissing:
            if relpath == PATH:
                raise  # gone meanwhile: metadata.json's unit speaks for it
            message = _absent(jsonl, store, asked)  # the unit's error: one line, no twin
            return [Unit("beads", relpath, KEY, (), findings=tuple(findings),
                         labels={"export": "absent"}, error=message)]
        if data[:3] == b"\xef\xbb\xbf" or not data.isascii():
            data = text_of(data).lstrip("\ufeff").encode()
        nodes = []
        torn = []
        late: list[Finding] = []  # after the issues' own findings, as they always were
        for number, line in _lines(data):
            try:
                node = loads(line)
            except JSONError:
                node = None
            if not isinstance(node, dict):
                torn.append(number)
                continue
            nodes.append((number, node))
        if torn:
            shown = ", ".join(map(str, torn[:10]))
            message = (f"{len(torn)} line(s) of {jsonl} are not JSON objects (line {shown}): "
                       f"a torn or hand-edited write; those issues are not counted")
            late.append(finding("torn-line", "warning", message,
                                evidence={"lines": ",".join(map(str, torn[:100]))}))
        lag = _export_lag(source, jsonl, store)
        if lag is not None:
            late.append(lag)
        unit = self._build(relpath, nodes, findings, None, late)
        if lag is not None:
            unit.labels["export"] = "lags the database"
        return [unit]

    def _build(self, relpath: str, nodes: list[tuple[int, dict[str, object]]],
               findings: list[Finding], ready_ids: list[str] | None,
               late: tuple[Finding, ...] | list[Finding] = ()) -> Unit:  # fmt: skip
        """The unit of these issues (JSONL lines or bd's list); `ready_ids`: bd's own
        ready list (None: decided here, as bd ready decides); `late`: findings of the
        file as a whole, after the issues' own."""
        tasks: list[Task] = []
        issues: dict[str, _Issue] = {}
        for number, node in nodes:
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
        findings.extend(late)
        queue = None if ready_ids is None else [issues[i] for i in ready_ids if i in issues]
        return self._unit(relpath, tasks, issues, findings, queue)

    @staticmethod
    def _unit(relpath: str, tasks: list[Task], issues: dict[str, _Issue],
              findings: list[Finding], asked: list[_Issue] | None) -> Unit:
        queue = ready(issues, time.time()) if asked is None else asked
        working = [i.id for i in issues.values() if i.status == "in_progress"]
        nxt: dict[str, object] | None = None
        if queue:
            first = queue[0]
            why = ("bd ready's first: open, no open blocker, by priority" if asked is None
                   else "bd ready's first (bd asked: the database's own ready list)")
            nxt = {"task": first.id, "why": why, "priority": str(first.priority),
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


def _ask_bd(source: Source, relpath: str, findings: list[Finding], store: Store,
            ) -> tuple[list[tuple[int, dict[str, object]]], list[str]] | None:  # fmt: skip
    """bd's issues and ready list when `bd` is on PATH and answers; None otherwise (a
    `bd-unreadable` finding says why bd did not answer). Imported only here: `storyd
    resume` and the hooks never load it for a workspace without beads' database."""
    from storyd.core.formats import beads_bd

    bd = beads_bd.bd_path(source.workspace)
    if bd is None:
        return None
    database = store.database or "\0"
    files = tuple(sorted((p, s) for p, s in source.seen.items()
                         if p == META or p.startswith(database)))  # fmt: skip
    try:
        listed, ready_ids = beads_bd.answer(bd, source.workspace, files, time.time())
    except beads_bd.BdFailed as exc:
        message = f"{exc}; {relpath} (an export that may lag) is read instead"
        findings.append(finding("bd-unreadable", "warning", message[:400]))
        return None
    return list(enumerate(listed, 1)), ready_ids


ADAPTER = BeadsAdapter()
