"""Answers encoded once per change: squeue's job table.

Every `squeue` asks for the compact form of GET /v1/jobs (`rows=1`): field names once,
one list per job.  Building it walks every job in Python and costs tens of milliseconds
at 10,000 jobs, on the event loop that also takes submissions; dashboards and workflow
managers ask for it in loops.  Here the encoded rows are kept per query and served again
while nothing changed: the key holds the controller's change count (every persisted job
or node change, every request that is not a GET) and its scheduling pass count, and an
answer older than MAX_AGE_S is rebuilt whatever the counts say.  The answer's "now" is
the time of each request, as when it is built afresh.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

MAX_AGE_S = 1.0
MAX_ENTRIES = 32  # distinct squeue queries kept (options differ by user and script)


class RowsCache:
    """Encoded `{"fields": ..., "rows": ...` prefixes by query string."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[tuple[int, int], float, bytes]] = {}

    def get(self, query: str, generation: tuple[int, int]) -> bytes | None:
        entry = self._entries.get(query)
        if entry is None or entry[0] != generation or time.monotonic() - entry[1] > MAX_AGE_S:
            return None
        return entry[2]

    def put(self, query: str, generation: tuple[int, int], prefix: bytes) -> None:
        if len(self._entries) >= MAX_ENTRIES and query not in self._entries:
            self._entries.pop(next(iter(self._entries)))
        self._entries[query] = (generation, time.monotonic(), prefix)


def rows_prefix(fields_json: bytes, rows_json: bytes) -> bytes:
    """The answer up to its "now": b'{"fields":[...],"rows":[...]'."""
    return b'{"fields":' + fields_json + b',"rows":' + rows_json


def with_now(prefix: bytes, now: float) -> bytes:
    return prefix + b',"now":' + repr(now).encode() + b"}"


class _Counted(Protocol):
    changes: int


def change_counter(ctl: _Counted) -> Any:
    """Middleware: a request other than a GET may change what an answer shows (a
    submission, a cancel, an update), so it counts as a change once it is handled."""
    from aiohttp import web

    @web.middleware
    async def count_changes(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)  # type: ignore[no-any-return]
        finally:
            if request.method != "GET":
                ctl.changes += 1

    return count_changes
