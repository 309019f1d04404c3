"""Markdown checkbox lines, as the spec-kit and Kiro `tasks.md` files write them.

A checkbox line is a bullet (`-`, `*` or `+`, any indent) followed by `[c]` where `c`
is one character: `- [ ] T001 ...`, `  - [X] T002a ...`, `- [-] 3. ...`. What counts
as a task, and what each mark means, is the format's own rule; this module only
splits the line. Links (`- [spec.md](./spec.md)`) and legends (`- [P] tasks = ...`,
`- [Story]`) are checkbox-shaped only in part: the caller decides by the mark.
"""

from __future__ import annotations

__all__ = ["Box", "boxes", "repeated", "struck_or_moved", "token"]

_BULLETS = frozenset("-*+")


class Box:
    """One checkbox line: its 1-based line number, indent, mark, the text after it and
    the markdown heading it is under (`Phase 2: Foundational`; "" before any)."""

    __slots__ = ("heading", "indent", "line", "mark", "text")

    def __init__(self, line: int, indent: int, mark: str, text: str) -> None:
        self.line = line
        self.indent = indent
        self.mark = mark
        self.text = text
        self.heading = ""


def _box(number: int, line: str) -> Box | None:
    stripped = line.lstrip(" \t")
    if len(stripped) < 5 or stripped[0] not in _BULLETS or stripped[1:3] != " [":
        return None
    if stripped[4] != "]":
        return None
    rest = stripped[5:]
    if rest and rest[0] not in " \t*":
        return None  # `- [x](link)`: a link, not a box
    return Box(number, len(line) - len(stripped), stripped[3], rest)


def boxes(text: str) -> list[Box]:
    """Every checkbox line of a markdown text, in order (fenced code blocks skipped)."""
    found: list[Box] = []
    fenced = False
    heading = ""
    for number, line in enumerate(text.splitlines(), 1):
        if ("`" in line or "~" in line) and line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif line[:1] == "#" and not fenced:
            heading = line.lstrip("#").strip()
        elif "[" in line and not fenced and (box := _box(number, line)) is not None:
            box.heading = heading
            found.append(box)  # ("[" first: most lines are prose, skipped in C)
    return found


def token(text: str) -> tuple[str, str]:
    """The first word of a box's text without markdown emphasis, and the rest."""
    word, _, rest = text.strip().partition(" ")
    return word.strip("*_`"), rest.strip()


def struck_or_moved(text: str) -> str | None:
    """Why a ticked item may not be implemented work: struck through, or moved away."""
    if "~~" in text:
        return "struck through"
    upper = text.upper()
    for word in ("MOVED TO", "DEFERRED TO", "NO LONGER APPLICABLE", "SUPERSEDED", "OBSOLETE"):
        if word in upper:
            return word.lower()
    return None


def repeated(noun: str, ident: str, line: int, first: int) -> str:
    """The message of a box whose id an earlier box had (a `duplicate-task-id`, raised
    by each format where it declares the code): the later one is not counted."""
    return (f"{noun} {ident} appears again at line {line} (first at line {first}); "
            "the later one is not counted")  # fmt: skip
