"""Slurm memory sizes: "4G", "500M", "2T", plain numbers in megabytes."""

from __future__ import annotations

import re


class SizeFormatError(ValueError):
    pass


_MULT_MB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def parse_mem_mb(text: str) -> int:
    """Parse a --mem style size into whole megabytes (default unit: M)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)B?\s*", text, re.IGNORECASE)
    if not m:
        raise SizeFormatError(text)
    value = float(m.group(1)) * _MULT_MB[(m.group(2) or "M").upper()]
    return int(-(-value // 1))  # round up


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
