"""storyd.core.isotime against GNU `date -d … +%s`, the seed's timestamp converter."""

from __future__ import annotations

import calendar
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storyd.core.isotime import parse_epoch

DATE = shutil.which("date")
ZONES = ["UTC", "Asia/Kolkata", "America/New_York"]


def _gnu_date() -> bool:
    if DATE is None:
        return False
    done = subprocess.run([DATE, "--version"], capture_output=True, check=False)
    return done.returncode == 0 and b"GNU" in done.stdout


needs_gnu_date = pytest.mark.skipif(not _gnu_date(), reason="needs GNU date")


def gnu_date(value: str, tz: str) -> int | None:
    """`date -d VALUE +%s` in zone `tz`; None when date refuses the value."""
    assert DATE is not None
    done = subprocess.run(
        [DATE, "-d", value, "+%s"],
        capture_output=True,
        timeout=10,
        check=False,
        env={**os.environ, "TZ": tz, "LC_ALL": "C"},
    )
    return int(done.stdout) if done.returncode == 0 else None


@contextmanager
def local_zone(tz: str) -> Iterator[str]:
    """Set this process's local time zone (TZ and tzset) for the block, then restore it."""
    if not Path("/usr/share/zoneinfo", tz).exists():
        pytest.skip(f"no tzdata for {tz}")
    saved = os.environ.get("TZ")
    os.environ["TZ"] = tz
    time.tzset()
    try:
        yield tz
    finally:
        if saved is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = saved
        time.tzset()


