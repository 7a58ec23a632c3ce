"""The job lifecycle: starting, ending, requeueing and forgetting jobs.

Every change of a job's state goes through `ControllerBase.set_state` (the job table's
state machine); resources are charged and released through the cluster's ledger."""

from __future__ import annotations

import logging

from corral.controller.base import ControllerBase
from corral.model.job import FINISHED_STATES, Job, JobState, NodeAlloc, Reason, Step
from corral.model.messages import JOB_END_STATES
from corral.sched import deps as sched_deps

log = logging.getLogger("corral.controller")

# what an agent may report a batch step ended as, the one list of model/messages
# (REQUEUED: the step was killed for a requeue the controller asked for)
AGENT_END_STATES = JOB_END_STATES


def end_reason(state: str, exit_code: int, signal: int, note: str | None = None) -> str:
    """The Reason= a finished job shows, as slurmctld sets it (job_completion_logger and
    friends): NonZeroExitCode for FAILED, RaisedSignal:N(NAME) when a signal killed it,
    TimeLimit, NodeDown, OutOfMemory, JobLaunchFailure, BootFail; None otherwise."""
    if note is not None and state in ("FAILED", "NODE_FAIL"):
        return "JobLaunchFailure"
    if state == "FAILED":
        if signal and not exit_code:
            import signal as _signal

            try:
                name = _signal.Signals(signal).name[3:]
            except ValueError:
                name = str(signal)
            return f"RaisedSignal:{signal}({name})"
        return "NonZeroExitCode"
    return {"TIMEOUT": "TimeLimit", "NODE_FAIL": "NodeDown", "OUT_OF_MEMORY": "OutOfMemory",
            "BOOT_FAIL": "BootFail", "DEADLINE": "DeadLine"}.get(state, Reason.NONE)


