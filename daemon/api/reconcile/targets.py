"""Which dialect a unit is written in (its format's capability, storyd.core.formats.dialect),
and the seeds' timestamp style."""

from __future__ import annotations

import time

from storyd.core.errors import UsageError
from storyd.core.formats import named
from storyd.core.formats.dialect import Dialect

__all__ = ["dialect_of", "utc_stamp"]


def utc_stamp(epoch: float) -> str:
    """`2026-03-02T09:10:00Z`: the seeds' timestamps (`date -u +%Y-%m-%dT%H:%M:%SZ`)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def dialect_of(format_name: str) -> Dialect | None:
    """The dialect of a format by name, None for formats storyd does not write (or knows
    no longer: a plugin that went away)."""
    try:
        return named(format_name).dialect
    except UsageError:
        return None
