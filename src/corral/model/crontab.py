"""scrontab's file format and cron times, as Slurm 22.05 reads them (pure code).

A crontab is read line by line: blank lines and `#` comments are skipped, `#SCRON` lines
carry sbatch options for the next cron line, `NAME=value` lines set variables that `$NAME`
in later commands is replaced by, and every other line must be a cron entry: five time
fields (minute hour day-of-month month day-of-week) or an `@` keyword, then the command.

Slurm's quirks are kept: a field is a list of numbers and ranges, or `*`, then an optional
`/step` (which keeps the listed values that fall on start + k*step, counting from 0 for
minutes and hours, from 1 for the others); a month or day name stands alone (`mon-fri` is
refused); minute 60, hour 24 and day 7 mean 0. When both day fields are given (neither a
bare `*`) a day matches either of them (Vixie cron's rule); times are the controller's
local time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")  # Slurm numbers them 1..7

# field name, bit count (Slurm's bitstring sizes), where a step counts from
_FIELDS = (("minute", 61, 0), ("hour", 25, 0), ("dom", 32, 1), ("month", 13, 1),
           ("dow", 8, 1))


class CronError(ValueError):
    """A line Slurm refuses: its messages (without the program prefix), in order."""

    def __init__(self, *messages: str) -> None:
        super().__init__("; ".join(messages))
        self.messages = list(messages)


@dataclass(slots=True)
class CronEntry:
    minute: frozenset[int]
    hour: frozenset[int]
    dom: frozenset[int]
    month: frozenset[int]
    dow: frozenset[int]  # 0 = Sunday
    wild: frozenset[str]  # the fields given as a bare `*`
    command: str = ""
    written: str = ""  # the time fields as written (`*/5 * * * *`, `@daily`)

    def spec(self) -> str:
        """The entry's times as slurmctld rebuilds them (scontrol's CrontabSpec)."""
        return " ".join("*" if name in self.wild else format_bits(getattr(self, name))
                        for name, _, _ in _FIELDS)


def format_bits(values: frozenset[int]) -> str:
    """Slurm's bit_fmt_full: ascending, runs as `a-b`, joined by commas."""
    out: list[str] = []
    nums = sorted(values)
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        out.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ",".join(out)


_RANGE_CHARS = re.compile(r"[0-9,-]*")


def _unfmt(text: str, size: int) -> set[int]:
    """Slurm's bit_unfmt of a list of numbers and ranges; CronError when out of range."""
    bits: set[int] = set()
    if not text:
        return bits
    for part in text.split(","):
        lo_s, dash, hi_s = part.partition("-")
        if not lo_s.isdigit() or (dash and not hi_s.isdigit()):
            raise CronError("something is broken")
        lo, hi = int(lo_s), int(hi_s) if dash else int(lo_s)
        if lo > hi or hi >= size:
            raise CronError("something is broken")
        bits.update(range(lo, hi + 1))
    return bits


_SKIP = " \t"


def _field(line: str, pos: int, name: str, size: int, start: int,
           wild: set[str]) -> tuple[set[int], int]:
    if pos >= len(line) or line[pos] == "\n":
        raise CronError("cronspec_to_bitstring: unexpected end of line", "something is broken")
    bits: set[int]
    if line[pos] == "*":
        bits = set(range(size))
        pos += 1
        if not line.startswith("/", pos):
            wild.add(name)
    elif name in ("month", "dow") and line[pos].isalpha():
        names = MONTHS if name == "month" else DAYS
        word = line[pos:pos + 3].lower()
        if word not in names:
            what = "month" if name == "month" else "day"
            raise CronError(f"bad {what} specification", "something is broken")
        bits = {names.index(word) + 1}
        pos += 3
    else:
        m = _RANGE_CHARS.match(line, pos)
        end = m.end() if m else pos
        bits = _unfmt(line[pos:end], size)
        pos = end
    if line.startswith("/", pos):
        m = re.match(r"[+-]?\d+", line[pos + 1:])
        step = int(m.group()) if m else 0
        if m is None or step <= 1 or step >= size:
            raise CronError("bad step value", "something is broken")
        pos += 1 + m.end()
        bits &= set(range(start, size, step))
    if name != "dow" and (pos >= len(line) or line[pos] not in _SKIP):
        raise CronError("something is broken")
    return bits, pos


def _keyword(line: str) -> tuple[dict[str, set[int]], set[str], int]:
    """An `@` line's fields, its wild fields and where the command starts."""
    rest = line[1:].lower()
    for words, fields_, wild in (
            (("yearly", "annually"), ({0}, {0}, {1}, {1}, None), {"dow"}),
            (("monthly",), ({0}, {0}, {1}, None, None), {"month", "dow"}),
            (("weekly",), ({0}, {0}, None, None, {0}), {"dom", "month"}),
            (("daily", "midnight"), ({0}, {0}, None, None, None), {"dom", "month", "dow"}),
            (("hourly",), ({0}, set(range(24)), None, None, None), {"dom", "month", "dow"})):
        for w in words:
            if rest.startswith(w):
                bits = {name: (set(range(size)) if given is None else set(given))
                        for (name, size, _), given in zip(_FIELDS, fields_, strict=True)}
                return bits, set(wild), 1 + len(w)
    raise CronError("invalid @ line", "something is broken")