class JobLifecycle(ControllerBase):
    def _launch(self, job: Job) -> None:
        raise NotImplementedError

    def start_job(self, job: Job, alloc: list[NodeAlloc], now: float) -> None:
        job.reason = Reason.NONE
        job.start_time = now
        job.end_time = None
        job.alloc = alloc
        job.nodes = [a.node for a in alloc]
        job.batch_host = job.nodes[0]
        job.scheduler = "Main"
        job.sched_start = None
        job.sched_nodes = []
        job.kill_reason = None
        self.pending_reasons.pop(job.job_id, None)
        self.cluster.charge(job)
        self.stats["started"] += 1
        if job.batch:
            job.steps = [s for s in job.steps if s.step_id != "batch"]
            job.steps.append(Step("batch", "batch", JobState.RUNNING.value, start_time=now,
                                  cpus=alloc[0].cpus, nodes=alloc[0].node))
        self.mark(job)
        self.set_state(job, JobState.RUNNING, now)
        if job.batch and job.state == JobState.RUNNING:
            self._launch(job)

    # ---------------------------------------------------------- job endings
    def job_ended(self, job_id: int, state: str, exit_code: int, signal: int, end_time: float,
                  note: str | None = None) -> Job | None:
        """The agent says the batch step is over (or a launch failed).

        A report for a job that is not running (unknown, already ended: a duplicate) or
        with a state no batch step ends in changes nothing and never raises."""
        job = self.jobs.get(job_id)
        if job is None or not job.state.active:
            return job
        if state not in AGENT_END_STATES:
            log.warning("job %d: end report with invalid state %r refused", job_id, state)
            return job
        self.cluster.release(job, end_time)
        for s in job.steps:
            if s.step_id == "batch" and s.end_time is None:
                s.end_time = end_time
                s.exit_code, s.signal = exit_code, signal
                s.state = "CANCELLED" if (job.kill_reason or state == "TIMEOUT") and signal else state
                if state in ("COMPLETED", "FAILED", "OUT_OF_MEMORY"):
                    s.state = state
        reason = job.kill_reason
        job.kill_reason = None
        if reason in ("REQUEUE", "REQUEUE_HOLD", "REQUEUE_UHOLD") or (
                reason == "NODE_FAIL" and job.requeue):
            self.requeue_job(job, end_time, hold=reason in ("REQUEUE_HOLD", "REQUEUE_UHOLD"),
                             held="user" if reason == "REQUEUE_UHOLD" else "admin")
            self.mark(job)
            self.request_schedule()
            return job
        job.end_time = end_time
        if reason in ("CANCELLED", "NODE_FAIL", "PREEMPTED"):
            final = reason
            job.exit_code, job.term_signal = 0, 0
        else:
            # a step says REQUEUED only when the controller asked for a requeue (handled
            # above); a job cannot requeue itself by writing it
            final = "FAILED" if state == "REQUEUED" else state
            job.exit_code, job.term_signal = exit_code, signal
            if final == "TIMEOUT":
                job.exit_code, job.term_signal = 0, 0
        job.reason = end_reason(final, job.exit_code, job.term_signal, note)
        job.dependency_text = None
        self._count_end(final)
        self.mark(job)
        self.set_state(job, JobState(final), end_time)
        self.request_schedule()
        return job

    def _count_end(self, state: str) -> None:
        key = {"COMPLETED": "completed", "CANCELLED": "cancelled", "TIMEOUT": "timeout"}.get(state, "failed")
        self.stats[key] += 1

    def end_allocation(self, job: Job, state: str, exit_code: int = 0, signal: int = 0) -> None:
        """A job without a batch script (salloc, srun) ends: released, cancelled, timed out."""
        if not job.state.active:
            return
        now = self.clock()
        self.cluster.release(job, now)
        job.kill_reason = None
        job.end_time = now
        job.exit_code, job.term_signal = exit_code, signal
        job.reason = end_reason(state, exit_code, signal)
        self._count_end(state)
        self.mark(job)
        self.set_state(job, JobState(state), now)
        self.request_schedule()

    def check_time_limits(self, now: float) -> None:
        """Allocations have no step supervisor to enforce their limit: the controller does."""
        for job in list(self.running.values()):
            if job.batch or job.time_limit <= 0 or job.start_time is None:
                continue
            if job.state == JobState.RUNNING and now >= job.start_time + job.time_limit + job.suspended_secs:
                log.info("allocation %d reached its time limit", job.job_id)
                self.end_allocation(job, "TIMEOUT")

    def requeue_job(self, job: Job, now: float, hold: bool, held: str | None = "admin") -> None:
        """Back to PENDING (its resources, if any, are released by the caller); `hold`
        holds it, as `held` ("admin", or "user": an owner's requeuehold)."""
        job.restart_count += 1
        job.start_time = None
        job.end_time = None
        job.alloc = []
        job.nodes = []
        job.batch_host = None
        job.exit_code = job.term_signal = 0
        job.eligible_time = None  # it ages again from when it may start again
        # Slurm waits before a requeued job may start again; keep a short delay
        job.begin_time = now + 1
        job.reason = Reason.BEGIN_TIME
        if hold:
            job.held = "user" if held == "user" else "admin"
            job.reason = Reason.HELD_USER if job.held == "user" else Reason.HELD_ADMIN
            job.priority = 0
        self.set_state(job, JobState.PENDING, now)

    def finish_pending(self, job: Job, state: JobState, now: float, by: int | None = None) -> None:
        if job.state != JobState.PENDING:
            return
        job.end_time = now
        job.reason = Reason.NONE
        if by is not None:
            job.cancelled_by = by
        if state == JobState.CANCELLED:
            self.stats["cancelled"] += 1
        self.pending_reasons.pop(job.job_id, None)
        self.mark(job)
        self.set_state(job, state, now)

    def expire_finished(self, now: float) -> None:
        """Forget finished jobs older than MinJobAge (they stay in the store for sacct).

        The final state of one that a pending job's dependency still names is kept in
        `gone`, so the scheduler never has to read it back from the store."""
        cutoff = now - self.min_job_age
        old = [j for j in self.jobs.values()
               if j.state in FINISHED_STATES and (j.end_time or 0) < cutoff]
        if not old:
            return
        named: set[int] = set()
        for p in self.pending.values():
            if p.dependency:
                try:
                    named.update(sched_deps.parse_cached(p.dependency).job_ids())
                except sched_deps.DependencyError:
                    pass
        for j in old:
            if j.job_id in named or (j.array_job_id is not None and j.array_job_id in named):
                self.gone.add(sched_deps.GoneRecord.of(j))
            self.table.forget(j.job_id)
            if j.submit_id and self.submit_ids.get((j.uid, j.submit_id)) == j.job_id:
                del self.submit_ids[(j.uid, j.submit_id)]
        if len(self.gone) > 2 * len(named) + 1024:  # drop what no dependency names any more
            keep = sched_deps.GoneJobs()
            for rec in self.gone.by_id.values():
                if rec.job_id in named or rec.array_job_id in named:
                    keep.add(rec)
            self.gone = keep
