"""`check`: the problems among some units: warning and error findings, units that did
not read, state files that do not parse (what `storyd check` and the MCP `check` tool
report, with exit code 1 when there are any). A `claim-lost` (a unit's state written by
an owner while another held the current grant: storyd.api.claimview) is a warning.

Info findings are not problems; the `story-finished` and `operation-in-progress` ones
are reported all the same (facts a CI must not act against).
"""

from __future__ import annotations

from storyd.api.units import Progress, Units, units

__all__ = ["FAILING", "NOTED", "Checked", "check"]

FAILING = frozenset(("warning", "error"))
NOTED = frozenset(("story-finished", "operation-in-progress"))
"""Info findings check reports (without failing): a finished story; a git operation
stopped mid-way, during which the commits are not checked (storyd.core.gitstate)."""


class Checked:
    """The units read (`found`), what is reported about them in order (each a unit
    summary with the finding, or None for the unit's own error), and how many problems
    that makes."""

    __slots__ = ("found", "problems", "reported")

    def __init__(self, found: Units) -> None:
        from storyd.api.claimview import attach

        attach(found.units)  # claim-lost is a finding of the unit written under another's grant
        self.found = found
        self.reported: list[tuple[dict[str, object], dict[str, object] | None]] = []
        problems = 0
        for unit in found.units:
            if unit.get("error"):
                problems += 1
                self.reported.append((unit, None))
            for finding in unit.get("findingList") or []:  # type: ignore[attr-defined]
                failing = finding["severity"] in FAILING
                if failing or finding["code"] in NOTED:
                    problems += failing
                    self.reported.append((unit, finding))
        self.problems = problems + len(found.unreadable)

    @property
    def code(self) -> int:
        """The exit code: 1 when there are problems."""
        return 1 if self.problems else 0

    def findings(self) -> list[dict[str, object]]:
        """Every finding of every unit (not only the problems), each with its unit."""
        return [
            {"stateFile": u["stateFile"], "unit": u["unit"], **f}
            for u in self.found.units
            for f in u.get("findingList") or []  # type: ignore[attr-defined]
        ]


def check(
    workspaces: list[str] | None = None,
    *,
    in_flight: bool = False,
    direct: bool = False,
    staleness: str | None = None,
    socket: str | None = None,
    timeout: float = 2.0,
    config: str | None = None,
    progress: Progress | None = None,
) -> Checked:
    """The problems of the units `units()` finds with the same arguments."""
    found = units(
        workspaces, in_flight=in_flight, direct=direct, staleness=staleness, socket=socket,
        timeout=timeout, config=config, progress=progress,
    )  # fmt: skip
    return Checked(found)
