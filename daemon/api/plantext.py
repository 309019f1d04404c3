"""A reconcile plan as people read it: per file a unified diff, then per change its
finding and git evidence. `storyd reconcile` prints it; `storyd top` shows it (`r`)."""

from __future__ import annotations

from storyd.core.evidence import evidence_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.api.reconcile.plan import Plan

__all__ = ["evidence_text", "plan_text"]


def plan_text(plan: Plan) -> str:
    """The human preview: per file a unified diff, then per change its finding and evidence."""
    out = []
    for file in plan.files:
        out.append(file.diff())
        for repair in file.repairs:
            finding = repair.finding
            assert finding is not None
            what = (
                "restore from .bak"
                if repair.restore is not None
                else "; ".join(c.text() for c in repair.changes)
            )
            task = f" {repair.task}" if repair.task else ""
            out.append(f"# {finding.detector}/{finding.code} {repair.unit}{task}: {what}\n")
            out.append(f"#   finding: {finding.message}\n")
            out.extend(f"#   evidence: {evidence_text(e)}\n" for e in repair.evidence)
    for left in plan.left:
        task = f" {left.finding.task}" if left.finding.task else ""
        out.append(
            f"# left alone: {left.state_file} {left.unit}{task} "
            f"{left.finding.detector}/{left.finding.code}: {left.reason}\n"
        )
    return "".join(out)
