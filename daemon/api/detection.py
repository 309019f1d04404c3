"""The detectors, assembled from a configuration: the detect callback the engine and the
direct reads call, and the pass hook that makes a pass read each git tip once.

Outside daemon/server/ so that the direct read (`storyd resume --direct --detail`, the
Python client's fallback, reconcile) needs nothing of the long-running daemon; the
detectors and their git views are imported only when `build_detect` is called.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` costs a hook's direct path start-up time (daemon/core/model.py)
if TYPE_CHECKING:
    from collections.abc import Callable

    from storyd.config import Config
    from storyd.core.model import Finding, Unit
    from storyd.core.pipeline import Answer, Detect
    from storyd.detectors.runner import Runner

__all__ = ["build_detect", "dates_read", "tips_held_by"]


def build_detect(
    cfg: Config, staleness: str, codes: frozenset[str] | None = None, *, inline: bool = False
) -> tuple[Detect, Runner]:
    """The engine's detect callback and the Runner behind it (close it when done); with
    `codes`, only the detectors that declare one of them run (storyd.detectors.load);
    `inline`: run them on this thread under an alarm when it is the main one (a one-shot
    direct scan: detectors/runner.py)."""
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
        inline=inline,
    )

    def detect(workspace: str, unit: Unit, answer: Answer) -> tuple[Finding, ...]:
        under_way = operation_findings(workspace)
        if under_way:  # HEAD is transient: no "unreachable" from it; checked when it ends
            return under_way
        found = runner.run(workspace, unit, answer.envelope, staleness)
        return found + held_lock_findings(workspace, lock_wait)

    return detect, runner


def dates_read(codes: frozenset[str] | None) -> bool:
    """Whether findings of `codes` can depend on the envelope's staleWarnings (its git
    dating of story files): only the staleness detector reads them among storyd's own,
    and a third-party detector might. None: every code is read."""
    if codes is None:
        return True
    from storyd.core import registry
    from storyd.detectors.codes import CODES

    if codes & set(CODES["staleness"]):
        return True
    return any(e.dist is not None for e in registry.get().entries(registry.DETECTORS))


def tips_held_by(runner: Runner) -> Callable[[bool], None]:
    """The engine's pass hook: during a pass over many units, the runner's git views read
    each tip once (storyd.detectors.gitview.hold_tips)."""
    from storyd.detectors.gitview import hold_tips

    def hold(on: bool) -> None:
        try:  # noqa: SIM105 (contextlib imports collections, functools...: a hook's start)
            runner.submit(lambda local: hold_tips(local, on))
        except TimeoutError:  # a stuck worker is replaced; the new one holds nothing
            pass

    return hold
