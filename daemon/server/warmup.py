"""The start-up warm-up's progress, as `stats` and `status` report it (service.py runs
the warm-up itself on the refresher)."""

from __future__ import annotations

__all__ = ["Warmup"]


class Warmup:
    """Progress of the start-up warm-up: workspaces read, then checked by detectors."""

    __slots__ = ("checked", "done", "read", "total")

    def __init__(self) -> None:
        self.total = self.read = self.checked = 0
        self.done = False

    def begin(self, total: int) -> None:
        """A warm-up of `total` workspaces starts (done at once when there are none)."""
        self.total = total
        self.done = total == 0
