"""Persistence: the one write path between the controller's memory and its store.

Changes are marked dirty in memory (jobs, nodes, payloads, the fairshare usage, accounting
rows, the token/key registry, Slurm reservations, the runtime partition table); one writer task commits everything dirty in one store
transaction (one fsync per batch, however many requests it holds), carrying the epoch the
writer took from the store, and a request answers only once its change is committed
(`await durable()`).

Nothing reaches an agent before the change it depends on is committed: controls wait in
`after_commit`, launches in `launch_after_commit` (their message is built after the commit,
in the store's thread, from the committed record: the script is read there, not on the
loop).  When a commit fails, nothing is sent, and the writer asks its owner
(`on_failure`, the shell) what of the batch to take back: starts decided in it are undone
in memory (their launches and the messages about them dropped), and submissions never
made visible are withdrawn (their records and payloads dropped: their clients got the
error).  The rest of the batch's changes and messages are kept and the commit retried, so
the store and the agents stay as they were until it succeeds.  A commit refused for a stale epoch (another controller took the store) is
final: this writer sends and writes nothing more.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from corral import jsonio
from corral.controller.errors import SlurmError
from corral.model.job import Job
from corral.store.base import (
    AuthRecord,
    CrontabRecord,
    JobPayload,
    NodeHistoryEnd,
    NodeHistoryEntry,
    NodeRecord,
    PreparedBatch,
    ReservationChange,
    RuntimePartitions,
    StaleEpoch,
    Store,
    UsageRecord,
    WriteBatch,
    accounting_change,
)

log = logging.getLogger("corral.controller")

Send = Callable[[dict[str, Any]], None]
RETRY_S = 1.0  # between tries of a failed commit
# Job records are encoded on the loop (they are the loop's objects) this many at a time, the
# loop running other work between chunks: a burst of 4,000 changed jobs must not stall it
ENCODE_CHUNK = 256
T = TypeVar("T")


class Launch:
    """A launch waiting for its commit: `build(committed job)` runs in the store's thread
    and returns the message; `deliver(message or the exception)` runs on the loop.
    `undo` is the owner's (the core's record of the start, when it was decided in this
    launch's batch), for `on_failure`."""

    __slots__ = ("job_id", "build", "deliver", "undo")

    def __init__(self, job_id: int, build: Callable[[Job], dict[str, Any]],
                 deliver: Callable[[dict[str, Any] | Exception], None],
                 undo: object = None) -> None:
        self.job_id = job_id
        self.build = build
        self.deliver = deliver
        self.undo = undo


After = tuple[Send, dict[str, Any]] | Launch


class TakenBack:
    """What the owner took back of a failed batch (`GroupCommitWriter.on_failure`): the
    jobs whose records and payloads are not written (`withdrawn`: submissions never made
    visible) and the jobs whose launches and messages are not sent (`unsent`)."""

    __slots__ = ("withdrawn", "unsent")

    def __init__(self, withdrawn: set[int] | None = None, unsent: set[int] | None = None
                 ) -> None:
        self.withdrawn = withdrawn or set()
        self.unsent = unsent or set()


def _about(item: After, runs: set[int]) -> bool:
    """Whether a waiting launch or message is about the current run of a job in `runs`
    (an Epilog's job_end is about an earlier run: it still goes)."""
    if isinstance(item, Launch):
        return item.job_id in runs
    msg = item[1]
    return msg.get("job_id") in runs and msg.get("type") != "job_end"


