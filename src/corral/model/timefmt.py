"""Slurm time formats: time limits, elapsed times, timestamps and --begin values.

Pure functions; callers pass `now` where the current time matters.
"""

from __future__ import annotations

import re
import time as _time

INFINITE = -1  # a time limit of INFINITE/UNLIMITED, in minutes


class TimeFormatError(ValueError):
    pass


_LIMIT_RE = re.compile(r"^(?:(\d+)-)?(\d+)?(?::(\d+))?(?::(\d+))?$")


def parse_time_limit(text: str) -> int:
    """Parse a Slurm time limit into seconds (INFINITE → -1).

    Accepted: "minutes", "minutes:seconds", "hours:minutes:seconds", "days-hours",
    "days-hours:minutes", "days-hours:minutes:seconds", "INFINITE", "UNLIMITED".
    Seconds are rounded up to whole minutes as Slurm does.
    """
    t = text.strip()
    if t.upper() in ("INFINITE", "UNLIMITED", "-1"):
        return INFINITE
    if not t:
        raise TimeFormatError(text)
    m = _LIMIT_RE.match(t)
    if not m or m.group(2) is None:
        raise TimeFormatError(text)
    days, a, b, c = m.groups()
    if days is not None:
        # days-hours[:minutes[:seconds]]
        secs = int(days) * 86400 + int(a) * 3600
        if b is not None:
            secs += int(b) * 60
        if c is not None:
            secs += int(c)
    elif c is not None:  # hours:minutes:seconds
        secs = int(a) * 3600 + int(b) * 60 + int(c)
    elif b is not None:  # minutes:seconds
        secs = int(a) * 60 + int(b)
    else:  # minutes
        secs = int(a) * 60
    # Slurm stores limits in minutes, rounding partial minutes up.
    return ((secs + 59) // 60) * 60


def format_duration(seconds: float | int | None, *, limit: bool = False) -> str:
    """Format seconds the way squeue/sinfo print TIME and TIMELIMIT columns.

    "0:03", "1:00", "1:00:00", "1-00:00:00"; a limit of -1 → "UNLIMITED"/"infinite" is
    left to the caller via `limit`.
    """
    if seconds is None:
        return "N/A"
    if seconds < 0:
        return "UNLIMITED" if limit else "INVALID"
    s = int(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{s:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{s:02d}"
    return f"{minutes}:{s:02d}"


def format_hms(seconds: float | int | None) -> str:
    """Format as [D-]HH:MM:SS (scontrol RunTime/TimeLimit, sacct Elapsed)."""
    if seconds is None:
        return "N/A"
    if seconds < 0:
        return "UNLIMITED"
    s = int(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{s:02d}"
    return f"{hours:02d}:{minutes:02d}:{s:02d}"


STANDARD_FORMAT = "%Y-%m-%dT%H:%M:%S"  # Slurm's "%FT%T"
_MAX_FORMAT = 31  # Slurm copies SLURM_TIME_FORMAT into a 32-byte buffer


def time_format_error(spec: str | None) -> str | None:
    """Slurm's complaint about a SLURM_TIME_FORMAT value, or None when it is usable.

    Usable: unset or empty, "standard", "relative", or a strftime format (it must hold a
    '%' and be shorter than 32 bytes); anything else prints the standard format.
    """
    if not spec or spec in ("standard", "relative"):
        return None
    if "%" not in spec or len(spec.encode()) > _MAX_FORMAT:
        return f"invalid SLURM_TIME_FORMAT = '{spec}'"
    return None


def _relative_format(when: _time.struct_time, now: float) -> str:
    """Slurm's _relative_date_fmt: the format for `when`, by its distance in days from now."""
    today = _time.localtime(now)
    if when.tm_year == today.tm_year:
        distance = when.tm_yday - today.tm_yday
    else:  # Slurm counts 1000 per year: across a year's end every date is "far"
        distance = 1000 * (when.tm_year - today.tm_year) + when.tm_yday - today.tm_yday
    if distance == -1:
        return "Ystday %H:%M"
    if distance == 0:
        return "%H:%M:%S"
    if distance == 1:
        return "Tomorr %H:%M"
    if distance < -365 or distance > 365:
        return "%-d %b %Y"
    if distance < -1 or distance > 6:
        return "%-d %b %H:%M"
    return "%a %H:%M"


def format_timestamp(ts: float | None, *, none: str = "Unknown", spec: str | None = None,
                     now: float = 0.0) -> str:
    """An epoch time as Slurm's slurm_make_time_str prints it in local time.

    `spec` is SLURM_TIME_FORMAT: None/"standard" gives 2026-11-23T01:10:49, "relative" a
    form relative to `now` ("14:02:11", "Ystday 09:15", "Tomorr 08:00", "Mon 10:00",
    "3 Dec 10:00", "3 Dec 2027"), any other usable value is a strftime format.
    """
    if ts is None or ts <= 0:
        return none
    when = _time.localtime(ts)
    if not spec or spec == "standard" or time_format_error(spec):
        fmt = STANDARD_FORMAT
    elif spec == "relative":
        fmt = _relative_format(when, now)
    else:
        fmt = spec
    return _time.strftime(fmt, when)


# parse_time's unit names, tried in this order as case-insensitive prefixes.
_UNITS = (("seconds", 1), ("second", 1), ("minutes", 60), ("minute", 60), ("hours", 3600),
          ("hour", 3600), ("days", 86400), ("day", 86400), ("weeks", 604800), ("week", 604800))
_NAMED_TIMES = (("midnight", 0), ("noon", 12), ("elevenses", 11), ("fika", 15), ("teatime", 16))


class _Cursor:
    """Slurm's parse_time walks the text with an index; so does this port of it."""

    __slots__ = ("text", "pos")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def at(self, i: int) -> str:
        return self.text[i] if 0 <= i < len(self.text) else "\0"

    def digit(self, i: int) -> int | None:
        ch = self.at(i)
        return ord(ch) - 48 if "0" <= ch <= "9" else None


def _get_delta(c: _Cursor, sign_at: int) -> int:
    """`+count[unit]` after now: seconds (the default unit), minutes, hours, days, weeks."""
    offset, count, digits = sign_at + 1, 0, 0
    while c.at(offset) not in ("\0", "\n"):
        if c.at(offset).isspace():
            offset += 1
            continue
        rest = c.text[offset:].lower()
        unit = next(((name, mult) for name, mult in _UNITS if rest.startswith(name)), None)
        if unit is not None:
            offset += len(unit[0])
            count *= unit[1]
            break
        d = c.digit(offset)
        if d is None:
            raise TimeFormatError(c.text)
        count, digits, offset = count * 10 + d, digits + 1, offset + 1
    if not digits:
        raise TimeFormatError(c.text)
    c.pos = offset - 1
    return count


def _get_time(c: _Cursor) -> tuple[int, int, int]:
    """HH:MM[:SS] [AM|PM] at the cursor."""
    o = c.pos
    hr = c.digit(o)
    if hr is None:
        raise TimeFormatError(c.text)
    o += 1
    if c.at(o) != ":":
        d = c.digit(o)
        if d is None:
            raise TimeFormatError(c.text)
        hr, o = hr * 10 + d, o + 1
    if hr > 23 or c.at(o) != ":":
        raise TimeFormatError(c.text)
    o += 1

    def two(at: int, limit: int) -> int:
        a, b = c.digit(at), c.digit(at + 1)
        if a is None or b is None or a * 10 + b > limit:
            raise TimeFormatError(c.text)
        return a * 10 + b

    minute = two(o, 59)
    o += 2
    sec = 0
    if c.at(o) == ":":
        sec = two(o + 1, 59)
        o += 3
    while c.at(o).isspace():
        o += 1
    suffix = c.text[o:o + 2].lower()
    if suffix == "pm":
        hr += 12
        if hr > 23:
            if hr != 24:
                raise TimeFormatError(c.text)
            hr = 12
        o += 2
    elif suffix == "am":
        if hr > 11:
            if hr != 12:
                raise TimeFormatError(c.text)
            hr = 0
        o += 2
    c.pos = o - 1
    return hr, minute, sec


def _get_date(c: _Cursor) -> tuple[int, int, int | None]:
    """MMDD[YY], MM/DD[/YY], MM.DD[.YY] or YYYY-MM-DD at the cursor: (month, day, year)."""
    o = c.pos
    if c.at(o + 4) == "-" and c.at(o + 7) == "-":
        digits = [c.digit(o + i) for i in range(4)]
        if any(d is None for d in digits):
            raise TimeFormatError(c.text)
        year = int("".join(str(d) for d in digits))
        o += 5
        month, o = _one_or_two(c, o, 1, 12)
        o += 1
        day, o = _one_or_two(c, o, 1, 31)
        c.pos = o - 1
        return month, day, year
    month, o = _one_or_two(c, o, 1, 12)
    if c.at(o) in "./":
        o += 1
    day, o = _one_or_two(c, o, 1, 31)
    if c.at(o) in "./":
        o += 1
    short_year: int | None = None
    first = c.digit(o)
    if first is not None:
        second = c.digit(o + 1)
        if second is None:
            raise TimeFormatError(c.text)
        short_year, o = 2000 + first * 10 + second, o + 2
    c.pos = o - 1
    return month, day, short_year


def _one_or_two(c: _Cursor, o: int, low: int, high: int) -> tuple[int, int]:
    value = c.digit(o)
    if value is None:
        raise TimeFormatError(c.text)
    o += 1
    d = c.digit(o)
    if d is not None:
        value, o = value * 10 + d, o + 1
    if not low <= value <= high:
        raise TimeFormatError(c.text)
    return value, o


def parse_begin(text: str, now: float) -> float:
    """A time in Slurm's parse_time forms (--begin, StartTime=) as an epoch time.

    today, tomorrow, midnight, noon, elevenses, fika, teatime; HH:MM[:SS] [AM|PM];
    MMDD[YY], MM/DD[/YY], MM.DD[.YY]; YYYY-MM-DD[THH:MM[:SS]]; combinations such as
    `HH:MM MM/DD/YY` and `MM/DD/YY-HH:MM`; now[{+|-}count[seconds|minutes|hours|days|
    weeks]]; uts<epoch>.  As in Slurm, a time of day without a date is the next one to
    come, and a date without a year that has passed is next year's.
    """
    if text[:3].lower() == "uts":
        rest = text[3:]
        if not rest.isdigit() or int(rest) < 1000000:
            raise TimeFormatError(text)
        return float(int(rest))
    lt = _time.localtime(now)
    c = _Cursor(text)
    hour = minute = -1
    second = 0
    month = mday = -1
    year: int | None = None
    while c.pos < len(text) and text[c.pos] != "\n":
        ch = text[c.pos]
        rest = text[c.pos:].lower()
        if ch in " \t-T":
            pass
        elif rest.startswith("today"):
            month, mday, year = lt.tm_mon, lt.tm_mday, lt.tm_year
            c.pos += 4
        elif rest.startswith("tomorrow"):
            t = _time.localtime(now + 86400)
            month, mday, year = t.tm_mon, t.tm_mday, t.tm_year
            c.pos += 7
        elif any(rest.startswith(name) for name, _ in _NAMED_TIMES):
            name, hour = next((n, h) for n, h in _NAMED_TIMES if rest.startswith(n))
            minute, second = 0, 0
            c.pos += len(name) - 1
        elif rest.startswith("now"):
            delta = 0
            i = c.pos + 3
            while True:
                sign = c.at(i)
                if sign in "+-" and sign != "\0":
                    delta = _get_delta(c, i) * (1 if sign == "+" else -1)
                    break
                if sign in " \t":
                    i += 1
                    continue
                if sign in ("\0", "\n"):
                    c.pos = i - 1
                    break
                raise TimeFormatError(text)
            t = _time.localtime(now + delta)
            month, mday, year = t.tm_mon, t.tm_mday, t.tm_year
            hour, minute, second = t.tm_hour, t.tm_min, t.tm_sec
        elif c.digit(c.pos) is None:
            raise TimeFormatError(text)
        elif c.at(c.pos + 1) == ":" or c.at(c.pos + 2) == ":":
            hour, minute, second = _get_time(c)
        else:
            month, mday, year = _get_date(c)
        c.pos += 1
    if hour == -1 and month == -1:
        raise TimeFormatError(text)  # nothing given (Slurm's 0: an invalid time)
    if hour == -1:
        hour, minute = 0, 0  # a date without a time: its midnight
    elif month == -1:  # a time without a date: the next one to come
        if hour > lt.tm_hour or (hour == lt.tm_hour and minute > lt.tm_min):
            month, mday, year = lt.tm_mon, lt.tm_mday, lt.tm_year
        else:
            t = _time.localtime(now + 86400)
            month, mday, year = t.tm_mon, t.tm_mday, t.tm_year
    if year is None:
        ahead = (month, mday, hour, minute) > (lt.tm_mon, lt.tm_mday, lt.tm_hour, lt.tm_min)
        year = lt.tm_year if ahead else lt.tm_year + 1
    return _time.mktime((year, month, mday, hour, minute, second, 0, 0, -1))
