"""Answers encoded once per change: squeue's job table, and a plain squeue's text.

Every `squeue` asks for the compact form of GET /v1/jobs (`rows=1`): field names once,
one list per job.  Building it walks every job in Python and costs tens of milliseconds
at 10,000 jobs, on the event loop that also takes submissions; dashboards and workflow
managers ask for it in loops.  Here the encoded rows are kept per query and served again
while nothing changed: the key holds the controller's change count (every persisted job
or node change, every request that is not a GET) and its scheduling pass count, and an
answer older than MAX_AGE_S is rebuilt whatever the counts say.  The answer's "now" is
the time of each request, as when it is built afresh.

A plain `squeue` (default format and order; filters the controller applies, -h and -a
aside) asks for its text instead (`render=squeue`): the controller prints it once per
change with the command's own code (squeue.render_default), and per request only fills
in the TIME of the jobs running at that moment.  At 10,000 jobs that takes the
decoding, sorting and printing out of every command, and leaves the loop one
prepared body to send per request.

A change costs what it changes, not the queue (the polling load of issue #19): for
squeue's fields (MARKED_FIELDS) the rows are kept per job (JobRows), with each row's JSON
and each job's line of the text (kept_text.KeptText), and the job table marks every job
that may have changed (jobs.JobTable.mark); an answer is built again from the marked
jobs' rows alone, and kept while no row it holds changed (a pass that changed nothing
squeue shows leaves it).  Other queries, and any under PrivateData=jobs, are built whole
once per change as above.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Container
from concurrent.futures import ThreadPoolExecutor
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Protocol

import orjson

if TYPE_CHECKING:
    from aiohttp import web

    from corral.cli.squeue import QueuePrinter, RenderedQueue
    from corral.controller.kept_text import KeptText

MAX_AGE_S = 1.0
MAX_ENTRIES = 32  # distinct squeue queries kept (options differ by user and script)
# Queries whose printed lines and rows are kept to print again from (~0.6 KB a job each):
# the most recently printed ones.
MAX_PRINTERS = 4
# The squeue fields whose values are containers (tests/unit/test_squeue_text.py checks it).
CONTAINER_FIELDS = frozenset({"nodes", "sched_nodes", "array_tasks"})
FILL_ON_LOOP = 256  # running jobs whose TIME a request fills in on the loop (~1 ms)
# Rows a squeue text is printed from on the loop itself (well under a millisecond): handing
# a small queue to the printing thread and back cost more (1-5 ms on a busy machine).
PRINT_ON_LOOP = 200


class SqueueText:
    """A plain squeue's text, built once per change: as bytes when no TIME moves."""

    __slots__ = ("rendered", "body")

    def __init__(self, rendered: RenderedQueue) -> None:
        self.rendered = rendered
        self.body = None if rendered.running else rendered.pieces[0].encode()

    def at(self, now: float) -> bytes:
        return self.body if self.body is not None else self.rendered.text_at(now).encode()


Answer = bytes | SqueueText  # a rows prefix (with_now completes it), or a text
# what an answer was built from: (changes, passes) counts, or a JobRows' version and more
Generation = tuple[Any, ...]


# The fields every change of which marks its job in the job table (JobTable.mark: a job
# added, dropped, persisted or moved to another state; a pass's new priority, reason or
# plan): a query for these alone keeps its rows per job (JobRows).  A plain squeue's.
MARKED_FIELDS = frozenset({
    "array_job_id", "array_max_running", "array_task_id", "array_tasks", "display_id",
    "end_time", "job_id", "name", "node_cnt_wag", "nodes", "num_nodes", "partition",
    "priority", "reason", "sched_nodes", "start_time", "state", "suspend_time",
    "suspended_secs", "user"})


# JobRows' versions: unique among them all (a query's JobRows may be dropped and made again)
_versions = itertools.count()


class _Marks(Protocol):
    jobs: dict[int, Any]
    marks: list[int]
    marks_dropped: int


