"""The units to reconcile and their findings, read now: the same direct reads and detector
runner as `storyd resume --direct --detail` and `storyd check --direct`.
"""

from __future__ import annotations

import os

from storyd.api import answers
from storyd.api.detection import build_detect
from storyd.api.history import lost_progress
from storyd.api.reconcile.plan import Seen
from storyd.config import Config
from storyd.core import target
from storyd.core.errors import LockTimeout, StorydError
from storyd.core.formats.base import Adapter
from storyd.core.model import Finding, Unit
from storyd.core.pipeline import find_state_files, read_file

__all__ = ["Seen", "Selection", "gather"]

Found = list[tuple[Unit, tuple[Finding, ...]]]


class Selection:
    """Which units: one epic story, one state file (optionally one unit), or everything."""

    __slots__ = ("epic", "state_file", "story", "unit")

    def __init__(
        self,
        *,
        epic: str | None = None,
        story: str | None = None,
        state_file: str | None = None,
        unit: str | None = None,
    ) -> None:
        self.epic = epic
        self.story = story
        self.state_file = state_file
        self.unit = unit

    def as_dict(self) -> dict[str, object]:
        """What was asked for."""
        return {
            "epicId": self.epic,
            "storyId": self.story,
            "stateFile": self.state_file,
            "unit": self.unit,
        }


def _units(workspace: str, adapter: Adapter, relpath: str, options: answers.Options,
           seen: Seen) -> list[Unit]:
    """One state file's units under the writers' lock; `seen` keeps the file's identity
    and version as read, for the plan to check that it still reads the same file."""
    read = read_file(workspace, adapter, relpath, options)
    if read.error is not None:
        raise read.error
    assert read.units is not None
    seen[relpath] = read.signature
    return read.units


def _read(workspace: str, selection: Selection, options: answers.Options,
          seen: Seen) -> list[Unit]:
    """The selected units, read under the writers' lock (LockTimeout propagates)."""
    where = None
    if selection.state_file is not None:
        where = target.for_state_file(workspace, selection.state_file, selection.unit)
    elif selection.epic is not None:
        where = target.for_epic(workspace, selection.epic, str(selection.story))
    if where is not None:
        units = _units(workspace, where.adapter, where.relpath, options, seen)
        return units if where.key is None else [where.pick(units)]
    from storyd.core.formats import all_adapters

    found = find_state_files(workspace, all_adapters())
    units = []
    for relpath, adapter in sorted(found.items()):
        try:
            units.extend(_units(workspace, adapter, relpath, options, seen))
        except LockTimeout:
            raise
        except StorydError:
            continue  # unreadable without a fallback: nothing to plan from (status says why)
    return units


def gather(workspace: str, selection: Selection, cfg: Config, lock_timeout: float,
           seen: Seen | None = None) -> Found:
    """Each selected unit with its format findings and its detectors' findings; `seen`
    receives each state file's signature as read (under the lock).

    A writer holding its lock past `lock_timeout` raises LockTimeout (exit 75).
    """
    workspace = os.path.realpath(workspace)
    options = answers.Options(lock_timeout, cfg.staleness)
    units = _read(workspace, selection, options, {} if seen is None else seen)
    found: Found = []
    # `regressed`: progress history says was lost (a gone unit only when whole files)
    whole = selection.epic is None and selection.unit is None
    lost = lost_progress(workspace, units, whole_files=whole)
    detect_units, runner = build_detect(cfg, cfg.staleness)
    try:
        for unit in units:
            regressed = lost.get((unit.state_file, unit.key), ())
            try:
                answer = answers.answer(workspace, unit, options)
            except StorydError:
                found.append((unit, unit.findings + regressed))
                continue
            findings = answers.with_detectors(workspace, answer, detect_units).findings
            found.append((unit, findings + regressed))
    finally:
        runner.close()
    return found
