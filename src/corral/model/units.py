"""Slurm memory sizes: "4G", "500M", "2T", plain numbers in megabytes."""

from __future__ import annotations

from corral.lazyre import LazyPattern


class SizeFormatError(ValueError):
    pass


_STRTOLL_RE = LazyPattern(r"\s*[+-]?\d+")
_UNIT_MB = {"": 1, "M": 1, "G": 1024, "T": 1024 * 1024}


def str_to_mbytes(text: str) -> int | None:
    """Slurm's str_to_mbytes(): "4G" → 4096, "500" → 500 (MB), None when invalid.

    A whole number, then nothing or one unit letter (K, M, G, T, any case) optionally
    followed by "B": "4GB" is 4G; "", "1GG", "1.5G" and "-5" are invalid, as in Slurm.
    Kilobytes round up to whole megabytes.
    """
    m = _STRTOLL_RE.match(text)
    if m is None:
        return None
    value = int(m.group())
    rest = text[m.end():]
    if value < 0 or rest[1:] not in ("", "B", "b"):
        return None
    unit = rest[:1].upper()
    if unit == "K":
        return (value + 1023) // 1024
    mult = _UNIT_MB.get(unit)
    return None if mult is None else value * mult


def parse_mem_mb(text: str) -> int:
    """A --mem style size in whole megabytes (default unit: M); SizeFormatError if bad."""
    mb = str_to_mbytes(text)
    if mb is None:
        raise SizeFormatError(text)
    return mb


def format_mem_mb(mb: int | float) -> str:
    """Format megabytes as Slurm does in TRES strings: 4G, 500M, 1.50G."""
    mb = int(mb)
    if mb >= 1024 * 1024 and mb % (1024 * 1024) == 0:
        return f"{mb // (1024 * 1024)}T"
    if mb >= 1024 and mb % 1024 == 0:
        return f"{mb // 1024}G"
    if mb >= 1024:
        return f"{mb / 1024:.2f}G"
    return f"{mb}M"
