"""The autodev flow's own step list, when the workspace carries the flow file.

Seed 003 counts 11 greenfield steps, 17 existing-code, 6 meta-repo; its producer's later
flows have more (greenfield grew a `16.5`, Implement moved). The seed names where each
flow's steps live: `flows/<flow>.md` beside the autodev skill, in its "Step Reference
Table". When a workspace carries that file, its table is the truth for the progress; else
the seed's counts are. This module finds and reads the table; nothing else.
"""

from __future__ import annotations

import os

from storyd.core.formats.base import Source
from storyd.core.regular import read_regular

__all__ = [
    "FLOW_DIRS",
    "PRODUCER_TABLES",
    "FlowTable",
    "find_flow_table",
    "parse_step_table",
    "producer_table",
]

FLOW_DIRS = (".claude", ".cursor", ".agents", ".codex", ".github", ".windsurf")
"""Agent folders a skill lives under: <dir>/skills/autodev/flows/<flow>.md."""
_LIMIT = 256 * 1024


class FlowTable:
    """A flow's steps in order (`1` ... `16.5` ... as written) and where they came from:
    `path` (a workspace file, or the producer's version) and `origin`, the phrase
    `--detail` uses for it."""

    __slots__ = ("names", "origin", "path", "steps")

    def __init__(self, path: str, steps: list[str], names: list[str], origin: str = "") -> None:
        self.path = path
        self.steps = steps
        self.names = names
        self.origin = origin or f"{path}'s Step Reference Table"


_GREENFIELD_1 = (
    "Problem|Research|Plan|UI Design|Decompose|Implement|Run Tests|Security Audit|"
    "Performance Test|Deploy|Retrospective"
)
_GREENFIELD_3 = (
    "Problem|Research|Plan|UI Design|Test Spec|Decompose|Implement|"
    "Code Testability Revision|Decompose Tests|Implement Tests|Run Tests|Test-Spec Sync|"
    "Update Docs|Security Audit|Performance Test|Deploy|Release|Retrospective"
)
_EXISTING_NAMES = (
    "Document|Architecture Baseline Scan|Test Spec|Code Testability Revision|"
    "Decompose Tests|Implement Tests|Run Tests|Refactor|New Task|Implement|Run Tests"
)
_PLAIN = [str(n) for n in range(1, 17)]


def _version(
    label: str, source: str, steps: list[str], names: str
) -> tuple[str, str, list[str], list[str]]:
    listed = names.split("|")
    return label, source, steps, listed + [""] * (len(steps) - len(listed))


PRODUCER_TABLES: dict[str, list[tuple[str, str, list[str], list[str]]]] = {
    "greenfield": [
        _version(
            "2026-04 (the seed's)",
            "azaion/annotations .cursor/skills/autodev/flows/greenfield.md @ 2cb2e61bb19d",
            [str(n) for n in range(1, 12)],
            _GREENFIELD_1,
        ),
        _version(
            "2026-06",
            "azaion/gps-denied-onboard .cursor/skills/autodev/flows/greenfield.md @ 1f634c2604e0",
            [*_PLAIN, "16.5", "17"],
            _GREENFIELD_3,
        ),
    ],
    "existing-code": [
        _version(
            "2026-04 (the seed's)",
            "azaion/satellite-provider .cursor/skills/autodev/flows/existing-code.md (2026-04-22)",
            [str(n) for n in range(1, 18)],
            _EXISTING_NAMES,
        ),
        _version(
            "2026-06",
            "azaion/gps-denied-onboard .cursor/skills/autodev/flows/existing-code.md"
            " @ 1f634c2604e0",
            [*_PLAIN, "16.5", "17"],
            _EXISTING_NAMES,
        ),
    ],
    "meta-repo": [
        _version(
            "2026-04 (the seed's)",
            "azaion/annotations .cursor/skills/autodev/state.md @ 6de692991ad7",
            [str(n) for n in range(1, 7)],
            "|Config Review",
        ),
        _version(
            "2026-05",
            "azaion/missions .cursor/skills/autodev/state.md @ e68d8e7f2d85",
            ["1", "2", "2.5", "3", "3.5", "4", "5", "6"],
            "",
        ),
    ],
}
"""The producer's (azaion's autodev skill) step tables by version, oldest first: the
step labels and, where its flow files name them, the step names. Names left blank are
not published in what was read; they never decide a version."""