def parse_cron_line(line: str) -> CronEntry:
    """One cron line (leading blanks already skipped); CronError with Slurm's messages."""
    wild: set[str] = set()
    if line.startswith("@"):
        bits, wild, pos = _keyword(line)
    else:
        bits = {}
        pos = 0
        for name, size, start in _FIELDS:
            bits[name], pos = _field(line, pos, name, size, start, wild)
            while name != "dow" and pos < len(line) and line[pos] in _SKIP:
                pos += 1
    # 60 minutes, 24 hours and day 7 (Sunday) wrap to 0; day 0 and month 0 do not exist
    for name, top in (("minute", 60), ("hour", 24), ("dow", 7)):
        if top in bits[name]:
            bits[name].discard(top)
            bits[name].add(0)
    bits["dom"].discard(0)
    bits["month"].discard(0)
    if pos >= len(line) or line[pos] not in _SKIP:
        raise CronError("something is broken")
    command = line[pos:].lstrip(_SKIP).rstrip("\n")
    entry = CronEntry(frozenset(bits["minute"]), frozenset(bits["hour"]),
                      frozenset(bits["dom"]), frozenset(bits["month"]),
                      frozenset(bits["dow"]), frozenset(wild), command, line[:pos].strip())
    if not valid(entry):
        raise CronError("something is broken")
    return entry


def valid(e: CronEntry) -> bool:
    """Slurm's valid_cron_entry: every field can match, and the days exist in the months."""
    for name, _, _ in _FIELDS:
        if name not in e.wild and not getattr(e, name):
            return False
    if "dom" in e.wild:
        return True
    first = min(e.dom)
    if first == 31 and not e.month & {1, 3, 5, 7, 8, 10, 12}:
        return False
    if first == 30 and e.month == frozenset({2}):
        return False
    return True


def _day_matches(e: CronEntry, day: datetime) -> bool:
    if day.month not in e.month:
        return False
    dom_ok = day.day in e.dom
    dow_ok = (day.isoweekday() % 7) in e.dow
    if "dom" in e.wild and "dow" in e.wild:
        return True
    if "dom" in e.wild:
        return dow_ok
    if "dow" in e.wild:
        return dom_ok
    return dom_ok or dow_ok  # both given: either day field (Vixie cron, Slurm)


def next_start(e: CronEntry, now: datetime) -> datetime:
    """The first matching minute after `now`'s minute (naive local time, as Slurm's
    calc_next_cron_start: never again in the current minute)."""
    t = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    day = t.replace(hour=0, minute=0)
    hours = sorted(e.hour)
    minutes = sorted(e.minute)
    for _ in range(366 * 8 + 1):  # leap days recur within 8 years (e.g. 2096 -> 2104)
        if _day_matches(e, day):
            for h in hours:
                for mi in minutes:
                    cand = day.replace(hour=h, minute=mi)
                    if cand >= t:
                        return cand
        day += timedelta(days=1)
    raise CronError("something is broken")


def next_start_epoch(e: CronEntry, now: float) -> float:
    """next_start in the controller's local time, as epoch seconds."""
    return next_start(e, datetime.fromtimestamp(now)).timestamp()


# --------------------------------------------------------------------------
# the file
# --------------------------------------------------------------------------

@dataclass(slots=True)
class CrontabItem:
    """One cron line with the #SCRON lines before it (line numbers from 1)."""

    line_start: int
    line_end: int
    cron_text: str  # the cron line, leading blanks removed
    entry: CronEntry
    options: list[str] = field(default_factory=list)  # the #SCRON lines' text, after #SCRON
    scron_lines: list[str] = field(default_factory=list)  # those lines as written


def _env_line(line: str) -> tuple[str, str] | None:
    """Slurm's load_env: `NAME = value`, the value optionally quoted; None otherwise."""
    m = re.match(r"([^\s=]+)[ \t]*=[ \t]*(.*)$", line)
    if not m:
        return None
    name, value = m.group(1), m.group(2).rstrip("\n")
    if value[:1] in ("'", '"'):
        q = value[0]
        end = value.find(q, 1)
        if end < 0 or value[end + 1:].strip():
            return None
        value = value[1:end]
    else:
        value = value.rstrip(" \t")
    return name, value


class CrontabLineError(CronError):
    def __init__(self, lineno: int, messages: list[str]) -> None:
        super().__init__(*messages)
        self.lineno = lineno


def parse_crontab(text: str) -> list[CrontabItem]:
    """Every entry of a crontab; CrontabLineError at the first bad line."""
    items: list[CrontabItem] = []
    env: dict[str, str] = {}
    start: int | None = None
    scron: list[str] = []
    options: list[str] = []
    for lineno, line in enumerate(text.split("\n"), 1):
        body = line.lstrip(_SKIP)
        if not body:
            continue
        if body.startswith("#SCRON"):
            scron.append(line)
            options.append(line[line.index("#SCRON") + 6:])
            if start is None:
                start = lineno
            continue
        if body.startswith("#"):
            continue
        kv = _env_line(body)
        if kv is not None:
            env[kv[0]] = kv[1]
            continue
        try:
            entry = parse_cron_line(body)
        except CronError as e:
            raise CrontabLineError(lineno, e.messages) from None
        for name, value in env.items():
            entry.command = entry.command.replace(f"${name}", value)
        items.append(CrontabItem(start if start is not None else lineno, lineno, body,
                                 entry, options, scron))
        start, options, scron = None, [], []
    return items


def mark_lines(text: str, lines: set[int], prefix: str) -> str:
    """The crontab with the given lines (from 1) prefixed (#BAD: or #DISABLED:)."""
    out = []
    for n, line in enumerate(text.split("\n"), 1):
        out.append(prefix + line if n in lines else line)
    return "\n".join(out)


def line_set(spec: str) -> set[int]:
    """Lines as Slurm lists them: `3-4,7-7,`."""
    out: set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        if lo.strip().isdigit():
            out.update(range(int(lo), int(hi or lo) + 1))
    return out
