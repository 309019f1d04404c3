"""What every real corpus file must give, shared by the realworld4 tests.

    answers_agree(ws, relpath, label)          the resume answer names the unit's next task
    torn_and_garbled(ws, relpath, state, swap)  the file cut at five places and garbled:
                                               units (each answered) or a one-file DataError
"""

from __future__ import annotations

from pathlib import Path

from storyd.api.answers import Options, resume_unit
from storyd.core.errors import DataError
from storyd.core.formats import adapter_for
from storyd.core.formats.base import Source
from storyd.core.model import DONE

__all__ = ["answers_agree", "torn_and_garbled"]


def answers_agree(ws: Path, relpath: str, label: str) -> None:
    """The resume answer agrees with the unit's next task (as for realworld3)."""
    answer = resume_unit(str(ws), relpath, None, Options())
    point, unit = answer.envelope["resumePoint"], answer.unit
    if point.startswith("task-"):
        assert unit.next is not None and point == f"task-{unit.next['task']}", label
        assert unit.next["task"] in {t.id for t in unit.tasks if t.bucket != DONE}, label
    else:
        assert point in ("fresh-start", "all-done", "blocked"), (label, point)


def torn_and_garbled(ws: Path, relpath: str, state: str, swap: bytes) -> dict[str, int]:
    """`relpath` cut at five places, then with three `-` made `\\xff` and two `swap`
    bytes made `{`; after each, `state` loads to units (each answered) or is refused
    with a DataError naming it, never another exception. How many of each."""
    outcomes = {"units": 0, "refused": 0}
    data = (ws / relpath).read_bytes()
    variants = [data[: len(data) * k // 6] for k in range(1, 6)]
    variants.append(data.replace(b"-", b"\xff", 3).replace(swap, b"{", 2))
    for variant in variants:
        (ws / relpath).write_bytes(variant)
        try:
            units = adapter_for(state).load(Source(str(ws)), state)
        except DataError as exc:
            assert state in exc.message, state
            outcomes["refused"] += 1
            continue
        for unit in units:
            resume_unit(str(ws), state, unit.key, Options())
        outcomes["units"] += 1
    return outcomes
