"""What the commands print differently on a terminal: colour, and a progress line.

Colour follows the NO_COLOR convention (https://no-color.org): a *non-empty* NO_COLOR
turns it off; so do TERM=dumb and a stream that is not a terminal. The progress line
goes to stderr, only when stderr is a terminal and --quiet was not given; it is
redrawn in place at most ten times a second and cleared when the work ends.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

__all__ = ["Progress", "color_on"]


def color_on(stream: TextIO) -> bool:
    """Whether to colour what goes to `stream`."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        return False
    return tty and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


class Progress:
    """`storyd status: reading 1,200 of 3,000 units` on stderr, redrawn in place."""

    def __init__(self, label: str, *, quiet: bool = False, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.label = label
        try:
            self.on = not quiet and self.stream.isatty() and os.environ.get("TERM") != "dumb"
        except (AttributeError, ValueError):
            self.on = False
        self._last = 0.0
        self._shown = False

    def show(self, text: str, *, force: bool = False) -> None:
        """Redraw the line (throttled to 10 Hz unless `force`)."""
        if not self.on:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        self.stream.write(f"\r\033[K{self.label}: {text}")
        self.stream.flush()
        self._shown = True

    def done(self) -> None:
        """Clear the line."""
        if self.on and self._shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._shown = False
