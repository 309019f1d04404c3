"""Assemble detectors and engines from a configuration, for the daemon and for the
daemon-less commands (`status`, `check` and `list` read directly when no daemon runs).
"""

from __future__ import annotations

import os

from daemon import direct
from daemon.engine import Detect, Engine, Entry

__all__ = ["build_detect", "scan_directly"]


def build_detect(cfg: object, staleness: str) -> tuple[Detect, object]:
    """The engine's detect callback and the Runner behind it (close it when done)."""
    from detectors import Runner, load
    from detectors.gitview import close_views, git_context

    settings = cfg.detectors  # type: ignore[attr-defined]
    runner = Runner(
        load(settings),
        {name: dict(table) for name, table in settings.items()},
        context_factory=git_context,
        on_exit=close_views,
    )

    def detect(workspace: str, unit: object, answer: direct.Answer) -> tuple[object, ...]:
        return runner.run(workspace, unit, answer.envelope, staleness)  # type: ignore[arg-type]

    return detect, runner  # type: ignore[return-value]


def scan_directly(workspaces: list[str], cfg: object, staleness: str | None = None) -> list[Entry]:
    """Every unit of the workspaces, read now in this process, detectors included."""
    mode = staleness or cfg.staleness  # type: ignore[attr-defined]
    options = direct.Options(cfg.limits.lock_timeout, mode)  # type: ignore[attr-defined]
    detect, runner = build_detect(cfg, mode)
    engine = Engine(options, detect=detect)
    try:
        for path in workspaces:
            if os.path.isdir(path):
                engine.scan(engine.add_workspace(os.path.realpath(path)))
        return engine.entries()
    finally:
        runner.close()  # type: ignore[attr-defined]
