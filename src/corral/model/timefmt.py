"""Slurm time formats: time limits, elapsed times, timestamps and --begin values.

Pure functions; callers pass `now` where the current time matters.
"""

from __future__ import annotations

import time as _time

from corral.lazyre import LazyPattern

INFINITE = -1  # a time limit of INFINITE/UNLIMITED, in minutes


class TimeFormatError(ValueError):
    pass


_LIMIT_RE = LazyPattern(r"^(?:(\d+)-)?(\d+)?(?::(\d+))?(?::(\d+))?$")


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
