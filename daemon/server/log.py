"""structlog set up for the daemon: one JSON object per line on stderr.

systemd's journal keeps stderr, so no file handling is needed. `storyd resume` never
imports this module.
"""

from __future__ import annotations

import logging
import sys

import orjson
import structlog

__all__ = ["configure", "get"]

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure(level: str = "info") -> None:
    """JSON lines to stderr at `level` (debug, info, warning, error)."""
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(serializer=orjson.dumps),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.INFO)),
        logger_factory=structlog.BytesLoggerFactory(file=sys.stderr.buffer),
        cache_logger_on_first_use=True,
    )


def get(name: str) -> structlog.typing.FilteringBoundLogger:
    """A logger whose lines carry `logger: name`."""
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger().bind(logger=name)
    return logger
