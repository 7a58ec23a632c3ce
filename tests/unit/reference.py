"""Where the golden tests find real Slurm 22.05's captures, and what happens without them.

The captures live in `shared/slurm-reference/` beside the repository (`../shared` from the
repository root), or where CORRAL_SLURM_REFERENCE points.  A golden test whose capture is
missing FAILS: a clone without the captures must not pass by skipping every comparison.
Set CORRAL_SKIP_GOLDEN=1 to skip them on purpose instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
REF = Path(os.environ.get("CORRAL_SLURM_REFERENCE")
           or REPO.parent / "shared" / "slurm-reference")
SKIP_ENV = "CORRAL_SKIP_GOLDEN"


def path(name: str) -> Path:
    """The capture `name` ("C06_squeue.txt"; ".txt" is added when the name has no suffix)."""
    p = REF / name
    if not p.suffix or p.suffix not in (".txt", ".json", ".tsv"):
        p = REF / f"{name}.txt"
    return p


def capture(name: str) -> str:
    """The text of a capture; fails (or skips with CORRAL_SKIP_GOLDEN=1) when it is missing."""
    p = path(name)
    if not p.exists():
        message = (f"reference capture {p} is missing (set CORRAL_SLURM_REFERENCE to the "
                   f"slurm-reference directory, or {SKIP_ENV}=1 to skip the golden tests)")
        if os.environ.get(SKIP_ENV, "") not in ("", "0"):
            pytest.skip(message)
        pytest.fail(message)
    return p.read_text()
