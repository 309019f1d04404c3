"""The autodev flow's own step list, when the workspace carries the flow file.

Seed 003 counts 11 greenfield steps, 17 existing-code, 6 meta-repo; its producer's later
flows have more (greenfield grew a `16.5`, Implement moved). The seed names where each
flow's steps live: `flows/<flow>.md` beside the autodev skill, in its "Step Reference
Table". When a workspace carries that file, its table is the truth for the progress; else
the seed's counts are. This module finds and reads the table; nothing else.
"""

from __future__ import annotations

import os

from daemon.formats.base import Source

__all__ = ["FLOW_DIRS", "FlowTable", "find_flow_table", "parse_step_table"]

FLOW_DIRS = (".claude", ".cursor", ".agents", ".codex", ".github", ".windsurf")
"""Agent folders a skill lives under: <dir>/skills/autodev/flows/<flow>.md."""
_LIMIT = 256 * 1024


class FlowTable:
    """A flow's steps in order (`1` ... `16.5` ... as written) and where they came from."""

    __slots__ = ("names", "path", "steps")

    def __init__(self, path: str, steps: list[str], names: list[str]) -> None:
        self.path = path
        self.steps = steps
        self.names = names


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


def parse_step_table(text: str) -> tuple[list[str], list[str]]:
    """(step labels, names) from the first markdown table whose header has a Step column."""
    column = None
    steps: list[str] = []
    names: list[str] = []
    for line in text.splitlines():
        cells = _cells(line)
        if cells is None:
            if steps:
                break  # the table ended
            column = None
            continue
        if column is None:
            heads = [c.lower() for c in cells]
            column = next((i for i, h in enumerate(heads) if h in ("step", "#", "step #")), None)
            continue
        if column >= len(cells) or set(cells[column]) <= set("-: "):
            continue  # the separator row
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
        try:
            if not inside or not os.path.isfile(path) or os.path.getsize(path) > _LIMIT:
                continue
            with open(path, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except OSError:
            continue
        steps, names = parse_step_table(text)
        if steps:
            return FlowTable(relpath, steps, names)
    return None
