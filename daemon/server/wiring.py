"""Read whole workspaces in this process with an engine, for the daemon-less commands
(`status`, `check` and `list` read directly when no daemon runs). The detectors are
assembled in daemon/detection.py (re-exported here for old imports).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from daemon import answers
from daemon.detection import build_detect, tips_held_by
from daemon.server.engine import Engine, Entry

if TYPE_CHECKING:
    from daemon.config import Config

__all__ = ["build_detect", "scan_directly", "tips_held_by"]


def scan_directly(
    workspaces: list[str],
    cfg: Config,
    staleness: str | None = None,
    on_unit: Callable[[], None] | None = None,
) -> tuple[list[Entry], list[dict[str, object]]]:
    """Every unit of the workspaces, read now in this process, detectors included, and
    the state files that do not parse (as the `list` op's `unreadable`); `on_unit` is
    called as each unit is built (a progress line counts them)."""
    mode = staleness or cfg.staleness
    options = answers.Options(cfg.limits.lock_timeout, mode)
    detect, runner = build_detect(cfg, mode)
    engine = Engine(options, detect=detect)
    if on_unit is not None:
        tick = on_unit
        engine.sinks.append(lambda event, _line: tick() if event["event"] == "changed" else None)
    hold = tips_held_by(runner)
    hold(True)  # one pass over every unit: one look at each tip
    try:
        for path in workspaces:
            if os.path.isdir(path):
                engine.scan(engine.add_workspace(os.path.realpath(path)))
        return engine.entries(), engine.unreadable()
    finally:
        hold(False)
        runner.close()