class JobRows:
    """One query's rows, kept per job with each row's JSON, and brought up to date from the
    job table's marks: a change to one job builds and encodes its row alone, and the
    answer is joined from the kept pieces in C.  From scratch at first, when the marks
    cannot be followed (too far behind; the table's order not the rows'), when a request
    other than a submission came (`epoch`: it may change what no mark tells, such as a
    partition or the accounts), and MAX_AGE_S after the last time.

    `version` grows whenever the answer changes: a mark whose job's row is what it was (a
    job outside the answer, a pass that changed nothing it shows) leaves it as it was."""

    __slots__ = ("build", "keep", "rows", "encoded", "seen", "epoch", "built_at",
                 "version", "odd", "unprinted", "kept_text")

    def __init__(self, build: Callable[[Any], list[Any]], keep: Callable[[Any], bool]) -> None:
        self.build = build  # job → its row, no list shared with the job (it may change)
        self.keep = keep  # job → whether the query answers it
        self.rows: dict[int, list[Any] | None] = {}  # every job, in the table's order
        self.encoded: dict[int, bytes | None] = {}  # None: not in the answer
        self.seen = -1  # the marks read (JobTable.marks_dropped + len(marks) then)
        self.epoch = -1
        self.built_at = 0.0
        self.version = next(_versions)
        self.odd = 0  # rows that orjson does not encode (the whole is then encoded at once)
        # the jobs whose rows changed since kept_text last printed (None: any may have)
        self.unprinted: dict[int, None] | None = None
        self.kept_text: KeptText | None = None

    def refresh(self, table: _Marks, epoch: int) -> None:
        total = table.marks_dropped + len(table.marks)
        if total == self.seen and epoch == self.epoch \
                and time.monotonic() - self.built_at <= MAX_AGE_S:
            return
        if self.seen < table.marks_dropped or epoch != self.epoch \
                or time.monotonic() - self.built_at > MAX_AGE_S \
                or not self._follow(table, table.marks[self.seen - table.marks_dropped:]):
            self._rebuild(table)
        self.seen, self.epoch = total, epoch

    def _follow(self, table: _Marks, marks: list[int]) -> bool:
        """The marked jobs' rows again; False where the rows no longer follow the table."""
        jobs, rows, encoded, build, keep = table.jobs, self.rows, self.encoded, \
            self.build, self.keep
        changed = False
        for job_id in dict.fromkeys(marks):
            job = jobs.get(job_id)
            if job is None:
                if rows.pop(job_id, None) is not None:
                    changed = True
                    if self.unprinted is not None:
                        self.unprinted[job_id] = None
                    self._forget_encoding(encoded.pop(job_id))
                else:
                    encoded.pop(job_id, None)
                continue
            row = build(job) if keep(job) else None
            if job_id in rows and rows[job_id] == row:
                continue
            changed = True
            if self.unprinted is not None:
                self.unprinted[job_id] = None
            rows[job_id] = row
            self._forget_encoding(encoded.get(job_id))
            encoded[job_id] = None if row is None else self._encode(row)
        # the rows in the table's order (a new job comes last in both; one dropped from the
        # table and put back in between two answers would not): compared in C
        if list(rows) != list(jobs):
            return False
        if changed:
            self.version = next(_versions)
        return True

    def _rebuild(self, table: _Marks) -> None:
        build, keep = self.build, self.keep
        rows = {job_id: build(job) if keep(job) else None for job_id, job in table.jobs.items()}
        self.built_at = time.monotonic()
        if rows == self.rows:
            return
        self.odd = 0
        self.rows = rows
        self.unprinted = None
        self.encoded = {job_id: None if row is None else self._encode(row)
                        for job_id, row in rows.items()}
        self.version = next(_versions)

    def _encode(self, row: list[Any]) -> bytes:
        try:
            return orjson.dumps(row, option=orjson.OPT_NON_STR_KEYS)
        except TypeError:
            self.odd += 1
            return b""  # encoded with the whole (jsonio's way) while any such row is kept

    def _forget_encoding(self, old: bytes | None) -> None:
        if old == b"":
            self.odd -= 1

    def squeue_text(self, fields: list[str], states: str | None,
                    hidden: set[str] | None) -> SqueueText | None:
        """squeue_text(fields, self.answer_rows(), states, hidden), printed again for the
        rows changed since the last time alone (kept_text.KeptText); None where it cannot
        be printed so."""
        if self.kept_text is None:
            from corral.controller.kept_text import KeptText

            self.kept_text = KeptText(fields)
        unprinted, self.unprinted = self.unprinted, {}
        rows = self.rows
        rendered = self.kept_text.print(
            None if unprinted is None else {job_id: rows.get(job_id) for job_id in unprinted},
            rows, None if states in (None, "all") else states.split(","),  # type: ignore[union-attr]
            hidden)
        if rendered is None:
            self.unprinted = None
            return None
        return SqueueText(rendered)

    def answer_rows(self) -> list[list[Any]]:
        return list(filter(None, self.rows.values()))  # type: ignore[arg-type]

    def rows_json(self) -> bytes:
        """jsonio.dumps_bytes(self.answer_rows()), byte for byte."""
        if self.odd:
            from corral import jsonio

            return jsonio.dumps_bytes(self.answer_rows())
        return b"[" + b",".join(filter(None, self.encoded.values())) + b"]"


