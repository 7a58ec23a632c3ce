"""Regular expressions compiled on first use.

`import re` brings `enum`, `functools`, `collections` and the regex compiler with it:
a quarter of a Slurm command's start.  Modules the commands import (model/, cli/) keep
their patterns as `LazyPattern`s, so only the paths that match something pay for `re`.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class LazyPattern:
    """Stands for re.compile(pattern, flags): the first method used (match, fullmatch,
    sub, split, ...) compiles it, and is then found on the instance at no extra cost."""

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags

    def __getattr__(self, name: str) -> Any:
        import re

        value = getattr(re.compile(self.pattern, self.flags), name)
        setattr(self, name, value)
        return value
