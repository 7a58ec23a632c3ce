"""What the core asks the world to do: typed effects, collected in an outbox.

The core (controller/core/) changes its memory and emits effects; it never writes the
store, sends to an agent, arms a timer or reads the clock.  Whoever drives it executes
what it emitted: the shell (controller/shell.py) in production — persist through the
group-commit writer, send after the commit, arm the pass cadence —, the simulator
(corral/sim) in virtual time, a unit test by reading the list.

Job and node events are effects too: they are also handed, as they happen, to the
table's and the cluster's subscribers (the step manager, metrics, the event stream).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from corral.controller.cluster import NodeEvent
from corral.controller.jobs import JobEvent
from corral.model.job import Job, NodeAlloc, Step
from corral.model.reasons import PendingReason
from corral.store.base import (
    CrontabRecord,
    JobPayload,
    ReservationChange,
    RuntimePartitions,
    UsageRecord,
)


@dataclass(frozen=True, slots=True)
class PersistJob:
    """The job's record changed: write it (in the next commit)."""

    job: Job


@dataclass(frozen=True, slots=True)
class PersistNode:
    name: str


@dataclass(frozen=True, slots=True)
class PersistPayload:
    """A new job's script, environment and arguments (written once, with its record)."""

    job_id: int
    payload: JobPayload


@dataclass(frozen=True, slots=True)
class PersistNextJobId:
    """The next job id moved on (it is the core's counter; the store keeps it)."""


@dataclass(frozen=True, slots=True)
class PersistUsage:
    """The fairshare state (replaces the stored one) and hourly usage records (added)."""

    state: dict[str, Any] | None
    records: tuple[UsageRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class PersistCrontab:
    record: CrontabRecord


@dataclass(frozen=True, slots=True)
class PersistReservation:
    """A Slurm reservation created, changed or removed (controller/reservations.py): a
    copy, taken when it changed."""

    change: ReservationChange


@dataclass(frozen=True, slots=True)
class PersistPartitions:
    """The runtime partition table and node attributes (controller/partitions.py), a copy
    taken when they changed: it replaces the stored one."""

    table: RuntimePartitions


@dataclass(slots=True)  # (not frozen: a frozen init costs ~10x, paid on every start)
class StartUndo:
    """What a start changed of a pending job, as it was before, and which run it began
    (`run`: the job's restart count, `start`: its start time): what `Lifecycle.unstart`
    restores when the commit of that start fails."""

    run: int
    start: float
    reason: str
    start_time: float | None
    end_time: float | None
    alloc: list[NodeAlloc]
    nodes: list[str]
    batch_host: str | None
    num_tasks: int
    scheduler: str | None
    sched_start: float | None
    sched_nodes: list[str]
    kill_reason: str | None
    steps: list[Step]
    partition: str
    pending_reason: PendingReason | None  # the pass's typed reason (core.pending_reasons)


@dataclass(frozen=True, slots=True)
class Launch:
    """Start the job's batch step on its batch host, once its start is committed.  `undo`
    (a start decided in this commit's batch) lets the shell take the start back when that
    commit fails."""

    job: Job
    undo: StartUndo | None = None


@dataclass(frozen=True, slots=True)
class Control:
    """Tell the agent of `node` to act on a running job ("cancel", "requeue", "signal",
    "time_limit", "suspend", "resume", …), once the change behind it is committed.
    Internal: no authorization here (scancel's is in the use cases; preemption and
    idle-GPU reclaim decide it themselves)."""

    job_id: int
    node: str
    control: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SignalSteps:
    """Signal the job's srun steps (the step manager's part: preemption's SIGTERM)."""

    job_id: int
    signum: int


@dataclass(frozen=True, slots=True)
class ScheduleSoon:
    """Something the scheduler could act on changed: a pass soon (the cadence coalesces)."""

    delay: float = 0.0


@dataclass(frozen=True, slots=True)
class ReadGoneJobs:
    """Dependencies name jobs no longer in memory: read their final states from the store
    (off the loop) and give them to `Core.gone_found`; until then they count as pending."""

    ids: frozenset[int]


Effect = (PersistJob | PersistNode | PersistPayload | PersistNextJobId | PersistUsage
          | PersistCrontab | PersistReservation | PersistPartitions | Launch | Control
          | SignalSteps | ScheduleSoon | ReadGoneJobs | JobEvent | NodeEvent)


class Outbox:
    """Where the core's effects go, in the order they were emitted.

    With a `sink` (the shell's executor, the simulator's), each effect is handed to it as
    it is emitted — the shell persists through the group-commit writer and sends only
    after the commit, so executing at once changes nothing of that order.  Without one,
    effects are kept in `effects` until taken (`take()`, `Core.collecting()`)."""

    __slots__ = ("effects", "sink", "marked")

    def __init__(self) -> None:
        self.effects: list[Effect] = []
        self.sink: Callable[[Effect], None] | None = None
        # told the id of every job persisted (JobTable.mark: what was built of it, squeue's
        # rows and the passes' views, is made again), whoever executes the effects
        self.marked: Callable[[int], None] | None = None

    def emit(self, effect: Effect) -> None:
        if self.sink is not None:
            self.sink(effect)
        else:
            self.effects.append(effect)

    def take(self) -> list[Effect]:
        out, self.effects = self.effects, []
        return out

    # shorthands for the core's code
    def job(self, job: Job) -> None:
        if self.marked is not None:
            self.marked(job.job_id)
        self.emit(PersistJob(job))

    def node(self, name: str) -> None:
        self.emit(PersistNode(name))

    def schedule(self, delay: float = 0.0) -> None:
        self.emit(ScheduleSoon(delay))

    def control(self, job: Job, op: dict[str, Any]) -> None:
        """`op` to the job's batch host (nothing when it has none: a pending job)."""
        if job.batch_host is not None:
            self.emit(Control(job.job_id, job.batch_host, op))
