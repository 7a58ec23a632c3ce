"""Job array specifications: "0-15", "1,3,5-9:2", "1-10%2"."""

from __future__ import annotations

import re

MAX_ARRAY_SIZE = 1001  # Slurm's default MaxArraySize


class ArraySpecError(ValueError):
    pass


def parse_array_spec(spec: str, max_size: int = MAX_ARRAY_SIZE) -> tuple[list[int], int | None]:
    """Return (sorted task ids, throttle or None)."""
    text = spec.strip()
    throttle: int | None = None
    if "%" in text:
        text, _, thr = text.partition("%")
        if not thr.isdigit():
            raise ArraySpecError(spec)
        throttle = int(thr)
    if not text:
        raise ArraySpecError(spec)
    ids: set[int] = set()
    for part in text.split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", part.strip())
        if not m:
            raise ArraySpecError(spec)
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        step = int(m.group(3)) if m.group(3) is not None else 1
        if hi < lo or step < 1:
            raise ArraySpecError(spec)
        if hi >= max_size:
            raise ArraySpecError(spec)
        ids.update(range(lo, hi + 1, step))
    return sorted(ids), throttle


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
