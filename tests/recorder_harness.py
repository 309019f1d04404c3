"""A history recorder on its own database, and the epic unit its tests feed it: story
0049-0001's three tasks, the first `done` of them DONE."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from epic_state_harness import STATE

STORY = "story-0049-0001"
T1, T2, T3 = "TASK-0049-0001-001", "TASK-0049-0001-002", "TASK-0049-0001-003"


def unit(done: int) -> Any:
    """The story as a Unit, its first `done` tasks DONE, the rest PENDING."""
    from storyd.core.model import DONE, PENDING, Task, Unit

    tasks = tuple(Task(tid, "DONE" if n < done else "PENDING", DONE if n < done else PENDING)
                  for n, tid in enumerate((T1, T2, T3)))  # fmt: skip
    return Unit("epic", STATE, STORY, tasks)


def recorder(db: Path) -> Any:
    """A Recorder writing `db`, with [history]'s defaults (not started)."""
    from storyd.api import history_db
    from storyd.config.history import History
    from storyd.server.recorder import Recorder

    return Recorder(history_db.open_writer(str(db)), History())