@pytest.fixture(params=ZONES)
def zone(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run the test with this process's local time zone set to the parameter."""
    with local_zone(request.param) as tz:
        yield tz


ACCEPTED = [
    # Z, either case
    "2024-05-01T10:00:00Z",
    "2024-05-01t10:00:00z",
    "2024-05-01T10:00Z",
    "1970-01-01T00:00:00Z",
    "1969-12-31T23:59:59Z",
    "2000-02-29T12:34:56Z",
    "9999-12-31T23:59:59Z",
    "0001-01-01T00:00:00Z",
    # offsets
    "2024-05-01T12:00:00+02:00",
    "2024-05-01T12:00:00+0200",
    "2024-05-01T05:00:00-05",
    "2024-05-01T05:00:00-05:00",
    "2024-05-01T15:30:00+05:30",
    "2024-05-01T10:00:00+00",
    "2024-05-01T10:00:00-00:00",
    "2024-05-01T10:00:00+23:59",
    "2024-05-01T10:00:00-1200",
    "2024-05-01T10:00:00+1400",
    # fractions, truncated
    "2024-05-01T10:00:00.999Z",
    "2024-05-01T10:00:00.5+02:00",
    "2024-05-01T10:00:00,25Z",
    "2024-05-01T10:00:00.123456789123Z",
    "1969-12-31T23:59:59.5Z",
    # date only and naive local times
    "2024-05-01",
    "2024-01-01",
    "2024-07-01T12:00:00",
    "2024-05-01 10:00:00",
    "2024-05-01T10:00",
    "2024-11-03T01:30:00",
    "1950-06-01T12:00:00",
]

REFUSED_BY_BOTH = [
    "not a date",
    "2024-13-01",
    "2024-00-10",
    "2024-02-30",
    "2023-02-29",
    "2024-04-31T00:00:00Z",
    "2024-05-01T24:00:00Z",
    "2024-05-01T10:60:00Z",
    "2024-05-01T10:00:61Z",
    "2024-05-01T10:00:00.Z",
    "2024-05-01T10:00:00ZZ",
    "2024-05-01T10:00:00Zjunk",
    "2024-05-01T",
    "2024-05-01X10:00:00Z",
]

# GNU date reads these too, but the module's documented grammar refuses them: they are
# skipped (no stale warning), never misread.
STRICTER_THAN_DATE = [
    "",
    "5",
    "2024-1-01",
    "2024-05-01T1:00:00Z",
    "2024-05-01T10:00:00 Z",
    "2024-05-01T10:00:00UTC",
    "2024-05-01T10:00:00+5",
    "2024-05-01T10:00:00+02:0",
    "2024-05-01T10:00:00+24:00",
    " 2024-05-01",
    "2024/05/01",
]

# GNU date refuses these; a converter that answers for them warns where the seed skips.
REFUSED_BY_DATE = [
    ("2024-05-01T23:59:60Z", "UTC"),
    ("2016-12-31T23:59:60Z", "UTC"),
    ("2024-03-10T02:30:00", "America/New_York"),
    ("2024-03-10T02:00", "America/New_York"),
]


@needs_gnu_date
class TestAgreesWithGnuDate:
    """Every documented form gives the epoch `date -d … +%s` prints, in any local zone."""

    @pytest.mark.parametrize("value", ACCEPTED)
    def test_accepted(self, value: str, zone: str) -> None:
        expected = gnu_date(value, zone)
        assert expected is not None, f"GNU date refused {value!r}: fix the table"
        assert parse_epoch(value) == expected

    @pytest.mark.parametrize("value", REFUSED_BY_BOTH)
    def test_refused(self, value: str) -> None:
        assert gnu_date(value, "UTC") is None, f"GNU date accepts {value!r}: fix the table"
        assert parse_epoch(value) is None

    @pytest.mark.parametrize(("value", "tz"), REFUSED_BY_DATE)
    def test_no_value_where_date_refuses(self, value: str, tz: str) -> None:
        assert gnu_date(value, tz) is None, f"GNU date accepts {value!r} in {tz}: fix the table"
        with local_zone(tz):
            assert parse_epoch(value) is None


class TestStricterThanDate:
    """Forms outside the documented grammar are None, even where GNU date guesses."""

    @pytest.mark.parametrize("value", STRICTER_THAN_DATE)
    def test_none(self, value: str) -> None:
        assert parse_epoch(value) is None

    @pytest.mark.parametrize("value", [None, 1714557600, 1.5, b"2024-05-01", ["2024-05-01"], True])
    def test_not_a_string(self, value: object) -> None:
        assert parse_epoch(value) is None


class TestAgainstDatetime:
    """Zoned timestamps give the same epoch as Python's own calendar arithmetic."""

    @settings(max_examples=300, deadline=None)
    @given(
        moment=st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
        minutes=st.integers(min_value=-(23 * 60 + 59), max_value=23 * 60 + 59),
        style=st.sampled_from(["Z", "+HH:MM", "+HHMM", "+HH"]),
        fraction=st.sampled_from(["", ".0", ".999999", ",5"]),
    )
    def test_zoned(self, moment: datetime, minutes: int, style: str, fraction: str) -> None:
        if style == "Z":
            minutes = 0
        elif style == "+HH":
            minutes -= minutes % 60 if minutes >= 0 else -(-minutes % 60)
        offset = timedelta(minutes=minutes)
        sign = "-" if minutes < 0 else "+"
        hh, mm = divmod(abs(minutes), 60)
        suffix = {
            "Z": "Z",
            "+HH:MM": f"{sign}{hh:02d}:{mm:02d}",
            "+HHMM": f"{sign}{hh:02d}{mm:02d}",
            "+HH": f"{sign}{hh:02d}",
        }[style]
        m = moment
        text = (
            f"{m.year:04d}-{m.month:02d}-{m.day:02d}T{m.hour:02d}:{m.minute:02d}:{m.second:02d}"
            f"{fraction}{suffix}"
        )
        expected = calendar.timegm(moment.replace(microsecond=0).timetuple()) - int(
            offset.total_seconds()
        )
        assert parse_epoch(text) == expected

    @settings(max_examples=200, deadline=None)
    @given(st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2100, 1, 1)))
    def test_matches_fromisoformat(self, moment: datetime) -> None:
        aware = moment.replace(microsecond=0, tzinfo=UTC).astimezone(timezone(timedelta(hours=-3)))
        text = aware.isoformat()
        assert parse_epoch(text) == int(aware.timestamp())

    @settings(max_examples=200, deadline=None)
    @given(st.text(alphabet="0123456789-:TZ+., tz", max_size=30))
    def test_never_raises(self, text: str) -> None:
        result = parse_epoch(text)
        assert result is None or isinstance(result, int)
