"""`storyd status`: every unit with a progress bar, its resume point and its findings."""

from __future__ import annotations

import sys

from storyd.cli.common import REPORT_FLAGS, parse_prefixed, units
from storyd.core.flags import SWITCH

__all__ = ["FLAGS", "main", "render"]

USAGE = (
    "usage: storyd status [--workspace DIR ...] [--in-flight] [--json] [--direct]\n"
    "                     [--config FILE] [--socket PATH] [--timeout MS] [--staleness git|mtime]\n"
    "                     [--quiet]"
)
FLAGS = {**REPORT_FLAGS, "json": SWITCH}
_BAR = 20
_COLORS = {"error": "31", "warning": "33", "info": "36", "done": "32", "dim": "2"}


def _paint(text: str, tone: str, color: bool) -> str:
    return f"\033[{_COLORS[tone]}m{text}\033[0m" if color else text


def _bar(done: int, total: int) -> str:
    filled = _BAR * done // total if total else 0  # floored, as the percentage
    return "[" + "#" * filled + "-" * (_BAR - filled) + "]"


def render(
    units: list[dict[str, object]], color: bool, unreadable: list[dict[str, object]] | None = None
) -> str:
    """The human-readable screen, grouped by workspace; state files that do not parse
    last, one `UNREADABLE` line each."""
    from storyd.cli.common import unreadable_line

    broken = [_paint(unreadable_line(e, full_path=True), "error", color) for e in unreadable or ()]
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
            lines.append(_paint(str(workspace), "dim", color))
        done, total = int(unit["done"]), int(unit["total"])  # type: ignore[call-overload]
        # floored, as every format's `progress` label (the seeds' shell arithmetic)
        percent = f"{100 * done // total:3d}%" if total else "  -%"
        point = str(unit["resumePoint"] or "unreadable")
        tone = "done" if point == "all-done" else None
        head = (
            f"  {unit['format']:<10} {unit['unit']!s:<{width}}  {_bar(done, total)} "
            f"{done:>3}/{total:<3} {percent}  "
        )
        lines.append(head + (_paint(point, tone, color) if tone else point))
        if unit.get("error"):
            lines.append("      " + _paint(f"error: {unit['error']}", "error", color))
        for finding in unit.get("findingList") or []:  # type: ignore[attr-defined]
            severity = str(finding["severity"])
            task = f" {finding['task']}" if finding.get("task") else ""
            text = (
                f"{severity:<7} {finding['detector']}/{finding['code']}{task}: {finding['message']}"
            )
            lines.append("      " + _paint(text, severity, color))
    return "\n".join(lines + broken) + "\n"


def main(argv: list[str]) -> int:
    """Print every unit (from the daemon, or read here when none runs)."""
    flags = parse_prefixed(argv, FLAGS, USAGE)
    found = units(flags)
    if flags.get("json"):
        import orjson

        body = {"units": found.units, "source": found.source, "unreadable": found.unreadable}
        sys.stdout.write(orjson.dumps(body).decode() + "\n")
        return 0
    from storyd.cli.terminal import color_on

    color = color_on(sys.stdout)
    sys.stdout.write(render(found.units, color, found.unreadable))
    return 0