class RowsCache:
    """Encoded `{"fields": ..., "rows": ...` prefixes (or squeue texts) by query string.

    A squeue text of more than PRINT_ON_LOOP jobs is printed on a thread of its own, one
    at a time: printing 10,000 jobs takes tens of milliseconds, which the loop spends on
    submissions meanwhile; the requests that come while it is printed wait for that print
    rather than start their own.  A text is printed again only when its rows differ from
    the last ones printed for that query: a scheduling pass that changed nothing, a change
    to other jobs, or MAX_AGE_S passing cost the rows alone (compared in C)."""

    def __init__(self) -> None:
        # requests other than submissions and GETs so far (change_counter): JobRows starts
        # afresh after one
        self.requests = 0
        self._job_rows: dict[str, JobRows] = {}
        self._entries: dict[str, tuple[Generation, float, Answer]] = {}
        self._printing: dict[tuple[str, Generation], asyncio.Future[SqueueText | None]] = {}
        self._printer: ThreadPoolExecutor | None = None
        # the rows each query's last text was printed from (their lists copied), and it
        self._printed: dict[str, tuple[list[list[Any]], set[str] | None, SqueueText]] = {}
        self._printers: dict[str, QueuePrinter] = {}  # each query's, used on that thread only

    def get(self, query: str, generation: Generation,
            max_age: float = MAX_AGE_S) -> Answer | None:
        entry = self._entries.get(query)
        if entry is None or entry[0] != generation or time.monotonic() - entry[1] > max_age:
            return None
        return entry[2]

    def job_rows(self, query: str, make: Callable[[], tuple[Callable[[Any], list[Any]],
                                                            Callable[[Any], bool]]]) -> JobRows:
        """The query's JobRows (a new one from make(): its build and keep), the most
        recent MAX_PRINTERS queries' kept."""
        rows = self._job_rows.pop(query, None)
        if rows is None:
            rows = JobRows(*make())
        _keep_recent(self._job_rows, query, rows)
        return rows

    def put(self, query: str, generation: Generation, prefix: Answer) -> None:
        if len(self._entries) >= MAX_ENTRIES and query not in self._entries:
            self._entries.pop(next(iter(self._entries)))
        self._entries[query] = (generation, time.monotonic(), prefix)

    def _thread(self) -> ThreadPoolExecutor:
        if self._printer is None:
            self._printer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="answers")
        return self._printer

    async def being_printed(self, query: str, generation: Generation) -> SqueueText | None:
        """The text for this query and generation that is being printed, once printed."""
        printing = self._printing.get((query, generation))
        return None if printing is None else await asyncio.shield(printing)

    async def print_text(self, query: str, generation: Generation, fields: list[str],
                         rows: list[list[Any]], states: str | None,
                         hidden: set[str] | None, copied: bool = False) -> SqueueText | None:
        """squeue_text(...) printed (on the answers' thread beyond PRINT_ON_LOOP rows), and
        kept.  `copied`: the rows share no list with the jobs (unshared())."""
        key = (query, generation)
        printing = self._printing.get(key)
        last = self._printed.get(query)
        if printing is None and last is not None and last[0] == rows and last[1] == hidden:
            # a pass or a change elsewhere, or an old answer: the same records print the same
            self.put(query, generation, last[2])
            return last[2]
        if printing is None:
            # the rows share their lists with the jobs, which the loop may change meanwhile
            shared = [] if copied else [i for i, f in enumerate(fields)
                                         if f in CONTAINER_FIELDS]
            for row in rows if shared else ():
                for i in shared:
                    value = row[i]
                    if value:
                        row[i] = list(value)
            printer = self._printers.pop(query, None)
            if printer is None:
                from corral.cli.squeue import QueuePrinter

                printer = QueuePrinter(fields)
            _keep_recent(self._printers, query, printer)
            if len(rows) <= PRINT_ON_LOOP:  # here and now, kept as the thread's would be
                text = squeue_text(fields, rows, states, hidden, printer)
                if text is not None:
                    self._printed_now(query, generation, rows, hidden, text)
                return text
            printing = asyncio.get_running_loop().run_in_executor(
                self._thread(), squeue_text, fields, rows, states, hidden, printer)
            self._printing[key] = printing

            def printed(done: asyncio.Future[SqueueText | None]) -> None:
                self._printing.pop(key, None)
                if not done.cancelled() and done.exception() is None:
                    text = done.result()
                    if text is not None:
                        self._printed_now(query, generation, rows, hidden, text)
            printing.add_done_callback(printed)
        return await asyncio.shield(printing)

    def _printed_now(self, query: str, generation: Generation, rows: list[list[Any]],
                     hidden: set[str] | None, text: SqueueText) -> None:
        self.put(query, generation, text)
        self._printed.pop(query, None)
        _keep_recent(self._printed, query, (rows, hidden, text))

    async def respond(self, answer: Answer, now: float) -> web.Response:
        """The response for an answer, at `now`."""
        from aiohttp import web

        if isinstance(answer, SqueueText):
            if answer.body is not None or len(answer.rendered.running) <= FILL_ON_LOOP:
                body = answer.at(now)
            else:  # many running jobs' TIME to print: on the answers' thread
                body = await asyncio.get_running_loop().run_in_executor(
                    self._thread(), answer.at, now)
            return web.Response(body=body, content_type="text/plain", charset="utf-8")
        return web.Response(body=with_now(answer, now), content_type="application/json",
                            charset="utf-8")


