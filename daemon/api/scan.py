"""Whole workspaces read here, without a daemon: what `list` would show.

`storyd status`, `check` and `list` read directly when no daemon runs. The same read as
the daemon's (daemon/core/pipeline.py), the same detectors (daemon/api/detection.py) and the
same summaries (daemon/api/summaries.py), with none of the long-running daemon's machinery:
no cache, no threads of its own: the detectors run inline on the main thread under an
alarm (elsewhere on their owner thread, started only when a unit needs the detectors).
"""

from __future__ import annotations

import os

from storyd.api.summaries import unit_summary
from storyd.core import pipeline, storytime
from storyd.core.envelope import point_of, stale_warnings
from storyd.core.errors import StateFileMissing, StorydError
from storyd.core.formats import all_adapters
from storyd.core.model import DONE

TYPE_CHECKING = False  # `typing` costs a hook's direct path start-up time (daemon/core/model.py)
if TYPE_CHECKING:
    from collections.abc import Callable

    from storyd.config import Config
    from storyd.core.model import Finding, Unit
    from storyd.core.pipeline import Answer, Detect, Options
    from storyd.core.wire import UnitSummary
    from storyd.detectors.runner import Runner

__all__ = ["scan_workspaces"]


def scan_workspaces(
    workspaces: list[str],
    cfg: Config,
    staleness: str | None = None,
    on_unit: Callable[[], None] | None = None,
    *,
    in_flight: bool = False,
    codes: frozenset[str] | None = None,
) -> tuple[list[UnitSummary], list[dict[str, object]]]:
    """Every unit of the workspaces (summaries with their findings), detectors included,
    and the state files that do not parse (as the `list` op's `unreadable`); `on_unit`
    is called as each unit is built (a progress line counts them). `in_flight`: a
    finished unit (resume point all-done) is left out before git or a detector is asked
    about it; the detectors are built at the first unit that needs them. `codes`: the
    caller reads only findings of these codes, so only the detectors that declare one of
    them run (a unit's other findings are then incomplete)."""
    mode = staleness or cfg.staleness
    dating = mode
    if codes is not None and mode == storytime.GIT:
        from storyd.api.detection import dates_read

        # no finding read depends on the envelope's dates: git is not asked for them
        dating = mode if dates_read(codes) else storytime.MTIME
    options = pipeline.Options(cfg.limits.lock_timeout, dating)
    from storyd.config.history import database_of
    from storyd.core import switches

    switches.configure(max_state_bytes=cfg.limits.max_state_bytes)  # the daemon's cap
    database = database_of(cfg.history)  # where the daemon records, as configured
    detectors = _Detectors(cfg, mode, codes)
    scan = _Scan(options, detectors, on_unit, in_flight, database)
    try:
        for path in workspaces:
            if os.path.isdir(path):
                scan.workspace(os.path.realpath(path))
        return scan.units, scan.unreadable
    finally:
        detectors.close()


class _Detectors:
    """The detect callback (daemon/api/detection.py), built on first use: a scan with
    nothing in flight imports no detector (and, off the main thread, starts no thread).
    One pass over every unit: the runner's git views read each tip once (`tips_held_by`)."""

    def __init__(self, cfg: Config, mode: str, codes: frozenset[str] | None) -> None:
        self._cfg = cfg
        self._mode = mode
        self._codes = codes
        self._built: tuple[Detect, Runner, Callable[[bool], None]] | None = None

    def build(self) -> tuple[Detect, Runner, Callable[[bool], None]]:
        """The detectors, imported and started (once)."""
        if self._built is None:
            from storyd.api.detection import build_detect, tips_held_by

            detect, runner = build_detect(self._cfg, self._mode, self._codes, inline=True)
            self._built = (detect, runner, tips_held_by(runner))
            self._built[2](True)
        return self._built

    def __call__(self, workspace: str, unit: Unit, answer: Answer) -> tuple[Finding, ...]:
        return self.build()[0](workspace, unit, answer)

    def close(self) -> None:
        if self._built is not None:
            _detect, runner, hold = self._built
            try:
                hold(False)
            finally:
                runner.close()


class _Scan:
    """One scan's units, unreadable files and unit count (each unit's `generation`)."""

    def __init__(self, options: Options, detect: Detect, on_unit: Callable[[], None] | None,
                 in_flight: bool, database: str | None) -> None:  # fmt: skip
        self.database = database  # the history's (None: [history] is off)
        self.options = options
        self.detect = detect
        self.on_unit = on_unit
        self.in_flight = in_flight
        self.units: list[UnitSummary] = []
        self.unreadable: list[dict[str, object]] = []
        self.seen = 0

    def workspace(self, workspace: str) -> None:
        found = pipeline.find_state_files(workspace, all_adapters())
        broken: list[dict[str, object]] = []
        read: list[list[Unit]] = []
        for relpath, adapter in found.items():
            got = pipeline.read_file(workspace, adapter, relpath, self.options)
            error = got.error
            if isinstance(error, StateFileMissing) or (error is not None and error.code == 64):
                continue  # gone meanwhile, or a link out of the workspace
            if error is not None:
                broken.append({"workspace": workspace, "stateFile": relpath,
                               "format": adapter.name, "error": error.message, "since": None,
                               "units": 0})  # fmt: skip
                continue
            read.append(got.units or [])
        shown = [u for units in read for u in units if self._shown(u)]
        if self.options.staleness == storytime.GIT:
            # git answers every story file at once, beside the detectors' imports
            storytime.prefetch(workspace, _dated(workspace, shown))
        if any(not u.error for u in shown) and isinstance(self.detect, _Detectors):
            self.detect.build()
        for units in read:
            # the progress the recording daemon's history says a write lost (`regressed`)
            lost = _lost_progress(workspace, units, self.database)
            storytime.pin(workspace)  # one look at git for every unit of this file
            try:
                for unit in units:
                    self.unit(workspace, unit, lost.get((unit.state_file, unit.key), ()))
            finally:
                storytime.unpin(workspace)
        self.unreadable.extend(sorted(broken, key=lambda b: str(b["stateFile"])))

    def _shown(self, unit: Unit) -> bool:
        """Whether the unit is summarised (in flight, unless all are asked for)."""
        return not (self.in_flight and not unit.error and point_of(unit) == "all-done")

    def unit(self, workspace: str, unit: Unit, extra: tuple[Finding, ...]) -> None:
        self.seen += 1
        if self._shown(unit):
            summary = _summary(workspace, unit, self.options, self.detect, self.seen, extra)
            self.units.append(summary)
        if self.on_unit is not None:
            self.on_unit()


def _lost_progress(
    workspace: str, units: list[Unit], database: str | None
) -> dict[tuple[str, str], tuple[Finding, ...]]:
    """storyd.api.history.lost_progress from `database`; with none (no recording daemon
    ever ran, [history] off), none, without importing sqlite3 (a hook's direct read)."""
    if not units or database is None or not os.path.exists(database):
        return {}
    from storyd.api.history import lost_progress

    return lost_progress(workspace, units, database)


def _dated(workspace: str, units: list[Unit]) -> list[str]:
    """The story files whose staleness will ask git: envelope.stale_warnings' own test,
    run with a commit time that only notes the question."""
    asked: list[str] = []
    for unit in units:
        done = [t for t in unit.tasks if t.bucket == DONE]
        if unit.error or not unit.story_file or not done:
            continue
        story = unit.story_file

        def ask(story: str = story) -> None:
            asked.append(story)

        stale_warnings(done, storytime.mtime_seconds(os.path.join(workspace, story)), ask)
    return asked


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
