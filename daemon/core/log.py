"""structlog set up for the daemon: one line per event on stderr, in the form its reader
wants.

- stderr is systemd's journal (JOURNAL_STREAM names its device and inode): JSON lines,
  each prefixed `<N>` with the syslog priority of its level (debug 7, info 6, warning
  4, error 3), which journald strips and stores as PRIORITY, so `journalctl -p
  warning` finds the warnings;
- stderr is a terminal (`storyd serve` by hand): structlog's human-readable lines,
  coloured unless NO_COLOR is set (non-empty) or TERM=dumb;
- anything else (a file, a pipe): JSON lines, one object each.

systemd's journal keeps stderr, so no file handling is needed. `storyd resume` never
imports this module. structlog is imported with its optional pretty-printers (rich,
better_exceptions) reported absent: structlog.dev imports rich when it is installed
(the `tui` extra brings it), ~110 ms of the daemon's start-up and first answer that
none of these renderers uses (issue 43).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import MutableMapping
from typing import Any

import orjson

_ABSENT = [name for name in ("rich", "better_exceptions") if name not in sys.modules]
for _name in _ABSENT:
    sys.modules[_name] = None  # type: ignore[assignment]  # import: "not installed"
try:
    import structlog
finally:
    for _name in _ABSENT:
        if sys.modules.get(_name, 0) is None:  # still the marker: make it importable again
            del sys.modules[_name]

__all__ = ["PRIORITIES", "configure", "get", "to_journal"]

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
# syslog priorities (sd-daemon(3)): what journald files each level under
PRIORITIES = {"debug": 7, "info": 6, "warning": 4, "error": 3, "critical": 2, "exception": 3}


def to_journal(fd: int = 2) -> bool:
    """Whether `fd` is the journal's stream: JOURNAL_STREAM is `<device>:<inode>` of it."""
    device, _, inode = os.environ.get("JOURNAL_STREAM", "").partition(":")
    if not device.isdigit() or not inode.isdigit():
        return False
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (int(device), int(inode))


class _JournalRenderer:
    """JSON, with the `<N>` priority prefix journald reads."""

    def __init__(self) -> None:
        self._json = structlog.processors.JSONRenderer(serializer=orjson.dumps)

    def __call__(self, logger: Any, name: str, event: MutableMapping[str, Any]) -> bytes:
        priority = PRIORITIES.get(str(event.get("level", "info")), 6)
        body = self._json(logger, name, event)
        return b"<%d>" % priority + (body if isinstance(body, bytes) else body.encode())


def configure(level: str = "info") -> None:
    """Lines to stderr at `level` (debug, info, warning, error), in the reader's form."""
    base: list[Any] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    factory: Any
    if to_journal():
        processors = [*base, structlog.processors.format_exc_info, _JournalRenderer()]
        factory = structlog.BytesLoggerFactory(file=sys.stderr.buffer)
    elif sys.stderr.isatty():
        colors = not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
        processors = [*base, structlog.dev.ConsoleRenderer(colors=colors)]
        factory = structlog.PrintLoggerFactory(file=sys.stderr)
    else:
        processors = [
            *base,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(serializer=orjson.dumps),
        ]
        factory = structlog.BytesLoggerFactory(file=sys.stderr.buffer)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.INFO)),
        logger_factory=factory,
        cache_logger_on_first_use=True,
    )


def get(name: str) -> structlog.typing.FilteringBoundLogger:
    """A logger whose lines carry `logger: name`."""
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger().bind(logger=name)
    return logger