def _keep_recent(kept: dict[str, Any], query: str, value: Any) -> None:
    """kept[query] = value, as the most recent, forgetting the oldest beyond MAX_PRINTERS."""
    kept[query] = value
    while len(kept) > MAX_PRINTERS:
        kept.pop(next(iter(kept)))


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
            # the member's _value_ is its value, read in C: Enum.value is a property, a
            # Python call per job (a third of the reads of a 20-field row)
            paths.append("state._value_")
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


def unshared(build: Callable[[Any], list[Any]], fields: list[str]) -> Callable[[Any], list[Any]]:
    """`build` with the row's containers copied: a kept row must not change with its job's
    lists (changed in place), nor be changed by a thread printing it."""
    shared = [i for i, f in enumerate(fields) if f in CONTAINER_FIELDS]
    if not shared:
        return build

    def copied(job: Any) -> list[Any]:
        row = build(job)
        for i in shared:
            value = row[i]
            if value:
                row[i] = list(value)
        return row
    return copied


def rows_prefix(fields_json: bytes, rows_json: bytes) -> bytes:
    """The answer up to its "now": b'{"fields":[...],"rows":[...]'."""
    return b'{"fields":' + fields_json + b',"rows":' + rows_json


def with_now(prefix: bytes, now: float) -> bytes:
    return prefix + b',"now":' + repr(now).encode() + b"}"


_squeue_fields: tuple[str, ...] = ()


def squeue_fields() -> list[str]:
    """The fields a plain squeue's text is printed from (and a plain squeue asks for):
    worked out once (parsing the format took two thirds of a kept answer's handling)."""
    global _squeue_fields
    if not _squeue_fields:
        from corral.cli import squeue

        _squeue_fields = tuple(squeue.needed_fields(squeue.default_options()))
    return list(_squeue_fields)


def squeue_text(fields: list[str], rows: list[list[Any]], states: str | None,
                hidden: set[str] | None, printer: QueuePrinter | None = None) -> SqueueText | None:
    """The text a plain squeue prints for these rows (its answer's records), the jobs
    in `states` (the query's: "all" or names) and outside the `hidden` partitions
    (None: -a), printed by `printer` (which keeps the lines it printed last) or afresh.
    None where it cannot be printed here (the rows answer instead)."""
    from corral.cli import squeue

    if printer is None or printer.fields != fields:
        printer = squeue.QueuePrinter(fields)
    rendered = printer.print(rows, None if states in (None, "all")
                             else states.split(","), hidden)  # type: ignore[union-attr]
    return None if rendered is None else SqueueText(rendered)


class _Counted(Protocol):
    changes: int


def change_counter(ctl: _Counted, cache: RowsCache | None = None) -> Any:
    """Middleware: a request other than a GET may change what an answer shows (a
    submission, a cancel, an update), so it counts as a change once it is handled; one
    other than a submission (which marks the job it adds) as one of the cache's
    `requests`, which no mark may tell."""
    from aiohttp import web

    @web.middleware
    async def count_changes(request: web.Request, handler: Any) -> web.StreamResponse:
        unmarked = cache is not None and request.method != "GET" and not (
            request.method == "POST" and request.path == "/v1/jobs")
        if unmarked:  # before too: answers asked while it waits must not be the old ones
            cache.requests += 1  # type: ignore[union-attr]
        try:
            return await handler(request)  # type: ignore[no-any-return]
        finally:
            if request.method != "GET":
                ctl.changes += 1
            if unmarked:
                cache.requests += 1  # type: ignore[union-attr]

    return count_changes