def producer_table(flow: str, step: str, name: str) -> FlowTable | None:
    """The producer's later table when the state file proves it (None: the seed's).

    Proof: the step's `name` matches that step in a later version and not in the seed's
    (`step: 7 name: Implement` is the 2026-06 greenfield flow), or the step exists only
    in a later version (`16.5`, greenfield `12`..`17`, meta-repo `2.5`).
    """
    versions = PRODUCER_TABLES.get(flow)
    if not versions or not step:
        return None
    wanted = name.strip().lower()

    def named(version: tuple[str, str, list[str], list[str]]) -> bool:
        _, _, steps, names = version
        return step in steps and bool(wanted) and names[steps.index(step)].lower() == wanted

    seed, later = versions[0], versions[1:]
    chosen, why = None, ""
    if not named(seed):
        for version in reversed(later):
            if named(version):
                chosen, why = version, f"step {step} is named {name.strip()!r} there"
                break
    if chosen is None and step not in seed[2]:
        for version in reversed(later):
            if step in version[2]:
                chosen, why = version, f"step {step} exists only there"
                break
    if chosen is None:
        return None
    label, source, steps, names = chosen
    origin = f"the producer's {flow} table of {label} ({source}), chosen because {why}"
    return FlowTable(f"producer {flow} {label}", steps, names, origin)


def _cells(line: str) -> list[str] | None:
    text = line.strip()
    if not text.startswith("|"):
        return None
    return [c.strip().strip("*`_ ").strip() for c in text.strip("|").split("|")]


def _step(cell: str) -> str | None:
    """`3`, `16.5`, `Step 3`, `**3**` give the step's label; anything else None."""
    text = cell.lower().removeprefix("step").strip().rstrip(".")
    head, dot, tail = text.partition(".")
    if head.isdigit() and (not dot or tail.isdigit()):
        return text
    return None


def _section(text: str) -> list[str]:
    """The lines under the "Step Reference Table" heading, to the next heading of its level
    or above (existing-code splits the table into Phase A and Phase B sub-tables); the
    whole text when there is no such heading."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        level = len(line) - len(line.lstrip("#"))
        if level and "step reference table" in line.lower():
            end = next(
                (
                    j
                    for j in range(i + 1, len(lines))
                    if 0 < len(lines[j]) - len(lines[j].lstrip("#")) <= level
                ),
                len(lines),
            )
            return lines[i + 1 : end]
    return lines


def parse_step_table(text: str) -> tuple[list[str], list[str]]:
    """(step labels, names) from the tables with a Step column under the "Step Reference
    Table" heading (else from the first such table in the file)."""
    section = _section(text)
    whole = len(section) == len(text.splitlines())
    column = None
    steps: list[str] = []
    names: list[str] = []
    for line in section:
        cells = _cells(line)
        if cells is None:
            if steps and whole:
                break  # no heading to bound it: the first table only
            column = None
            continue
        if column is None:
            heads = [c.lower() for c in cells]
            column = next((i for i, h in enumerate(heads) if h in ("step", "#", "step #")), None)
            if column is None:
                column = -1  # a table without a Step column: skipped
            continue
        if column < 0 or column >= len(cells) or set(cells[column]) <= set("-: "):
            continue  # the separator row, or not a step table
        label = _step(cells[column])
        if label is not None and label not in steps:
            steps.append(label)
            names.append(cells[column + 1] if column + 1 < len(cells) else "")
    return steps, names


def find_flow_table(source: Source, flow: str) -> FlowTable | None:
    """The workspace's `<agent dir>/skills/autodev/flows/<flow>.md` table, if any."""
    if not flow or "/" in flow or flow.startswith("."):
        return None
    for folder in FLOW_DIRS:
        relpath = f"{folder}/skills/autodev/flows/{flow}.md"
        path = source.path(relpath)
        inside = os.path.realpath(path).startswith(os.path.realpath(source.workspace) + os.sep)
        if not inside:
            continue
        try:  # absent, a FIFO or device (refused at once), over _LIMIT: no table there
            text = read_regular(path, _LIMIT).decode("utf-8", "replace")
        except OSError:
            continue
        steps, names = parse_step_table(text)
        if steps:
            return FlowTable(relpath, steps, names)
    return None
