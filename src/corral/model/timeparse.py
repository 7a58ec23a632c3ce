"""Slurm's time parser (parse_time in src/common/parse_time.c), for --begin,
--deadline, `scontrol update StartTime=` and friends.

Forms, combined freely in one string (separated by blanks, "-" or "T"):

* `today`, `tomorrow`; `midnight`, `noon`, `elevenses` (11:00), `fika` (15:00), `teatime` (16:00)
* `HH:MM[:SS] [AM|PM]`
* `MMDD[YY]`, `MM/DD[/YY]`, `MM.DD[.YY]`, `YYYY-MM-DD`
* so `MM/DD[/YY]-HH:MM[:SS]`, `HH:MM MM/DD/YY`, `YYYY-MM-DD[THH:MM[:SS]]`
* `now[{+|-}count[seconds|minutes|hours|days|weeks]]` (seconds by default)
* `uts<seconds since the epoch>`

A time without a date is the next such time (today, or tomorrow once it has
passed); a date without a year is the next such date.  Slurm's quirks are kept:
matching is case-insensitive except that a capital "T" is a separator (so `Today`
is refused), and unit names must be spelled out (`now+1hour`, not `now+1h`).

Pure: the clock is the `now` argument; dates are read in the local time zone.
"""

from __future__ import annotations

import time as _time

_UNITS = (("seconds", 1), ("second", 1), ("minutes", 60), ("minute", 60),
          ("hours", 3600), ("hour", 3600), ("days", 86400), ("day", 86400),
          ("weeks", 604800), ("week", 604800))
_NAMED = (("midnight", 0), ("noon", 12), ("elevenses", 11), ("fika", 15), ("teatime", 16))


class TimeParseError(ValueError):
    """Slurm's "Invalid time specification (pos=N): TEXT" (`message`); for a string
    that names no time at all (""), `message` is empty: Slurm prints nothing then."""

    def __init__(self, text: str, pos: int | None):
        self.text = text
        self.pos = pos
        self.message = "" if pos is None else f"Invalid time specification (pos={pos}): {text}"
        super().__init__(self.message or f"no time in {text!r}")


class _Fail(Exception):
    def __init__(self, pos: int):
        self.pos = pos


class _Text:
    """The string as C sees it: a NUL past the end (and at a newline, where Slurm stops)."""

    def __init__(self, s: str):
        self.s = s.split("\n", 1)[0]

    def __getitem__(self, i: int) -> str:
        return self.s[i] if 0 <= i < len(self.s) else "\0"

    def starts(self, i: int, word: str) -> bool:
        return self.s[i:i + len(word)].lower() == word

    def __len__(self) -> int:
        return len(self.s)


def _digit(c: str) -> bool:
    return "0" <= c <= "9"


def _get_delta(t: _Text, pos: int) -> tuple[int, int]:
    """Digits then an optional unit after the sign at `pos`: (end position, seconds)."""
    cnt = digits = 0
    offset = pos + 1
    while t[offset] != "\0":
        c = t[offset]
        if c.isspace():
            offset += 1
            continue
        unit = next(((name, mult) for name, mult in _UNITS if t.starts(offset, name)), None)
        if unit is not None:
            offset += len(unit[0])
            cnt *= unit[1]
            break
        if _digit(c):
            cnt = cnt * 10 + int(c)
            digits += 1
            offset += 1
            continue
        raise _Fail(offset - 1)
    if not digits:
        raise _Fail(pos)
    return offset - 1, cnt


def _get_time(t: _Text, pos: int) -> tuple[int, int, int, int]:
    """HH:MM[:SS] [AM|PM] at `pos`: (last position used, hour, minute, second)."""
    o = pos
    if not _digit(t[o]):
        raise _Fail(o)
    hr = int(t[o])
    o += 1
    if t[o] != ":":
        if not _digit(t[o]):
            raise _Fail(o)
        hr = hr * 10 + int(t[o])
        o += 1
    if hr > 23:
        raise _Fail(o - 2)
    if t[o] != ":":
        raise _Fail(o)
    o += 1
    if not (_digit(t[o]) and _digit(t[o + 1])):
        raise _Fail(o if not _digit(t[o]) else o + 1)
    minute = int(t[o]) * 10 + int(t[o + 1])
    o += 2
    if minute > 59:
        raise _Fail(o - 2)
    sec = 0
    if t[o] == ":":
        o += 1
        if not (_digit(t[o]) and _digit(t[o + 1])):
            raise _Fail(o if not _digit(t[o]) else o + 1)
        sec = int(t[o]) * 10 + int(t[o + 1])
        o += 2
        if sec > 59:
            raise _Fail(o - 2)
    while t[o].isspace():
        o += 1
    if t.starts(o, "pm"):
        hr += 12
        if hr > 23:
            if hr != 24:
                raise _Fail(o)
            hr = 12
        o += 2
    elif t.starts(o, "am"):
        if hr > 11:
            if hr != 12:
                raise _Fail(o)
            hr = 0
        o += 2
    return o - 1, hr, minute, sec


