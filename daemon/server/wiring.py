"""Assemble detectors and engines from a configuration, for the daemon and for the
daemon-less commands (`status`, `check` and `list` read directly when no daemon runs).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING

from daemon import answers
from daemon.server.engine import Engine, Entry

if TYPE_CHECKING:
    from daemon.config import Config
    from daemon.model import Finding, Unit
    from daemon.pipeline import Detect
    from detectors import Runner

__all__ = ["build_detect", "scan_directly", "tips_held_by"]


def build_detect(cfg: Config, staleness: str) -> tuple[Detect, Runner]:
    """The engine's detect callback and the Runner behind it (close it when done)."""
    import detectors
    from daemon.gitstate import held_lock_findings
    from detectors.gitview import close_views, git_context

    settings = cfg.detectors
    lock_wait = cfg.limits.git_lock_wait
    runner = detectors.Runner(
        detectors.load(settings),
        {name: dict(table) for name, table in settings.items()},
        context_factory=git_context,
        on_exit=close_views,
    )

    def detect(workspace: str, unit: Unit, answer: answers.Answer) -> tuple[Finding, ...]:
        found = runner.run(workspace, unit, answer.envelope, staleness)
        return found + held_lock_findings(workspace, lock_wait)

    return detect, runner


def tips_held_by(runner: Runner) -> Callable[[bool], None]:
    """The engine's pass hook: during a pass over many units, the runner's git views read
    each tip once (detectors.gitview.hold_tips)."""
    from detectors.gitview import hold_tips

    def hold(on: bool) -> None:
        with suppress(TimeoutError):  # a stuck worker is replaced; the new one holds nothing
            runner.submit(lambda local: hold_tips(local, on))

    return hold


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
