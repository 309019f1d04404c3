"""Text every door shows the same way: the progress bar, the colours, the status screen,
check's report (its evidence through storyd.core.evidence, as every door's), the
UNREADABLE line.

Here, under the doors, because several doors print it: `storyd status` and `storyd fleet
status` share the bar and the colours, `storyd check` and the MCP `check` tool the
report. A door may not import another door (the command line is a leaf), so text two
doors share lives in the layer both stand on. Nothing here reads or asks anything.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.api.check import Checked

__all__ = ["bar", "check_text", "paint", "status_text", "unreadable_line"]

BAR = 20
COLORS = {"error": "31", "warning": "33", "info": "36", "done": "32", "dim": "2"}


def paint(text: str, tone: str, color: bool) -> str:
    """`text` in the tone's ANSI colour when `color`, else as it is."""
    return f"\033[{COLORS[tone]}m{text}\033[0m" if color else text


def bar(done: int, total: int, cells: int = BAR) -> str:
    """`[#####---------------]`: `cells` cells, floored as the percentage is."""
    filled = cells * done // total if total else 0
    return "[" + "#" * filled + "-" * (cells - filled) + "]"


def unreadable_line(entry: dict[str, object], *, full_path: bool = False) -> str:
    """`UNREADABLE <stateFile>: <error>`, and the last good units still served."""
    where = str(entry.get("stateFile"))
    if full_path:
        where = f"{entry.get('workspace')}/{where}"
    line = f"UNREADABLE {where}: {entry.get('error')}"
    served = entry.get("units")
    if isinstance(served, int) and served:
        since = f" since {entry['since']}" if entry.get("since") else ""
        line += f" (serving {served} last good unit{'s' * (served != 1)}{since})"
    return line


def status_text(
    units: list[dict[str, object]], color: bool, unreadable: list[dict[str, object]] | None = None
) -> str:
    """`storyd status`'s screen, grouped by workspace; state files that do not parse
    last, one `UNREADABLE` line each."""
    broken = [paint(unreadable_line(e, full_path=True), "error", color) for e in unreadable or ()]
    if not units:
        if broken:
            return "\n".join(broken) + "\n"
        return "no units found (no state files of a supported format)\n"
    lines: list[str] = []
    workspace = None
    width = max(len(str(u["unit"])) for u in units)
    for unit in units:
        if unit["workspace"] != workspace:
            workspace = unit["workspace"]
            lines.append(paint(str(workspace), "dim", color))
        done, total = int(unit["done"]), int(unit["total"])  # type: ignore[call-overload]
        # floored, as every format's `progress` label (the seeds' shell arithmetic)
        percent = f"{100 * done // total:3d}%" if total else "  -%"
        point = str(unit["resumePoint"] or "unreadable")
        tone = "done" if point == "all-done" else None
        head = (
            f"  {unit['format']:<10} {unit['unit']!s:<{width}}  {bar(done, total)} "
            f"{done:>3}/{total:<3} {percent}  "
        )
        lines.append(head + (paint(point, tone, color) if tone else point))
        if isinstance(unit.get("claim"), dict):  # storyd.api.claimview
            lines.append("      " + _claim_line(unit["claim"], color))  # type: ignore[arg-type]
        if unit.get("error"):
            lines.append("      " + paint(f"error: {unit['error']}", "error", color))
        for finding in unit.get("findingList") or []:  # type: ignore[attr-defined]
            severity = str(finding["severity"])
            task = f" {finding['task']}" if finding.get("task") else ""
            text = (
                f"{severity:<7} {finding['detector']}/{finding['code']}{task}: {finding['message']}"
            )
            lines.append("      " + paint(text, severity, color))
    return "\n".join(lines + broken) + "\n"


def _claim_line(field: dict[str, object], color: bool) -> str:
    from storyd.api.claimview import claim_text

    text = claim_text(field)
    return paint(text, "warning", color) if field.get("state") == "abandoned" else text


def check_text(checked: Checked) -> str:
    """`storyd check`'s report: one line per problem (and noted finding), each followed
    by its evidence (storyd.core.evidence), the unreadable state files, then the count."""
    from storyd.core.evidence import evidence_lines

    lines = []
    for unit, finding in checked.reported:
        where = f"{unit['workspace']}/{unit['stateFile']} {unit['unit']}"
        if finding is None:
            lines.append(f"{where}: error: {unit['error']}\n")
        else:
            lines.append(
                f"{where}: {finding['severity']}: {finding['detector']}/"
                f"{finding['code']}: {finding['message']}\n"
            )
            lines.extend(f"  evidence: {text}\n" for text in evidence_lines(finding))
    unreadable = checked.found.unreadable
    lines.extend(unreadable_line(entry, full_path=True) + "\n" for entry in unreadable)
    broken = len(unreadable)
    also = f" ({broken} unreadable state file{'s' * (broken != 1)})" if broken else ""
    lines.append(f"{len(checked.found.units)} units, {checked.problems} problems{also}\n")
    return "".join(lines)
