"""ISO-8601 timestamps to epoch seconds, as the seed's `date -d` would read them.

Accepted: `YYYY-MM-DD`, then optionally `T` or a space and `HH:MM[:SS[.fraction]]`,
then optionally `Z`, `±HH`, `±HHMM` or `±HH:MM`. Without a zone the time is local, as
GNU date reads it. Fractions are truncated, because `date +%s` prints whole seconds.
Anything else is malformed and gives None: the seed skips such tasks silently.
"""

from __future__ import annotations

import time

__all__ = ["parse_epoch"]

_DIGITS = frozenset("0123456789")


def _number(text: str, start: int, width: int) -> int | None:
    part = text[start : start + width]
    if len(part) != width or not set(part) <= _DIGITS:
        return None
    return int(part)


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 (Howard Hinnant's algorithm, proleptic Gregorian)."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _month_days(year: int, month: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _parse_zone(text: str) -> int | None:
    """Offset in seconds for 'Z', '+HH', '+HHMM', '+HH:MM'; None if malformed."""
    if text in ("Z", "z"):
        return 0
    sign = {"+": 1, "-": -1}.get(text[:1])
    rest = text[1:]
    if sign is None:
        return None
    if len(rest) == 5 and rest[2] == ":":
        rest = rest[:2] + rest[3:]
    hours = _number(rest, 0, 2)
    minutes = 0 if len(rest) == 2 else _number(rest, 2, 2)
    if hours is None or minutes is None or len(rest) not in (2, 4) or hours > 23 or minutes > 59:
        return None
    return sign * (hours * 3600 + minutes * 60)


def _local(year: int, month: int, day: int, hour: int, minute: int, second: int) -> int | None:
    """Epoch of a local wall-clock time; None inside a daylight-saving gap, as GNU date."""
    try:
        epoch = int(time.mktime((year, month, day, hour, minute, second, 0, 0, -1)))
    except (OverflowError, ValueError):
        return None
    if time.localtime(epoch)[:6] != (year, month, day, hour, minute, second):
        return None
    return epoch


def parse_epoch(value: object) -> int | None:
    """Epoch seconds for an ISO-8601 timestamp, or None when it is not one."""
    if not isinstance(value, str) or len(value) < 10:
        return None
    year, month, day = _number(value, 0, 4), _number(value, 5, 2), _number(value, 8, 2)
    if year is None or month is None or day is None or value[4] != "-" or value[7] != "-":
        return None
    if not 1 <= month <= 12 or not 1 <= day <= _month_days(year, month):
        return None
    hour = minute = second = 0
    zone: int | None = None
    rest = value[10:]
    if rest:
        if rest[0] not in "Tt ":
            return None
        given_hour, given_minute = _number(rest, 1, 2), _number(rest, 4, 2)
        if given_hour is None or given_minute is None or rest[3:4] != ":":
            return None
        hour, minute = given_hour, given_minute
        index = 6
        if rest[6:7] == ":":
            given_second = _number(rest, 7, 2)
            if given_second is None:
                return None
            second = given_second
            index = 9
            if rest[9:10] in (".", ","):
                index = 10
                while index < len(rest) and rest[index] in _DIGITS:
                    index += 1
                if index == 10:
                    return None
        tail = rest[index:]
        if tail:
            zone = _parse_zone(tail)
            if zone is None:
                return None
        if hour > 23 or minute > 59 or second > 59:
            return None  # GNU date refuses leap seconds too
    if zone is None:
        return _local(year, month, day, hour, minute, second)
    days = _days_from_civil(year, month, day)
    return days * 86400 + hour * 3600 + minute * 60 + second - zone
