"""Whole workspaces read here, without a daemon: what `list` would show.

`storyd status`, `check` and `list` read directly when no daemon runs. The same read as
the daemon's (daemon/core/pipeline.py), the same detectors (daemon/api/detection.py) and the
same summaries (daemon/api/summaries.py), with none of the long-running daemon's machinery:
no cache, no threads of its own beyond the detectors' owner thread.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from storyd.api.summaries import unit_summary
from storyd.core import pipeline, storytime
from storyd.core.errors import StateFileMissing, StorydError
from storyd.core.formats import all_adapters

if TYPE_CHECKING:
    from storyd.config import Config
    from storyd.core.model import Finding, Unit
    from storyd.core.pipeline import Detect, Options
    from storyd.core.wire import UnitSummary

__all__ = ["scan_workspaces"]


def scan_workspaces(
    workspaces: list[str],
    cfg: Config,
    staleness: str | None = None,
    on_unit: Callable[[], None] | None = None,
) -> tuple[list[UnitSummary], list[dict[str, object]]]:
    """Every unit of the workspaces (summaries with their findings), detectors included,
    and the state files that do not parse (as the `list` op's `unreadable`); `on_unit`
    is called as each unit is built (a progress line counts them)."""
    from storyd.api.detection import build_detect, tips_held_by

    mode = staleness or cfg.staleness
    options = pipeline.Options(cfg.limits.lock_timeout, mode)
    detect, runner = build_detect(cfg, mode)
    hold = tips_held_by(runner)
    units: list[UnitSummary] = []
    unreadable: list[dict[str, object]] = []
    hold(True)  # one pass over every unit: one look at each tip
    try:
        for path in workspaces:
            if os.path.isdir(path):
                _scan_one(os.path.realpath(path), options, detect, units, unreadable, on_unit)
        return units, unreadable
    finally:
        hold(False)
        runner.close()


def _scan_one(
    workspace: str,
    options: Options,
    detect: Detect,
    units: list[UnitSummary],
    unreadable: list[dict[str, object]],
    on_unit: Callable[[], None] | None,
) -> None:
    found = pipeline.find_state_files(workspace, all_adapters())
    broken: list[dict[str, object]] = []
    for relpath, adapter in found.items():
        got = pipeline.read_file(workspace, adapter, relpath, options)
        error = got.error
        if isinstance(error, StateFileMissing) or (error is not None and error.code == 64):
            continue  # gone meanwhile, or a link out of the workspace
        if error is not None:
            broken.append({"workspace": workspace, "stateFile": relpath, "format": adapter.name,
                           "error": error.message, "since": None, "units": 0})
            continue
        # the progress the recording daemon's history says a write lost (`regressed`)
        lost = _lost_progress(workspace, got.units or [])
        storytime.pin(workspace)  # one look at git for every unit of this file
        try:
            for unit in got.units or ():
                extra = lost.get((unit.state_file, unit.key), ())
                units.append(_summary(workspace, unit, options, detect, len(units) + 1, extra))
                if on_unit is not None:
                    on_unit()
        finally:
            storytime.unpin(workspace)
    unreadable.extend(sorted(broken, key=lambda b: str(b["stateFile"])))


def _lost_progress(
    workspace: str, units: list[Unit]
) -> dict[tuple[str, str], tuple[Finding, ...]]:
    """storyd.api.history.lost_progress; with no history database (no recording daemon
    ever ran), none, without importing sqlite3 and hashlib (a hook's direct read)."""
    from storyd.core.paths import history_path

    if not units or not os.path.exists(history_path()):
        return {}
    from storyd.api.history import lost_progress

    return lost_progress(workspace, units)


def _summary(
    workspace: str,
    unit: Unit,
    options: Options,
    detect: Detect,
    generation: int,
    extra: tuple[Finding, ...] = (),
) -> UnitSummary:
    try:
        answer = pipeline.answer(workspace, unit, options)
    except StorydError as exc:
        findings = unit.findings + extra
        return unit_summary(workspace, unit, None, findings, exc, generation, detail=True)
    findings = unit.findings + extra + tuple(detect(workspace, unit, answer))
    point = str(answer.envelope["resumePoint"])
    return unit_summary(workspace, unit, point, findings, None, generation, detail=True)
