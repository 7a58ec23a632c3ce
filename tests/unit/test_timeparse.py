"""Slurm's time parser (parse_time.c), every form of sbatch(1)'s --begin, with the
clock passed in.  All times are in UTC here (TZ is set for the test)."""

from __future__ import annotations

import calendar
import time

import pytest

from corral.model.timeparse import TimeParseError, parse_time

pytestmark = pytest.mark.usefixtures("utc_tz")  # (tests/unit/conftest.py)


def ts(y: int, mo: int, d: int, h: int = 0, mi: int = 0, s: int = 0) -> int:
    return calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))


NOW = ts(2026, 3, 15, 14, 30, 20)  # Sunday 15 March 2026, 14:30:20


@pytest.mark.parametrize("text, want", [
    # now, with offsets (seconds by default; units spelled out)
    ("now", NOW),
    ("now+60", NOW + 60),
    ("now+60seconds", NOW + 60),
    ("now+1second", NOW + 1),
    ("now+5minutes", NOW + 300),
    ("now+1minute", NOW + 60),
    ("now+1hour", NOW + 3600),
    ("now+2hours", NOW + 7200),
    ("now+1day", NOW + 86400),
    ("now+3days", NOW + 3 * 86400),
    ("now+1week", NOW + 604800),
    ("now+2weeks", NOW + 2 * 604800),
    ("now-1hour", NOW - 3600),
    ("NOW+1HOUR", NOW + 3600),
    ("now + 1 hour", NOW + 3600),
    # named times: the next one
    ("midnight", ts(2026, 3, 16)),
    ("noon", ts(2026, 3, 16, 12)),  # 12:00 has passed today
    ("fika", ts(2026, 3, 15, 15)),
    ("teatime", ts(2026, 3, 15, 16)),
    ("today", ts(2026, 3, 15)),
    ("tomorrow", ts(2026, 3, 16)),
    ("tomorrow noon", ts(2026, 3, 16, 12)),
    ("noon tomorrow", ts(2026, 3, 16, 12)),
    ("today teatime", ts(2026, 3, 15, 16)),
    # HH:MM[:SS] [AM|PM]: today if still ahead, else tomorrow
    ("16:00", ts(2026, 3, 15, 16)),
    ("9:05", ts(2026, 3, 16, 9, 5)),
    ("14:30", ts(2026, 3, 16, 14, 30)),  # this very minute: tomorrow, as Slurm
    ("14:31", ts(2026, 3, 15, 14, 31)),
    ("16:00:30", ts(2026, 3, 15, 16, 0, 30)),
    ("4:00 PM", ts(2026, 3, 15, 16)),
    ("4:00PM", ts(2026, 3, 15, 16)),
    ("4:00 pm", ts(2026, 3, 15, 16)),
    ("11:15 AM", ts(2026, 3, 16, 11, 15)),
    ("12:00 AM", ts(2026, 3, 16, 0)),
    ("12:30 PM", ts(2026, 3, 16, 12, 30)),
    # dates: the next such date (this year or next), at midnight
    ("0320", ts(2026, 3, 20)),
    ("032027", ts(2027, 3, 20)),
    ("0101", ts(2027, 1, 1)),
    ("3/20", ts(2026, 3, 20)),
    ("03/20", ts(2026, 3, 20)),
    ("3/20/27", ts(2027, 3, 20)),
    ("03.20", ts(2026, 3, 20)),
    ("03.20.28", ts(2028, 3, 20)),
    ("2/1", ts(2027, 2, 1)),
    ("2026-12-24", ts(2026, 12, 24)),
    ("2025-01-02", ts(2025, 1, 2)),  # a full date is taken as given, even past
    ("2026-12-24T18:30", ts(2026, 12, 24, 18, 30)),
    ("2026-12-24T18:30:15", ts(2026, 12, 24, 18, 30, 15)),
    ("2026-12-24 18:30", ts(2026, 12, 24, 18, 30)),
    # combined forms
    ("16:00 03/20/26", ts(2026, 3, 20, 16)),
    ("4:00 PM 3/20/26", ts(2026, 3, 20, 16)),
    ("03/20/26-16:00", ts(2026, 3, 20, 16)),
    ("3/20-16:00:05", ts(2026, 3, 20, 16, 0, 5)),
    ("uts1900000000", 1900000000),
])
def test_forms(text: str, want: int) -> None:
    assert parse_time(text, NOW) == want


@pytest.mark.parametrize("text", [
    "", "   ", "later", "now+", "now+1h", "now+1fortnight", "now 5", "25:00", "12:60",
    "12:30:61", "13:00 PM", "1300", "13/01", "0/1", "3/32", "3/0", "2026-13-01",
    "2026-00-10", "2026-12-32", "Today", "Tomorrow", "Teatime", "12:3", "3/20/2",
    "uts5", "uts12345678x", "yesterday", "noon!",
])
def test_refused(text: str) -> None:
    with pytest.raises(TimeParseError):
        parse_time(text, NOW)


def test_error_text_is_slurms() -> None:
    with pytest.raises(TimeParseError) as e:
        parse_time("later", NOW)
    assert e.value.message == "Invalid time specification (pos=0): later"
    with pytest.raises(TimeParseError) as e:
        parse_time("", NOW)
    assert e.value.message == ""  # Slurm returns 0 silently: only the caller's line


def test_past_flag_looks_back() -> None:
    assert parse_time("16:00", NOW, past=True) == ts(2026, 3, 15, 16)
    assert parse_time("0401", NOW, past=True) == ts(2025, 4, 1)
    assert parse_time("0301", NOW, past=True) == ts(2026, 3, 1)


def test_year_end_rolls_over() -> None:
    late = ts(2026, 12, 31, 23, 59, 30)
    assert parse_time("midnight", late) == ts(2027, 1, 1)
    assert parse_time("tomorrow", late) == ts(2027, 1, 1)
    assert parse_time("0101", late) == ts(2027, 1, 1)
    assert parse_time("now+1minute", late) == late + 60


def test_local_time_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    # 14:30:20 UTC is 10:30:20 EDT on 15 March 2026 (DST began on 8 March)
    assert parse_time("11:00", NOW) == ts(2026, 3, 15, 15)
    assert parse_time("2026-12-24", NOW) == ts(2026, 12, 24, 5)  # EST
