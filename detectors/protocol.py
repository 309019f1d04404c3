"""The Detector protocol: what a detector plugin is (storyd.detectors names it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from storyd.core.model import Finding, Unit
    from storyd.detectors import Context

__all__ = ["Detector"]


@runtime_checkable
class Detector(Protocol):
    """Checks one unit; returns findings (an empty list when all is well)."""

    name: str

    def check(self, unit: Unit, context: Context) -> list[Finding]:
        """Findings about `unit`; may use `context.git`, never the socket or the cache."""
        ...
