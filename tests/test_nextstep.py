"""`--detail`'s `next` for every format: the five seed formats' fixtures each name a task
their resume point points at (null at all-done), and the derivation rules one by one."""

from __future__ import annotations

from pathlib import Path

import pytest

from storyd.core.formats import all_adapters
from storyd.core.model import DONE, PENDING, Task, Unit
from storyd.core.nextstep import next_of
from storyd.core.pipeline import find_state_files

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SEED_FORMATS = ("session", "issue-plan", "autodev", "checkpoint")


def _task(ident: str, done: bool = False, status: str = "") -> Task:
    return Task(ident, status or ("DONE" if done else "PENDING"), DONE if done else PENDING)


@pytest.mark.parametrize("folder", SEED_FORMATS)
def test_every_seed_fixture_names_a_pending_task_or_none(folder: str) -> None:
    from storyd.core.formats.base import Source

    checked = 0
    for ws in sorted(p for p in (FIXTURES / folder).iterdir() if p.is_dir()):
        for relpath, adapter in find_state_files(str(ws), all_adapters(plugins=False)).items():
            try:
                units = adapter.load(Source(str(ws)), relpath)
            except Exception:
                continue
            for unit in units:
                if unit.error:
                    continue
                found = next_of(unit)
                pending = {t.id for t in unit.tasks if t.bucket != DONE}
                if unit.resume_point == "all-done" or not pending:
                    assert found is None or found["task"] in pending, (ws.name, found)
                else:
                    assert found is not None and found["task"] in pending, (ws.name, unit)
                    assert isinstance(found["why"], str) and found["why"]
                checked += 1
    assert checked, "the premise: the fixtures hold units of this format"


def test_the_seeds_resume_points_name_the_task() -> None:
    tasks = (_task("T1", True), _task("T2"), _task("T3"))
    assert next_of(Unit("epic", "s", "k", tasks))["task"] == "T2"  # type: ignore[index]
    assert next_of(Unit("x", "s", "k", tasks, resume_point="task-T3"))["task"] == "T3"  # type: ignore[index]
    assert next_of(Unit("x", "s", "k", tasks, resume_point="flow/T3:sub"))["task"] == "T3"  # type: ignore[index]
    assert next_of(Unit("x", "s", "k", tasks, resume_point="elsewhere"))["task"] == "T2"  # type: ignore[index]
    fresh = next_of(Unit("x", "s", "k", (_task("A"), _task("B"))))
    assert fresh == {"task": "A", "why": "nothing is done yet: the first task",
                     "status": "PENDING"}
    assert next_of(Unit("x", "s", "k", (_task("A", True),))) is None
    assert next_of(Unit("x", "s", "k", (), error="broken")) is None
    own = {"task": "B", "why": "the producer's rule"}
    assert next_of(Unit("x", "s", "k", tasks, next=own)) is own