class GroupCommitWriter:
    def __init__(self, store: Store, node_record: Callable[[str], NodeRecord],
                 next_id: Callable[[], int]) -> None:
        self.store = store
        self._node_record = node_record
        self._next_id = next_id
        self.epoch = store.take_epoch()  # this controller's; the hook for a standby
        self.fenced = False  # a commit was refused for a stale epoch: write nothing more
        self.dirty_jobs: dict[int, Job] = {}
        self.dirty_nodes: set[str] = set()
        self.payloads: list[tuple[int, JobPayload]] = []
        self.after: list[After] = []
        self.next_id_dirty = False
        self.crontab_records: list[CrontabRecord] = []  # scrontab (controller/crontab.py)
        self.reservation_changes: list[ReservationChange] = []  # controller/reservations.py
        self.runtime_partitions: RuntimePartitions | None = None  # the latest; replaces
        self.usage_state: dict[str, Any] | None = None
        self.usage_records: list[UsageRecord] = []
        self.auth_records: list[AuthRecord] = []
        self.node_events: list[NodeHistoryEntry | NodeHistoryEnd] = []  # node history, in order
        self.failures = 0  # commits failed in a row
        # asked, when a commit fails, what of the batch to take back (the shell)
        self.on_failure: Callable[[WriteBatch, list[After]], TakenBack] | None = None
        self._flush_waiter: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        # a store that commits in memory needs no thread (the harness's MemoryStore)
        self._inline = bool(getattr(store, "inline", False))
        self._executor = None if self._inline else \
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="store")

    # ---- marking ---------------------------------------------------------
    def job(self, job: Job) -> None:
        self.dirty_jobs[job.job_id] = job
        self.kick()

    def node(self, name: str) -> None:
        self.dirty_nodes.add(name)
        self.kick()

    def payload(self, job_id: int, payload: JobPayload) -> None:
        self.payloads.append((job_id, payload))

    def crontab(self, record: CrontabRecord) -> None:
        self.crontab_records.append(record)
        self.kick()

    def next_job_id(self) -> None:
        self.next_id_dirty = True

    def reservation(self, change: ReservationChange) -> None:
        self.reservation_changes.append(change)
        self.kick()

    def partitions(self, table: RuntimePartitions) -> None:
        """The runtime partition table: only the latest is written."""
        self.runtime_partitions = table
        self.kick()

    def usage(self, state: dict[str, Any] | None, records: list[UsageRecord]) -> None:
        """The fairshare state (replaces what is stored) and hourly usage (added to it)."""
        if state is not None:
            self.usage_state = state
        self.usage_records.extend(records)
        self.kick()

    def auth(self, records: list[AuthRecord]) -> None:
        self.auth_records.extend(records)
        self.kick()

    def node_history(self, event: NodeHistoryEntry | NodeHistoryEnd) -> None:
        self.node_events.append(event)
        self.kick()

    def after_commit(self, send: Send, msg: dict[str, Any]) -> None:
        self.after.append((send, msg))
        self.kick()

    def launch_after_commit(self, job: Job, build: Callable[[Job], dict[str, Any]],
                            deliver: Callable[[dict[str, Any] | Exception], None],
                            undo: object = None) -> None:
        """Send a job's launch once its record (marked now, so in the same commit) is durable."""
        self.dirty_jobs[job.job_id] = job
        self.after.append(Launch(job.job_id, build, deliver, undo))
        self.kick()

    def _pending(self) -> bool:
        if self.crontab_records or self.reservation_changes or self.runtime_partitions:
            return True
        return bool(self.dirty_jobs or self.dirty_nodes or self.payloads or self.next_id_dirty
                    or self.usage_state is not None or self.usage_records
                    or self.auth_records or self.node_events)

    def kick(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def durable(self) -> None:
        """Return once every change made so far is committed to the store."""
        if self.fenced:
            raise SlurmError("state store write refused: another controller holds the store",
                             0, 500)
        if not self._pending() and (self._task is None or self._task.done()):
            return
        if self._flush_waiter is None:
            self._flush_waiter = asyncio.get_running_loop().create_future()
        fut = self._flush_waiter
        self.kick()
        await asyncio.shield(fut)

    # ---- reads in the store's thread -------------------------------------
    def reads_off_loop(self) -> bool:
        """Whether `read` runs in the store's thread (a threaded store, a running loop)."""
        if self._executor is None:
            return False
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return False
        return True

    def read(self, fn: Callable[[], T], deliver: Callable[[T | Exception], None]) -> None:
        """Run the store read `fn` in the store's thread; `deliver` its answer (or the
        exception) on the loop."""
        fut = asyncio.get_running_loop().run_in_executor(self._executor, fn)

        def done(f: asyncio.Future[T]) -> None:
            if f.cancelled():  # the loop is closing
                return
            exc = f.exception()
            deliver(exc if isinstance(exc, Exception) else f.result())

        fut.add_done_callback(done)

    # ---- accounting (sacctmgr), from a worker thread or, inline stores, the loop ----
    def commit_accounting(self, old: dict[str, list[dict[str, Any]]],
                          new: dict[str, list[dict[str, Any]]]) -> None:
        """Commit the rows that differ between two accounting record sets; durable when it
        returns.  Through the writer's thread and epoch, serialised with its commits."""
        change = accounting_change(old, new)
        if not change:
            return
        prepared = self.store.prepare(WriteBatch(accounting=change, epoch=self.epoch))
        if self._executor is None:
            self._commit(prepared)
        else:
            self._executor.submit(self._commit, prepared).result()

    def _commit(self, prepared: PreparedBatch) -> None:
        if self.fenced:
            raise StaleEpoch(f"this controller's epoch {self.epoch} was taken over")
        try:
            self.store.commit(prepared)
        except StaleEpoch:
            self.fenced = True
            raise

    # ---- the writer task -------------------------------------------------
    def _take(self) -> WriteBatch:
        batch = WriteBatch(
            jobs=list(self.dirty_jobs.values()),
            payloads=self.payloads,
            nodes=[self._node_record(n) for n in self.dirty_nodes],
            next_job_id=self._next_id() if self.next_id_dirty else None,
            usage_state=self.usage_state, usage=self.usage_records,
            auth=self.auth_records, node_events=self.node_events, epoch=self.epoch)
        self.dirty_jobs = {}
        batch.crontabs, self.crontab_records = self.crontab_records, []
        batch.reservations, self.reservation_changes = self.reservation_changes, []
        batch.partitions, self.runtime_partitions = self.runtime_partitions, None
        self.dirty_nodes = set()
        self.payloads = []
        self.next_id_dirty = False
        self.usage_state = None
        self.usage_records = []
        self.auth_records = []
        self.node_events = []
        return batch

    def _take_back(self, batch: WriteBatch, after: list[After]) -> TakenBack:
        if self.on_failure is None:
            return TakenBack()
        try:
            return self.on_failure(batch, after)
        except Exception:  # nothing taken back: the whole batch is retried
            log.exception("taking back a failed commit's decisions failed")
            return TakenBack()

    def _give_back(self, batch: WriteBatch, after: list[After],
                   taken: TakenBack | None = None) -> None:
        """A failed commit's changes and messages, back in front of what came since, less
        what its owner took back."""
        withdrawn = taken.withdrawn if taken is not None else set()
        unsent = taken.unsent if taken is not None else set()
        for job in batch.jobs:
            if job.job_id not in withdrawn:
                self.dirty_jobs.setdefault(job.job_id, job)
        if withdrawn:
            batch.payloads = [p for p in batch.payloads if p[0] not in withdrawn]
        if unsent:
            after = [item for item in after if not _about(item, unsent)]
        self.dirty_nodes.update(n.name for n in batch.nodes)
        self.payloads[:0] = batch.payloads
        self.crontab_records[:0] = batch.crontabs
        self.reservation_changes[:0] = batch.reservations
        if self.runtime_partitions is None:  # a newer table wins over the failed one
            self.runtime_partitions = batch.partitions
        self.next_id_dirty = self.next_id_dirty or batch.next_job_id is not None
        if self.usage_state is None:
            self.usage_state = batch.usage_state
        self.usage_records[:0] = batch.usage
        self.auth_records[:0] = batch.auth
        self.node_events[:0] = batch.node_events
        self.after[:0] = after

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while (self._pending() or self._flush_waiter is not None or self.after) \
                and not self.fenced:
            batch = self._take()
            waiter, self._flush_waiter = self._flush_waiter, None
            after, self.after = self.after, []
            built: list[tuple[Launch, dict[str, Any] | Exception]] = []
            try:
                prepared = await self._prepare(batch) if batch else None
                if self._executor is None:
                    if prepared is not None:
                        self._commit(prepared)
                    built = self._build_launches(prepared, after)
                else:
                    built = await loop.run_in_executor(self._executor, self._commit_and_build,
                                                       prepared, after)
            except Exception as e:  # the store failed: nobody may be told "done", nor any agent
                if isinstance(e, StaleEpoch):
                    log.critical("store write refused, this controller stops writing: %s", e)
                else:
                    self.failures += 1
                    log.exception("store write failed (try %d); retrying in %.0f s, nothing "
                                  "is sent until it succeeds", self.failures, RETRY_S)
                    self._give_back(batch, after, self._take_back(batch, after))
                if waiter is not None and not waiter.done():
                    waiter.set_exception(SlurmError(f"state store write failed: {e}", 0, 500))
                if not self.fenced:
                    await asyncio.sleep(RETRY_S)
                continue
            self.failures = 0
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
            if after:
                # let the answers that waited on this commit go out first
                await asyncio.sleep(0)
                launched = iter(built)
                for item in after:
                    if isinstance(item, Launch):
                        item.deliver(next(launched)[1])
                    else:
                        send, msg = item
                        send(msg)
        if self.fenced and self._flush_waiter is not None and not self._flush_waiter.done():
            self._flush_waiter.set_exception(SlurmError("state store write refused", 0, 500))
            self._flush_waiter = None

    async def _prepare(self, batch: WriteBatch) -> PreparedBatch:
        """The batch encoded for the store, its job records `ENCODE_CHUNK` at a time with the
        loop let go in between.  A job changed after its chunk was encoded is marked dirty
        again and goes in the next batch, so the store still ends with its latest record."""
        jobs = batch.jobs
        if len(jobs) <= ENCODE_CHUNK:
            return self.store.prepare(batch)
        batch.jobs = []
        try:
            rest = self.store.prepare(batch)
        finally:
            batch.jobs = jobs  # kept whole: a failed commit gives the batch back
        rows = []
        for i in range(0, len(jobs), ENCODE_CHUNK):
            if i:
                await asyncio.sleep(0)
            rows.extend(self.store.prepare(WriteBatch(jobs=jobs[i:i + ENCODE_CHUNK])).jobs)
        rest.jobs = rows
        return rest

    def _commit_and_build(self, prepared: PreparedBatch | None,
                          after: list[After]
                          ) -> list[tuple[Launch, dict[str, Any] | Exception]]:
        if prepared is not None:
            self._commit(prepared)
        return self._build_launches(prepared, after)

    @staticmethod
    def _build_launches(prepared: PreparedBatch | None,
                        after: list[After]
                        ) -> list[tuple[Launch, dict[str, Any] | Exception]]:
        """Each launch's message, from its job's committed record (after the commit)."""
        out: list[tuple[Launch, dict[str, Any] | Exception]] = []
        records: dict[int, str] | None = None
        for item in after:
            if not isinstance(item, Launch):
                continue
            if records is None:
                records = {row[0]: row[7] for row in prepared.jobs} if prepared else {}
            try:
                text = records.get(item.job_id)
                if text is None:
                    raise RuntimeError(f"job {item.job_id} was not in its launch's commit")
                out.append((item, item.build(Job.from_dict(jsonio.loads(text)))))
            except Exception as e:
                out.append((item, e))
        return out


class AccountingThroughWriter:
    """The store `controller/accounts.py` persists sacctmgr's changes to: each change is
    committed as the rows it adds, changes or removes (not the whole table), through the
    writer (its thread and epoch).  Called from a worker thread (api_accounts.py), or on
    the loop for an inline store."""

    def __init__(self, store: Store, writer: GroupCommitWriter) -> None:
        self._store = store
        self._writer = writer
        self._committed: dict[str, list[dict[str, Any]]] | None = None
        self.inline = bool(getattr(store, "inline", False))

    def load_accounting(self) -> dict[str, list[dict[str, Any]]]:
        records = self._store.load_accounting()
        self._committed = records
        return records

    def replace_accounting(self, records: dict[str, list[dict[str, Any]]]) -> None:
        old = self._committed if self._committed is not None else self._store.load_accounting()
        self._writer.commit_accounting(old, records)
        self._committed = records
