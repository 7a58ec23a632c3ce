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
from collections.abc import Callable, Container
from operator import attrgetter
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


# Fields whose value is not the attribute of the same name (server._field_getter's).
_COMPUTED = frozenset({"display_id", "alloc", "steps"})


def row_builder(fields: list[str], getter_for: Callable[[str], Callable[[Any], Any]],
                attributes: Container[str]) -> Callable[[Any], list[Any]]:
    """A function job → its row: `[getter_for(f)(job) for f in fields]`, with every field
    that is a plain attribute (named in `attributes`; "state" as its value) read by one
    attrgetter, in C, and only the computed ones called: a table of 10,000 jobs is rebuilt
    on the controller's loop after every change while clients poll it."""
    paths: list[str] = []
    computed: list[tuple[int, Callable[[Any], Any]]] = []
    for i, f in enumerate(fields):
        if f == "state":
            paths.append("state.value")
        elif f in attributes and f not in _COMPUTED:
            paths.append(f)
        else:
            computed.append((i, getter_for(f)))
            paths.append("__class__")  # a placeholder, replaced by the computed value
    if len(paths) < 2:
        getters = [getter_for(f) for f in fields]
        return lambda job: [g(job) for g in getters]
    read = attrgetter(*paths)
    if not computed:
        return lambda job: list(read(job))
    if len(computed) == 1:
        ((at, compute),) = computed

        def build_one(job: Any) -> list[Any]:
            row = list(read(job))
            row[at] = compute(job)
            return row
        return build_one

    def build(job: Any) -> list[Any]:
        row = list(read(job))
        for i, g in computed:
            row[i] = g(job)
        return row
    return build


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
