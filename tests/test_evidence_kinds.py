"""Issue 40, item 4: evidence is typed. Every piece of evidence a detector, a format or a
reconcile plan gives is one of the declared kinds (storyd.core.evidence) and renders
through its one function; an unknown kind or a missing field renders generically, never
raises."""

from __future__ import annotations

import pytest
from finding_samples import ODD, REPAIR_EVIDENCE, SAMPLES, SHA, every_code

from storyd.api import plantext, unitdetail
from storyd.core import evidence
from storyd.core.evidence import KINDS, evidence_lines, evidence_text, kind_of

FINDING_EVIDENCE = [e for pieces in SAMPLES.values() for e in pieces if e and any(e.values())]


class TestKinds:
    """Each shape emitted has a declared kind, and each kind is emitted somewhere."""

    @pytest.mark.parametrize("piece", FINDING_EVIDENCE + REPAIR_EVIDENCE, ids=repr)
    def test_every_emitted_shape_has_a_kind(self, piece: dict[str, object]) -> None:
        assert kind_of(piece) is not None
        assert "\n" not in evidence_text(piece)

    def test_every_kind_is_emitted(self) -> None:
        used = {kind_of(p) for p in FINDING_EVIDENCE + REPAIR_EVIDENCE}
        assert set(KINDS) <= used

    def test_the_samples_cover_every_declared_code(self) -> None:
        from storyd.detectors.codes import CODES

        assert {("task-order", "out-of-order"), ("format", "torn-line")} <= every_code()
        assert all((name, code) in every_code() for name, codes in CODES.items()
                   for code in codes)  # fmt: skip

    def test_a_finding_missing_commit_is_a_commit(self) -> None:
        """What `storyd top` died on: `{"commit": sha}` without a subject."""
        assert evidence_text({"commit": SHA}) == f"commit {SHA}"
        assert evidence_text({"commit": SHA, "tip": "main"}) == f"commit {SHA} on main"

    def test_a_repair_commit_reads_as_before(self) -> None:
        piece = REPAIR_EVIDENCE[0]
        assert evidence_text(piece) == (
            f'commit {SHA} "T2 step 2" patch-id {"c" * 40} committed 2026-01-02T03:04:05Z'
        )
        assert evidence_text(REPAIR_EVIDENCE[1]) == f"rewritten from commit {SHA} (patch-id p)"
        assert evidence_text(REPAIR_EVIDENCE[3]) == "p/journal.md:12: ## Task 3: done"

    def test_a_collapsed_cause_counts_and_lists_some_ids(self) -> None:
        ids = ",".join(f"bd-{n}" for n in range(125))
        text = evidence_text({"count": "125", "tasks": ids})
        assert text.startswith("125 tasks: bd-0, bd-1") and text.endswith("and 115 more")
        mixed = evidence_text({"commit": SHA, "tip": "main", "count": "2", "tasks": "T2,T3"})
        assert mixed == f"commit {SHA} on main; 2 tasks: T2, T3"


class TestNeverRaises:
    """Unknown kinds and missing fields render as `key value`."""

    @pytest.mark.parametrize("piece", ODD, ids=repr)
    def test_odd_evidence(self, piece: object) -> None:
        for text in evidence_lines({"evidence": piece}):
            assert isinstance(text, str) and "\n" not in text
            assert len(text) < 2 * evidence.LONGEST

    def test_unknown_kind_and_missing_fields_are_generic(self) -> None:
        assert evidence_text({"weird": "x", "n": 3}) == "weird x, n 3"
        assert evidence_text({"journal": "j", "line": 3}) == "journal j; line 3"
        assert evidence_text({"rewrittenFrom": "nope"}) == "rewrittenFrom nope"

    def test_a_kind_that_raises_is_generic(self, monkeypatch: pytest.MonkeyPatch) -> None:
        broken = evidence.Kind("broken", ("zz",), (), lambda item: str(1 / 0))
        monkeypatch.setattr(evidence, "KINDS", (broken, *KINDS))
        assert evidence_text({"zz": "1"}) == "zz 1"


class TestOneFunction:
    """The doors render evidence through storyd.core.evidence, not their own copies."""

    def test_plan_text_and_detail_use_it(self) -> None:
        assert plantext.evidence_text is evidence_text
        lines = unitdetail.detail_lines(
            {"format": "epic", "unit": "u", "workspace": "/nowhere", "stateFile": "s.json",
             "findingList": [{"severity": "error", "detector": "commit-in-history",
                              "code": "missing", "task": "T1", "message": "gone",
                              "evidence": {"commit": SHA}}]},
            history_path="/nonexistent/history.db",
        )  # fmt: skip
        assert f"      evidence: commit {SHA}" in lines
