"""Detector plugins that misbehave, for the Runner's containment tests."""

from __future__ import annotations

import threading

from storyd.core.model import Finding, Unit
from storyd.detectors import Context

__all__ = ["GARBAGE", "HANGING", "NAMELESS", "RAISING", "RELEASE", "RETURNED"]

RELEASE = threading.Event()  # a hanging check returns once this is set
RETURNED = threading.Event()  # set when a hanging check has returned


class Raising:
    """Raises from check."""

    name = "raising"

    def check(self, unit: Unit, context: Context) -> list[Finding]:
        msg = f"boom in {unit.key}"
        raise RuntimeError(msg)


class Hanging:
    """Blocks until RELEASE is set (bounded, so a failed test cannot wedge the run)."""

    name = "hanging"

    def check(self, unit: Unit, context: Context) -> list[Finding]:
        RELEASE.wait(30)
        RETURNED.set()
        return []


class Garbage:
    """Returns something that is not a list of findings."""

    name = "garbage"

    def check(self, unit: Unit, context: Context) -> object:
        return {"not": "findings"}


class Nameless:
    """Has no name: load() must refuse it and name the entry point."""

    def check(self, unit: Unit, context: Context) -> list[Finding]:
        return []


RAISING = Raising()
HANGING = Hanging()
GARBAGE = Garbage()
NAMELESS = Nameless()
