"""A reconcile plan as people read it: per file a unified diff, then per change its
finding and git evidence. `storyd reconcile` prints it; `storyd top` shows it (`r`)."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.api.reconcile.plan import Plan

__all__ = ["evidence_text", "plan_text"]


def evidence_text(item: dict[str, object]) -> str:
    """One piece of a finding's evidence in one line (a commit, a journal line, an output)."""
    if "commit" in item:
        return (
            f'commit {item["commit"]} "{item["subject"]}" patch-id {item["patchId"]} '
            f"committed {item['committedAt']}"
        )
    if "rewrittenFrom" in item:
        old = item["rewrittenFrom"]
        assert isinstance(old, dict)
        return f"rewritten from commit {old['commit']} (patch-id {old['patchId']})"
    if "journal" in item:
        return f"{item['journal']}:{item['line']}: {item['text']}"
    if "output" in item:
        return f"output {item['output']} status {item['status']!r} written {item['written']}"
    return ", ".join(f"{k} {v}" for k, v in item.items())


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
