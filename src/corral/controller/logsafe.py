"""The controller's log cannot be forged: every line's values are escaped, and lines a
caller can provoke at will are rate-limited.

The log is readable by every local user (it is where admins look first), and many of
its values come from callers: job names, notify text, request paths, reasons.  A value
holding a newline would start a fake log entry, and terminal escapes would act on the
terminal of whoever reads it.  `EscapingFormatter` writes control characters (C0, DEL and
C1) of the message as `\\xNN`; the traceback of an exception, which is ours, keeps its
line breaks.  `RateLimit` lets a few lines per key and window through and counts the rest.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_NEWLINE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def _hex(m: re.Match[str]) -> str:
    return f"\\x{ord(m.group()):02x}"


def escape(text: str) -> str:
    """`text` on one line: every control character as `\\xNN`."""
    return _CONTROL.sub(_hex, text)


class EscapingFormatter(logging.Formatter):
    """A formatter whose message part is always one line of printable text."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        record.message = escape(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: object) -> str:  # noqa: N802
        return _CONTROL_BUT_NEWLINE.sub(_hex, super().formatException(ei))  # type: ignore[arg-type]


def install(fmt: str) -> None:
    """Put the escaping formatter on every handler of the root logger."""
    for h in logging.getLogger().handlers:
        h.setFormatter(EscapingFormatter(fmt))


class RateLimit:
    """At most `burst` lines per key in each `window` seconds; `allow` says whether this
    one may be logged, and how many were held back since the last that was (to say so)."""

    def __init__(self, burst: int = 10, window: float = 60.0, max_keys: int = 4096,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.burst = burst
        self.window = window
        self.max_keys = max_keys
        self.clock = clock
        self._seen: dict[str, tuple[float, int, int]] = {}  # key: window start, logged, held

    def allow(self, key: str) -> tuple[bool, int]:
        now = self.clock()
        start, logged, held = self._seen.get(key, (now, 0, 0))
        if now - start >= self.window:
            start, logged = now, 0
        if logged < self.burst:
            if len(self._seen) >= self.max_keys and key not in self._seen:
                self._seen.clear()  # bounded memory: forget everyone rather than grow
            self._seen[key] = (start, logged + 1, 0)
            return True, held
        self._seen[key] = (start, logged, held + 1)
        return False, 0
