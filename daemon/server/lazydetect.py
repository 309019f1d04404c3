"""The daemon's detectors, loaded on first use: after the socket serves, off the first
answer's path (issue 43).

Importing the detectors and their plugins (their git views, a third party's modules)
cost the daemon's start-up 10-80 ms before the socket listened, though a plain `resume`
asks for none of it. `Detectors` gives the engine its detect callback and pass hook at
once and builds the real ones (api.detection.build_detect) the first time either is
called: the warm-up's first check, or a `--detail` query. A plugin that fails to load
is skipped and logged then, as before (the registry's report).
"""

from __future__ import annotations

import threading

TYPE_CHECKING = False  # `typing` costs the early door's start-up (server/door.py)
if TYPE_CHECKING:
    from collections.abc import Callable

    from storyd.config import Config
    from storyd.core.model import Finding, Unit
    from storyd.core.pipeline import Answer, Detect
    from storyd.detectors.runner import Runner

__all__ = ["Detectors"]


class Detectors:
    """One configuration's detectors, built once, on the first call of either callback."""

    def __init__(self, cfg: Config, staleness: str) -> None:
        self._cfg = cfg
        self._staleness = staleness
        self._lock = threading.Lock()
        self._built: tuple[Detect, Callable[[bool], None], Runner] | None = None
        self._closed = False

    @property
    def loaded(self) -> bool:
        """Whether the detectors (and their plugins) have been imported."""
        return self._built is not None

    def build(self) -> tuple[Detect, Callable[[bool], None], Runner]:
        """The detect callback, the pass hook and their Runner, built now if not yet."""
        with self._lock:
            if self._built is None:
                if self._closed:
                    raise RuntimeError("the daemon is stopping: its detectors are closed")
                from storyd.api.detection import build_detect, tips_held_by

                try:
                    detect, runner = build_detect(self._cfg, self._staleness)
                except SystemExit as exc:  # a plugin's import: on the refresher thread,
                    # SystemExit would end the thread unseen; a call's error is logged
                    msg = f"a detector plugin called exit({exc.code}) on import"
                    raise RuntimeError(msg) from None
                self._built = (detect, tips_held_by(runner), runner)
            return self._built

    def detect(self, workspace: str, unit: Unit, answer: Answer) -> tuple[Finding, ...]:
        """The engine's detect callback (builds the detectors on the first call)."""
        return self.build()[0](workspace, unit, answer)

    def hold_tips(self, on: bool) -> None:
        """The engine's pass hook; releasing what was never held loads nothing."""
        if on or self._built is not None:
            self.build()[1](on)

    def close(self) -> None:
        """Stop the Runner when one was built; nothing is built after this."""
        with self._lock:
            self._closed = True
            built, self._built = self._built, None
        if built is not None:
            built[2].close()
