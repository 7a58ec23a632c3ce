"""The controller's core: its memory and its decisions, without I/O.

`Core` owns the job table and state machine (controller/jobs.py), the cluster and its
allocation ledger (controller/cluster.py), the final states of jobs gone from memory that
dependencies still name, the fairshare usage, and — through `AssocSource` — the
association database.  Its parts are composed, each a small object over the core:

    lifecycle   starting, ending, requeueing, preempting and expiring jobs; time limits
    passes      the scheduling pass's snapshot, and applying its `Decision`
    usage       fairshare usage: charging running jobs, charging ended ones, persisting
    reports     what agents report: registration, ended jobs, silence, bound CPUs

No method here writes the store, sends a message, arms a timer or reads the clock: time is
a parameter, and everything the world must do is emitted into `out` as typed effects
(controller/core/effects.py) for the driver to execute — the shell in production, the
simulator in virtual time, a test by reading them (`collecting()`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Protocol

from corral.controller.cluster import NOT_RESPONDING_REASON, Cluster, NodeEvent, NodeEventKind
from corral.controller.core.effects import (
    Effect,
    Outbox,
    PersistNextJobId,
    ReadGoneJobs,
)
from corral.controller.core.lifecycle import Lifecycle, NoSteps, StepTable
from corral.controller.core.passes import Passes
from corral.controller.core.reports import AgentReports
from corral.controller.core.settings import CoreSettings
from corral.controller.core.usage import UsageBook
from corral.controller.errors import invalid_job
from corral.controller.jobs import JobEvent, JobEventKind, JobTable
from corral.model.assoc import AssocDB
from corral.model.config import ClusterConfig
from corral.model.job import Job, JobState
from corral.model.node import Node, Partition
from corral.model.reasons import PendingReason
from corral.model.reservation import Reservation
from corral.sched import deps as sched_deps
from corral.sched.fairshare import UsageState
from corral.store.base import NodeRecord

log = logging.getLogger("corral.controller")


class AssocSource(Protocol):
    """Where the association database lives (controller/accounts.py: sacctmgr's changes
    replace `db`)."""

    db: AssocDB


class _NoAssoc:
    def __init__(self) -> None:
        self.db = AssocDB()


class Core:
    def __init__(self, config: ClusterConfig, *, accounts: AssocSource | None = None,
                 usage: UsageState | None = None,
                 reservations: Callable[[float], tuple[Reservation, ...]] | None = None
                 ) -> None:
        self.config = config
        self.settings = CoreSettings.from_config(config)
        self.out = Outbox()
        self.accounts: AssocSource = accounts if accounts is not None else _NoAssoc()
        self.cluster = Cluster(config.nodes, config.partitions)
        self.nodes: dict[str, Node] = self.cluster.nodes
        self.partitions: dict[str, Partition] = self.cluster.partitions
        self.table = JobTable()
        self.jobs: dict[int, Job] = self.table.jobs
        self.pending: dict[int, Job] = self.table.pending
        self.running: dict[int, Job] = self.table.running
        self.out.marked = self.table.mark
        # final states of jobs gone from memory that pending dependencies still name
        self.gone = sched_deps.GoneJobs()
        # the typed reason behind each pending job's reason text (for explanations)
        self.pending_reasons: dict[int, PendingReason] = {}
        self.next_id = 1
        # (uid, submit_id) -> job id: a submission resent after a lost answer is not run twice
        self.submit_ids: dict[tuple[int, str], int] = {}
        # what the lifecycle asks the step manager (controller/steps.py) about srun steps
        self.step_table: StepTable = NoSteps()
        # counters for sdiag and the metrics, derived from the job events
        self.stats = {"submitted": 0, "started": 0, "completed": 0, "failed": 0,
                      "cancelled": 0, "timeout": 0}
        self.reservations = reservations or (lambda now: ())
        self.lifecycle = Lifecycle(self)
        self.usage = UsageBook(self, usage or UsageState())
        self.passes = Passes(self)
        self.reports = AgentReports(self)
        self.table.subscribe(self._count)
        self.table.subscribe(self.usage.on_event)  # fairshare: charge a job as it ends
        self.table.subscribe(self.out.emit)  # the events are effects too
        self.cluster.subscribers.append(self.out.emit)

    # ---- effects ------------------------------------------------------------------
    @contextmanager
    def collecting(self) -> Iterator[list[Effect]]:
        """Collect what the core emits inside the block instead of handing it to the sink:
        `with core.collecting() as fx: core.lifecycle.start_job(...)`."""
        sink, self.out.sink = self.out.sink, None
        start = len(self.out.effects)
        got: list[Effect] = []
        try:
            yield got
        finally:
            got.extend(self.out.effects[start:])
            del self.out.effects[start:]
            self.out.sink = sink

    def _count(self, ev: JobEvent) -> None:
        kind = ev.kind
        if kind is JobEventKind.SUBMITTED:
            self.stats["submitted"] += 1
        elif kind is JobEventKind.STARTED:
            self.stats["started"] += 1
        elif kind is JobEventKind.UNSTARTED:  # its start was taken back (commit failed)
            self.stats["started"] -= 1
        elif kind is JobEventKind.ENDED:
            key = {JobState.COMPLETED: "completed", JobState.CANCELLED: "cancelled",
                   JobState.TIMEOUT: "timeout"}.get(ev.new, "failed")
            self.stats[key] += 1

    # ---- the job table --------------------------------------------------------------
    def set_state(self, job: Job, state: JobState, now: float,
                  kind: JobEventKind | None = None) -> JobEvent:
        return self.table.transition(job, state, now, kind)

    def node_event(self, node: Node, kind: NodeEventKind, now: float, source: str = "") -> None:
        self.cluster.emit(kind, node, now, source)

    def new_job_id(self) -> int:
        jid = self.next_id
        self.next_id += 1
        self.out.emit(PersistNextJobId())
        return jid

    def explain_pending(self, job_id: int) -> str | None:
        """Why a pending job waits, in words with the numbers behind it (not Slurm text)."""
        why = self.pending_reasons.get(job_id)
        return why.explain() if why is not None else None

    def active_pairs(self) -> list[tuple[str, str, int]]:
        """(user, account, job id) of every pending or running job: sacctmgr refuses to
        delete an association that has some."""
        return [(j.user, j.account, j.job_id) for j in self.jobs.values()
                if not j.state.finished]

    # ---- recovery -----------------------------------------------------------------
    def recover(self, nodes: Iterable[NodeRecord], active: Iterable[Job],
                finished: Iterable[Job], next_id: int, now: float) -> None:
        """Load what the store held (the shell reads it) after a restart."""
        for rec in nodes:
            n = self.nodes.get(rec.name)
            if n is None:
                continue
            n.admin_state, n.reason = rec.admin_state, rec.reason
            n.reason_user, n.reason_uid, n.reason_time = rec.reason_user, rec.reason_uid, rec.reason_time
        active = list(active)
        for job in active:
            self.table.load(job)
        self.lifecycle.recover_loans(active)  # suspended victims lend to their preemptors
        for job in active:
            if job.state.active:
                self.cluster.charge(job)
        for job in finished:
            self.table.load(job)
        for n in self.nodes.values():
            if n.reason is None and not n.registered:
                # configured, no agent yet: down, and sinfo -R says why
                n.reason, n.reason_user, n.reason_uid, n.reason_time = \
                    NOT_RESPONDING_REASON, "root", 0, now
        self.next_id = next_id
        for job in self.jobs.values():
            if job.submit_id:
                self.submit_ids[(job.uid, job.submit_id)] = job.array_job_id or job.job_id
        self.remember_gone(self.unknown_dependencies(self.pending.values()))
        log.info("recovered %d pending and %d running jobs; next job id %d",
                 len(self.pending), len(self.running), self.next_id)

    # ---- dependencies on jobs gone from memory -------------------------------------
    def unknown_dependencies(self, jobs: Iterable[Job]) -> set[int]:
        """Ids that dependencies of `jobs` name and that neither memory nor `gone` knows."""
        out: set[int] = set()
        for job in jobs:
            if not job.dependency:
                continue
            try:
                dep = sched_deps.parse_cached(job.dependency)
            except sched_deps.DependencyError:
                continue
            for jid in dep.job_ids():
                if jid not in self.jobs and not self.gone.knows(jid):
                    out.add(jid)
        return out

    def remember_gone(self, ids: set[int]) -> None:
        """Ask for the final state of jobs no longer in memory, once, so no pass reads the
        store.  Until it comes (`gone_found`), the ids count as pending jobs, so a pass keeps
        their dependants waiting instead of lifting the dependency."""
        if not ids:
            return
        for jid in ids:
            self.gone.add(sched_deps.GoneRecord(jid, None, None, JobState.PENDING.value, 0, None))
        self.out.emit(ReadGoneJobs(frozenset(ids)))

    def gone_found(self, ids: Iterable[int], found: list[Job]) -> None:
        """The store's answer to `ReadGoneJobs` (what it has of `ids`)."""
        ids = set(ids)
        for jid in ids:  # the placeholders
            self.gone.by_id.pop(jid, None)
        seen: set[int] = set()
        for job in found:
            if job.job_id in self.jobs:
                continue
            self.gone.add(sched_deps.GoneRecord.of(job))
            seen.add(job.job_id)
            if job.array_job_id is not None:
                seen.add(job.array_job_id)
        for jid in ids - seen:
            self.gone.missing.add(jid)
        self.out.schedule()

    # ---- lookups -----------------------------------------------------------------
    def find_jobs(self, spec: str, now: float, *, split: bool = False) -> list[Job]:
        """Jobs named by "12", "7" (a whole array), "7_2", "7_[1-3]"; [] if unknown.

        A task range is checked against MaxArraySize before anything is enumerated.
        With `split`, tasks named one by one that are still part of a pending array record
        are split off into records of their own, so an action touches only them.
        """
        spec = spec.strip()
        if "_" in spec:
            arr, wanted = self._task_spec(spec)
            out = []
            for j in list(self.jobs.values()):
                if j.array_job_id != arr:
                    continue
                if j.array_tasks is not None:
                    named = [t for t in j.array_tasks if wanted(t)]
                    if not named:
                        continue
                    if split and j.state == JobState.PENDING:
                        if len(named) == len(j.array_tasks):
                            out.append(j)  # every task left: act on the array record itself
                        else:
                            out.extend(self.split_array_task(j, now, t) for t in named)
                    else:
                        out.append(j)
                elif wanted(j.array_task_id):
                    out.append(j)
            return out
        if not spec.isdigit():
            raise invalid_job()
        jid = int(spec)
        job = self.jobs.get(jid)
        out = [job] if job is not None else []
        out.extend(j for j in self.jobs.values() if j.array_job_id == jid and j.job_id != jid)
        return out

    def _task_spec(self, spec: str) -> tuple[int, Callable[[int | None], bool]]:
        """"7_[1-3]" → (7, which task ids it names)."""
        head, _, tail = spec.partition("_")
        if not head.isdigit():
            raise invalid_job()
        ranges = task_ranges(tail.strip("[]"), max(self.settings.max_array_size, 1))

        def wanted(t: int | None) -> bool:
            return t is not None and any(lo <= t <= hi and (t - lo) % step == 0
                                         for lo, hi, step in ranges)

        return int(head), wanted

    def drop_pending_tasks(self, spec: str, check: Callable[[Job], None]) -> bool:
        """Cancel "7_2" (or a range) while those tasks are still in the array's pending
        record: as in Slurm, they are taken off the record and are gone (no record of
        their own to show), where splitting them off would leave cancelled records behind.
        A record whose every task is named is left to the plain cancel.  `check` raises
        for a caller who may not cancel the array.  True when some task was dropped."""
        spec = spec.strip()
        if "_" not in spec:
            return False
        arr, wanted = self._task_spec(spec)
        dropped = False
        for j in list(self.jobs.values()):
            if j.array_job_id != arr or not j.array_tasks or j.state != JobState.PENDING:
                continue
            named = {t for t in j.array_tasks if wanted(t)}
            if not named or len(named) == len(j.array_tasks):
                continue
            check(j)
            j.array_tasks = [t for t in j.array_tasks if t not in named]
            self.out.job(j)
            dropped = True
        return dropped

    def split_array_task(self, meta: Job, now: float, task_id: int | None = None) -> Job:
        """Take a task (the next one by default) off a pending array record.

        The last task keeps the array record's own job id, as in Slurm."""
        assert meta.array_tasks
        if task_id is None:
            task_id = meta.array_tasks.pop(0)
        else:
            meta.array_tasks.remove(task_id)
        if not meta.array_tasks:
            meta.array_tasks = None
            meta.array_task_id = task_id
            return meta
        d = meta.to_dict()
        d.update(job_id=self.new_job_id(), array_tasks=None, array_task_id=task_id,
                 array_max_running=None)
        task = Job.from_dict(d)
        task.array_max_running = meta.array_max_running
        self.table.load(task)  # a record split off, not a new submission: no event
        self.out.job(meta)
        return task


def task_ranges(text: str, max_size: int) -> list[tuple[int, int, int]]:
    """"1-5,7,10-20:2" as (first, last, step) ranges, every task below MaxArraySize, checked
    before anything is enumerated (a range up to 2^31 costs nothing); else invalid_job()."""
    out: list[tuple[int, int, int]] = []
    if not text or len(text) > 4096:
        raise invalid_job()
    for part in text.split(","):
        lo_s, dash, rest = part.strip().partition("-")
        hi_s, colon, step_s = rest.partition(":")
        if not lo_s.isdigit() or (dash and not hi_s.isdigit()) or (colon and not step_s.isdigit()):
            raise invalid_job()
        lo = int(lo_s)
        hi = int(hi_s) if rest else lo
        step = int(step_s) if step_s else 1
        if hi < lo or step < 1 or hi >= max_size:
            raise invalid_job()
        out.append((lo, hi, step))
    return out


__all__ = ["Core", "AssocSource", "task_ranges", "NodeEvent"]
