"""Kept for console scripts installed before `corral` moved to corral.admin.main."""

from __future__ import annotations

import sys

from corral.admin.main import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
