"""Every finding code storyd's own detectors, formats and engine raise, each with the
evidence it carries (the shapes grepped from detectors/ and daemon/), as the wire form a
door reads; and reconcile's evidence shapes. Tests of the doors render every one.

    SAMPLES          (detector, code) -> the evidence pieces it is seen with (None: none)
    REPAIR_EVIDENCE  reconcile plans' evidence pieces (storyd.api.reconcile.evidence)
    ODD              evidence no kind expects (garbage, missing fields, other types)
    every_code()     (detector, code) of every built-in detector's and format's codes
    units()          one unit summary (the wire form) per sample
    grouped()        the same findings in a few units (a detail shows many at once)
"""

from __future__ import annotations

SHA = "a" * 40
NEW = "b" * 40
COMMIT = {"commit": SHA, "tip": "main"}

SAMPLES: dict[tuple[str, str], list[dict[str, object] | None]] = {
    ("commit-in-history", "no-repository"): [None],
    ("commit-in-history", "no-tip"): [None],
    ("commit-in-history", "repository-corrupt"): [None],
    ("commit-in-history", "git-error"): [None],
    ("commit-in-history", "invalid-sha"): [None],
    ("commit-in-history", "ambiguous"): [{"commit": "abc1"}],
    ("commit-in-history", "missing"): [{"commit": SHA}],  # issue 40: top died on this
    ("commit-in-history", "not-a-commit"): [None],
    ("commit-in-history", "unreachable"): [COMMIT, {**COMMIT, "replacement": NEW}],
    ("commit-in-history", "squash-merged"): [
        {**COMMIT, "landed": NEW, "why": "subject-names-task", "named": "t-1"},
        {**COMMIT, "landed": NEW, "why": "patch-id"},
    ],
    ("commit-in-history", "unknown"): [{"commit": ""}, {"commit": SHA}],
    ("staleness", "stale"): [None, {"count": "3", "tasks": "T1,T2,T3"}],
    ("task-named", "claimed-in-commit"): [COMMIT, {**COMMIT, "count": "2", "tasks": "T2,T3"}],
    ("task-named", "git-error"): [None],
    ("task-named", "named-in-commit"): [COMMIT],
    ("task-order", "out-of-order"): [None, {"count": "12", "tasks": ",".join(
        f"T{n}" for n in range(12))}],
    ("unrecorded-commit", "git-error"): [None],
    ("unrecorded-commit", "unrecorded"): [COMMIT],
    ("unrecorded-commit", "in-progress-committed"): [
        {**COMMIT, "startedAt": "2026-01-02T03:04:05Z"}],
    ("format", "restored-from-backup"): [
        {"backup": "s/00-session-state.json.bak", "stateFile": "s/00-session-state.json"}],
    ("format", "state-not-updated"): [{"journal": "p/journal.md", "journalStatus": "completed"}],
    ("format", "output-before-state-update"): [{"output": "out/task-1.json"}],
    ("format", "torn-line"): [{"lines": "3,7"}],
    ("format", "task-files-disagree"): [{"other": "tasks/tasks.json", "tasks": "1,2,3"}],
    ("format", "unknown-status"): [None, {"count": "125", "tasks": ",".join(
        f"bd-{n}" for n in range(125))}],
    ("format", "unit-too-large"): [None],
    ("engine", "state-unreadable"): [None],
    ("history", "regressed"): [
        {"why": "undone", "status": "DONE", "seen": "2026-01-02T03:04:05Z", "sha": SHA,
         "completedAt": "2026-01-01T00:00:00Z"},
        {"why": "unit-removed", "unit": "story-1", "tasks": "4",
         "seen": "2026-01-02T03:04:05Z"},
    ],
    ("git-operation", "operation-in-progress"): [None],
    ("git-lock", "git-lock-held"): [None],
    ("task-order", "detector-failed"): [None],
}
"""Format codes not listed here carry no evidence (added by `every_code`)."""

REPAIR_EVIDENCE: list[dict[str, object]] = [
    {"commit": SHA, "subject": "T2 step 2", "committedAt": "2026-01-02T03:04:05Z",
     "patchId": "c" * 40},
    {"rewrittenFrom": {"commit": SHA, "subject": "old", "committedAt": "x", "patchId": "p"}},
    {"commit": NEW, "subject": "Squash (#3)", "committedAt": "x", "patchId": None,
     "why": "subject-names-pr", "named": "#3", "rule": "merged"},
    {"journal": "p/journal.md", "line": 12, "text": "## Task 3: done", "end": None},
    {"output": "out/t.json", "status": "completed", "completedAt": None,
     "written": "2026-01-02T03:04:05Z"},
    {"backup": "s.json.bak", "bytes": 120},
    {"history": "a version seen", "at": "2026-01-02T03:04:05Z", "had status": "DONE",
     "sha": SHA},
]

ODD: list[object] = [
    {}, {"weird": "x"}, {"commit": None}, {"commit": ["a", "b"]}, {"rewrittenFrom": "nope"},
    {"rewrittenFrom": {"patchId": "p"}}, {"journal": "j", "line": 3}, {"history": "h"},
    {"count": "x", "tasks": ""}, {"count": "2", "tasks": 5}, {"output": {"a": 1}},
    {"why": "undone"}, {"lines": ""}, {"commit": "x" * 5000}, {"commit": "a\nb"},
    {1: 2}, {"landed": NEW}, [COMMIT, "text", None, 3], "just text", 42, None,
]


def every_code() -> set[tuple[str, str]]:
    """Every (detector, code) storyd's own detectors and formats declare, and the
    engine's own."""
    from storyd.core.formats import all_adapters
    from storyd.detectors.codes import CODES

    found = {(name, code) for name, codes in CODES.items() for code in codes}
    found |= {("format", code) for a in all_adapters(plugins=False) for code in a.codes}
    return found | set(SAMPLES)


def _severity(code: str) -> str:
    return "info" if code in ("no-repository", "no-tip", "named-in-commit", "squash-merged",
                              "unknown", "operation-in-progress") else "warning"


def units(workspace: str) -> list[dict[str, object]]:
    """One unit summary per (code, evidence) sample, each with that one finding."""
    made = []
    for n, (detector, code) in enumerate(sorted(every_code())):
        for m, evidence in enumerate(SAMPLES.get((detector, code), [None])):
            finding: dict[str, object] = {
                "detector": detector, "code": code, "severity": _severity(code),
                "task": "T1", "message": f"{code} sample",
            }
            if evidence is not None:
                finding["evidence"] = evidence
            made.append({
                "workspace": workspace, "stateFile": f"s{n}-{m}.json", "unit": f"u{n}-{m}",
                "format": "epic", "done": 1, "total": 2, "resumePoint": "task-T2",
                "error": None, "findings": 1, "findingList": [finding],
            })  # fmt: skip
    return made


def grouped(workspace: str, size: int = 16) -> list[dict[str, object]]:
    """Every sample's finding, `size` to a unit."""
    findings = [f for u in units(workspace) for f in u["findingList"]]  # type: ignore[attr-defined]
    made = []
    for n in range(0, len(findings), size):
        part = findings[n : n + size]
        made.append({
            "workspace": workspace, "stateFile": f"g{n}.json", "unit": f"g{n}",
            "format": "epic", "done": 1, "total": 2, "resumePoint": "task-T2",
            "error": None, "findings": len(part), "findingList": part,
        })  # fmt: skip
    return made
