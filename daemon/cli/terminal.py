"""What the commands print differently on a terminal: colour, and a progress line.

Colour follows the NO_COLOR convention (https://no-color.org): a *non-empty* NO_COLOR
turns it off; so do TERM=dumb and a stream that is not a terminal. The progress line
goes to stderr, only when stderr is a terminal and --quiet was not given; it is
redrawn in place five times a second from half a second on, and cleared at the end.
"""

from __future__ import annotations

import os
import sys
import threading
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
    """`storyd status: 1,200 units read, 4 s` on stderr, redrawn in place.

    `count` is set by whoever does the work (any thread); a ticker thread redraws the
    line every 0.2 s with the count and the seconds so far, from 0.5 s on (quick work
    shows nothing). Use it as a context manager: the line is cleared at the end.
    """

    def __init__(
        self, label: str, what: str = "units read", *, quiet: bool = False,
        stream: TextIO | None = None,
    ) -> None:
        self.stream = stream or sys.stderr
        self.label = label
        self.what = what
        try:
            self.on = not quiet and self.stream.isatty() and os.environ.get("TERM") != "dumb"
        except (AttributeError, ValueError):
            self.on = False
        self.count: int | None = None
        self._started = time.monotonic()
        self._shown = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Progress:
        if self.on:
            self._thread = threading.Thread(target=self._tick, name="storyd-progress",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)
        if self._shown:
            self.stream.write("\r\033[K")
            self.stream.flush()

    def line(self) -> str:
        """What the line says now."""
        seconds = int(time.monotonic() - self._started)
        counted = f"{self.count:,} {self.what}, " if self.count is not None else ""
        return f"{self.label}: {counted}{seconds} s"

    def _tick(self) -> None:
        if self._stop.wait(0.5):
            return
        while True:
            self.stream.write(f"\r\033[K{self.line()}")
            self.stream.flush()
            self._shown = True
            if self._stop.wait(0.2):
                return
