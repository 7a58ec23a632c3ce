"""Job array specifications: "0-15", "1,3,5-9:2", "1-10%2".

Every index is checked against MaxArraySize before any range is enumerated, so a
request naming `0-2147483646` costs nothing but its own text.
"""

from __future__ import annotations

from corral.lazyre import LazyPattern

MAX_ARRAY_SIZE = 1001  # Slurm's default MaxArraySize
# The largest MaxArraySize Slurm accepts (slurm.conf(5)): no index reaches it, whatever
# a caller asks for.
MAX_ARRAY_SIZE_LIMIT = 4_000_001
# Slurm's hostlist code refuses a bracket range of more than this many values
# (scancel 7_[0-70000]: "Too many hosts in range").
MAX_RANGE = 64 * 1024

_PART_RE = LazyPattern(r"(\d+)(?:-(\d+)(?::(\d+))?)?")


class ArraySpecError(ValueError):
    pass


def parse_array_ranges(spec: str, max_size: int = MAX_ARRAY_SIZE) -> tuple[list[range], int | None]:
    """The ranges of an array spec and its throttle, without enumerating anything.

    Every index must be below `max_size` (and below MAX_ARRAY_SIZE_LIMIT)."""
    limit = min(max_size, MAX_ARRAY_SIZE_LIMIT)
    text = spec.strip()
    throttle: int | None = None
    if "%" in text:
        text, _, thr = text.partition("%")
        if not thr.isdigit():
            raise ArraySpecError(spec)
        throttle = int(thr)
    if not text:
        raise ArraySpecError(spec)
    ranges: list[range] = []
    for part in text.split(","):
        m = _PART_RE.fullmatch(part.strip())
        if not m:
            raise ArraySpecError(spec)
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        step = int(m.group(3)) if m.group(3) is not None else 1
        if hi < lo or step < 1 or hi >= limit:
            raise ArraySpecError(spec)
        ranges.append(range(lo, hi + 1, step))
    return ranges, throttle


def parse_array_spec(spec: str, max_size: int = MAX_ARRAY_SIZE) -> tuple[list[int], int | None]:
    """Return (sorted task ids, throttle or None); at most min(max_size,
    MAX_ARRAY_SIZE_LIMIT) ids, checked before they are listed."""
    ranges, throttle = parse_array_ranges(spec, max_size)
    ids: set[int] = set()
    for r in ranges:
        ids.update(r)
    return sorted(ids), throttle


def array_spec_contains(ranges: list[range], index: int) -> bool:
    """Whether `index` is one of the ranges (from parse_array_ranges)."""
    return any(index in r for r in ranges)


def check_bracket_ranges(text: str) -> str | None:
    """Slurm's hostlist check of "[1-3,5]" in a job id (scancel): the offending range
    when one holds more than MAX_RANGE values, else None."""
    for part in text.strip("[]").split(","):
        lo, dash, hi = part.partition("-")
        if dash and lo.isdigit() and hi.isdigit() and int(hi) - int(lo) + 1 > MAX_RANGE:
            return part
    return None


def format_task_ids(ids: list[int]) -> str:
    """Compress sorted ids into Slurm's form: [1,3,5-9] → "1,3,5-9"."""
    if not ids:
        return ""
    parts: list[str] = []
    start = prev = ids[0]
    for i in ids[1:]:
        if i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = i
    parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)
