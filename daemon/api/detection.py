"""The detectors, assembled from a configuration: the detect callback the engine and the
direct reads call, and the pass hook that makes a pass read each git tip once.

Outside daemon/server/ so that the direct read (`storyd resume --direct --detail`, the
Python client's fallback, reconcile) needs nothing of the long-running daemon; GitPython
and the detectors are imported only when `build_detect` is called.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storyd.config import Config
    from storyd.core.model import Finding, Unit
    from storyd.core.pipeline import Answer, Detect
    from storyd.detectors.runner import Runner

__all__ = ["build_detect", "tips_held_by"]


def build_detect(
    cfg: Config, staleness: str, codes: frozenset[str] | None = None
) -> tuple[Detect, Runner]:
    """The engine's detect callback and the Runner behind it (close it when done); with
    `codes`, only the detectors that declare one of them run (storyd.detectors.load)."""
    from storyd import detectors
    from storyd.core.gitstate import held_lock_findings, operation_findings
    from storyd.detectors.gitview import close_views, git_context
    from storyd.detectors.runner import Runner

    settings = cfg.detectors
    lock_wait = cfg.limits.git_lock_wait
    runner = Runner(
        detectors.load(settings, codes),
        {name: dict(table) for name, table in settings.items()},
        context_factory=git_context,
        on_exit=close_views,
    )

    def detect(workspace: str, unit: Unit, answer: Answer) -> tuple[Finding, ...]:
        under_way = operation_findings(workspace)
        if under_way:  # HEAD is transient: no "unreachable" from it; checked when it ends
            return under_way
        found = runner.run(workspace, unit, answer.envelope, staleness)
        return found + held_lock_findings(workspace, lock_wait)

    return detect, runner


def tips_held_by(runner: Runner) -> Callable[[bool], None]:
    """The engine's pass hook: during a pass over many units, the runner's git views read
    each tip once (storyd.detectors.gitview.hold_tips)."""
    from storyd.detectors.gitview import hold_tips

    def hold(on: bool) -> None:
        with suppress(TimeoutError):  # a stuck worker is replaced; the new one holds nothing
            runner.submit(lambda local: hold_tips(local, on))

    return hold
