"""The job table and the job state machine.

`JobTable.transition()` is the one place that writes a job's state.  Each transition keeps
the table's views (pending, running) in step and emits one typed `JobEvent` to every
subscriber: the step manager, the controller's log, and later accounting, metrics and the
web page.  Subscribers must not raise; one that does is logged and the others still run."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from corral.model.job import Job, JobState

log = logging.getLogger("corral.controller")


class JobEventKind(StrEnum):
    SUBMITTED = "submitted"  # a new pending job, durable
    STARTED = "started"  # resources allocated; batch step launched
    ENDING = "ending"  # being killed (cancel, requeue, node failure): COMPLETING
    ENDED = "ended"  # finished, resources released
    REQUEUED = "requeued"  # back to PENDING
    SUSPENDED = "suspended"
    RESUMED = "resumed"
    # a start whose commit failed, undone: PENDING again as before it, its resources
    # released; no launch, Prolog message or control of that start ever went out
    UNSTARTED = "unstarted"


@dataclass(frozen=True, slots=True)
class JobEvent:
    kind: JobEventKind
    job: Job
    old: JobState | None  # None for a new job
    new: JobState
    time: float


# the transitions the state machine allows (from -> to)
_ALLOWED: dict[JobState | None, frozenset[JobState]] = {
    None: frozenset({JobState.PENDING}),
    JobState.PENDING: frozenset({JobState.RUNNING, JobState.CANCELLED, JobState.FAILED}),
    JobState.RUNNING: frozenset({JobState.SUSPENDED, JobState.COMPLETING, JobState.PENDING}
                                | {s for s in JobState if s.finished}),
    JobState.SUSPENDED: frozenset({JobState.RUNNING, JobState.COMPLETING, JobState.PENDING}
                                  | {s for s in JobState if s.finished}),
    JobState.COMPLETING: frozenset({JobState.PENDING} | {s for s in JobState if s.finished}),
}
for _s in JobState:
    if _s.finished:
        _ALLOWED[_s] = frozenset({JobState.PENDING})  # scontrol requeue of a finished job


class TransitionError(RuntimeError):
    pass


Subscriber = Callable[[JobEvent], None]

# Marks kept before the oldest are dropped (a reader that far behind starts afresh).
MAX_MARKS = 100_000


class JobTable:
    def __init__(self) -> None:
        self.jobs: dict[int, Job] = {}
        self.pending: dict[int, Job] = {}  # subset of jobs: PENDING
        self.running: dict[int, Job] = {}  # subset: holding resources
        self.subscribers: list[Subscriber] = []
        # ids of jobs that may have changed, in order: every job added, dropped, persisted,
        # moved to another state or given new reasons, priority or plans by a pass
        # (answers.JobRows keeps squeue's rows per job and catches up from its place here)
        self.marks: list[int] = []
        self.marks_dropped = 0  # marks before marks[0]

    def mark(self, job_id: int) -> None:
        marks = self.marks
        marks.append(job_id)
        if len(marks) > MAX_MARKS:
            self.marks_dropped += len(marks)
            self.marks = []

    def subscribe(self, cb: Subscriber) -> None:
        self.subscribers.append(cb)

    def load(self, job: Job) -> None:
        """A job recovered from the store: no transition, no event."""
        self.jobs[job.job_id] = job
        self.mark(job.job_id)
        if job.state == JobState.PENDING:
            self.pending[job.job_id] = job
        elif job.state.active:
            self.running[job.job_id] = job

    def forget(self, job_id: int) -> None:
        """Drop a finished job from memory (the store keeps it for sacct)."""
        job = self.jobs.get(job_id)
        if job is not None and job.state.finished:
            del self.jobs[job_id]
            self.mark(job_id)

    def transition(self, job: Job, new: JobState, now: float,
                   kind: JobEventKind | None = None) -> JobEvent:
        """Set `job`'s state (the only writer of Job.state) and tell every subscriber."""
        old = job.state if job.job_id in self.jobs else None
        if new not in _ALLOWED.get(old, frozenset()):
            raise TransitionError(f"job {job.job_id}: {old} -> {new} is not a transition")
        job.state = new
        jid = job.job_id
        self.jobs[jid] = job
        self.mark(jid)
        if new == JobState.PENDING:
            self.pending[jid] = job
            self.running.pop(jid, None)
        elif new.active:
            self.pending.pop(jid, None)
            self.running[jid] = job
        else:
            self.pending.pop(jid, None)
            self.running.pop(jid, None)
        if kind is None:
            kind = _kind(old, new)
        ev = JobEvent(kind, job, old, new, now)
        for cb in list(self.subscribers):
            try:
                cb(ev)
            except Exception:
                log.exception("subscriber failed on %s of job %d", kind, jid)
        return ev


def _kind(old: JobState | None, new: JobState) -> JobEventKind:
    if old is None:
        return JobEventKind.SUBMITTED
    if new == JobState.PENDING:
        return JobEventKind.REQUEUED
    if new == JobState.RUNNING:
        return JobEventKind.RESUMED if old == JobState.SUSPENDED else JobEventKind.STARTED
    if new == JobState.SUSPENDED:
        return JobEventKind.SUSPENDED
    if new == JobState.COMPLETING:
        return JobEventKind.ENDING
    return JobEventKind.ENDED