def _get_date(t: _Text, pos: int) -> tuple[int, int, int, int | None]:
    """A date at `pos`: (last position used, month 1-12, day, year or None)."""
    o = pos
    if len(t) >= o + 7 and t[o + 4] == "-" and t[o + 7] == "-":  # YYYY-MM-DD
        for k in range(4):
            if not _digit(t[o + k]):
                raise _Fail(o + k)
        yr = int(t.s[o:o + 4])
        o += 5
        mon = ord(t[o]) - ord("0")
        o += 1
        if _digit(t[o]):
            mon = mon * 10 + int(t[o])
            o += 1
        if not 1 <= mon <= 12:
            raise _Fail(o - 2)
        o += 1
        if not _digit(t[o]):
            raise _Fail(o)
        day = int(t[o])
        o += 1
        if _digit(t[o]):
            day = day * 10 + int(t[o])
            o += 1
        if not 1 <= day <= 31:
            raise _Fail(o - 2)
        return o - 1, mon, day, yr
    mon = ord(t[o]) - ord("0")
    o += 1
    if _digit(t[o]):
        mon = mon * 10 + int(t[o])
        o += 1
    if not 1 <= mon <= 12:
        raise _Fail(o - 2)
    if t[o] in "./" and t[o] != "\0":
        o += 1
    if not _digit(t[o]):
        raise _Fail(o)
    day = int(t[o])
    o += 1
    if _digit(t[o]):
        day = day * 10 + int(t[o])
        o += 1
    if not 1 <= day <= 31:
        raise _Fail(o - 2)
    if t[o] in "./" and t[o] != "\0":
        o += 1
    year: int | None = None
    if _digit(t[o]):
        if not _digit(t[o + 1]):
            raise _Fail(o + 1)
        yy = int(t[o]) * 10 + int(t[o + 1])
        o += 2
        if yy:  # Slurm: a year of "00" counts as none given
            year = 2000 + yy
    return o - 1, mon, day, year


def parse_time(text: str, now: float, past: bool = False) -> int:
    """Seconds since the epoch for a Slurm time string, relative to `now`.

    With `past`, a time or date without a day or year is the latest one not after
    now (as for sacct's --starttime) instead of the next one.  Raises TimeParseError.
    """
    if text[:3].lower() == "uts":
        rest = text[3:]
        digits = rest.lstrip()
        if digits[:1] in "+-":
            digits = digits[1:]
        if not digits.isdigit() or int(rest) < 1_000_000:
            raise TimeParseError(text, 0)
        return int(rest)
    t = _Text(text)
    lt = _time.localtime(now)
    hour = minute = month = mday = year = -1
    second = 0
    pos = 0
    try:
        while t[pos] != "\0":
            c = t[pos]
            if c in " \t-T":
                pos += 1
                continue
            if t.starts(pos, "today"):
                month, mday, year = lt.tm_mon, lt.tm_mday, lt.tm_year
                pos += 5
                continue
            if t.starts(pos, "tomorrow"):
                later = _time.localtime(now + 86400)
                month, mday, year = later.tm_mon, later.tm_mday, later.tm_year
                pos += 8
                continue
            named = next(((w, h) for w, h in _NAMED if t.starts(pos, w)), None)
            if named is not None:
                hour, minute, second = named[1], 0, 0
                pos += len(named[0])
                continue
            if t.starts(pos, "now"):
                delta = 0
                i = pos + 3
                while True:
                    if t[i] in "+-" and t[i] != "\0":
                        sign = -1 if t[i] == "-" else 1
                        pos += i  # sic: Slurm adds the index to the position
                        pos, delta = _get_delta(t, pos)
                        delta *= sign
                        break
                    if t[i] in " \t" and t[i] != "\0":
                        i += 1
                        continue
                    if t[i] == "\0":
                        pos += i - 1
                        break
                    raise _Fail(pos + i)
                later = _time.localtime(now + delta)
                month, mday, year = later.tm_mon, later.tm_mday, later.tm_year
                hour, minute, second = later.tm_hour, later.tm_min, later.tm_sec
                pos += 1
                continue
            if not _digit(c):
                raise _Fail(pos)
            if t[pos + 1] == ":" or t[pos + 2] == ":":
                pos, hour, minute, second = _get_time(t, pos)
            else:
                pos, month, mday, got_year = _get_date(t, pos)
                if got_year is not None:
                    year = got_year
            pos += 1
    except _Fail as e:
        raise TimeParseError(text, e.pos) from None

    if hour == -1 and month == -1:
        raise TimeParseError(text, None)
    if hour == -1:
        hour, minute = 0, 0
    elif month == -1:
        if past or hour > lt.tm_hour or (hour == lt.tm_hour and minute > lt.tm_min):
            month, mday, year = lt.tm_mon, lt.tm_mday, lt.tm_year
        else:
            later = _time.localtime(now + 86400)
            month, mday, year = later.tm_mon, later.tm_mday, later.tm_year
    if year == -1:
        if past:
            year = lt.tm_year - 1 if month > lt.tm_mon else lt.tm_year
        elif (month, mday, hour, minute) > (lt.tm_mon, lt.tm_mday, lt.tm_hour, lt.tm_min):
            year = lt.tm_year
        else:
            year = lt.tm_year + 1
    try:
        return int(_time.mktime((year, month, mday, hour, minute, second, 0, 0, -1)))
    except (OverflowError, ValueError):
        raise TimeParseError(text, pos) from None
