"""Driving the scheduler: build the snapshot, run the pipeline, apply its decision.

No policy lives here: what starts where, in which order, and why the others wait is
decided by `sched.pipeline.run_pass`; this module only turns the controller's state into
a `ClusterSnapshot` and the `Decision` back into state changes."""

from __future__ import annotations

import asyncio
import logging
import time

from corral.controller.launch import Launching
from corral.model.job import Job
from corral.model.node import Node
from corral.sched.pipeline import ClusterSnapshot, Decision, run_pass
from corral.sched.priority import pass_priorities
from corral.sched.snapshot import INFINITE_TIME, NodeView, RunningView

log = logging.getLogger("corral.controller")


def node_view(n: Node) -> NodeView:
    return NodeView(n.name, n.cpus, n.real_memory, n.gpus, n.free_cpus, n.free_mem_mb,
                    n.free_gpu_ids, n.usable, n.weight, tuple(n.partitions),
                    tuple(n.features), n.job_count, n.exclusive_job is not None,
                    n.gpu_type)


def running_view(j: Job, now: float) -> RunningView:
    end = (j.start_time or now) + j.time_limit if j.time_limit > 0 else INFINITE_TIME
    return RunningView(j.job_id, end, j.alloc, j.exclusive, j.array_job_id)


class Scheduling(Launching):
    _sched_handle: asyncio.Handle | None = None
    _sched_running = False
    _sched_again = False
    last_sched_duration = 0.0
    sched_passes = 0

    def request_schedule(self, delay: float = 0.0) -> None:
        """Run a scheduling pass soon; requests made meanwhile coalesce into one."""
        if self._sched_running:
            self._sched_again = True
            return
        if self._sched_handle is not None:
            return
        loop = asyncio.get_running_loop()
        if delay:
            self._sched_handle = loop.call_later(delay, self._run_schedule)
        else:
            self._sched_handle = loop.call_soon(self._run_schedule)

    def _run_schedule(self) -> None:
        self._sched_handle = None
        self._sched_running = True
        t0 = time.perf_counter()
        try:
            self.schedule_pass(self.clock())
        except Exception:
            log.exception("scheduling pass failed")
        finally:
            self._sched_running = False
            self.last_sched_duration = time.perf_counter() - t0
            self.sched_passes += 1
        if self._sched_again:
            self._sched_again = False
            # Under load, passes coalesce: scheduling takes at most about a third of the
            # loop, so submissions keep flowing while the queue is long.
            self.request_schedule(max(0.002, min(1.0, 2 * self.last_sched_duration)))

    def snapshot(self, now: float) -> ClusterSnapshot:
        return ClusterSnapshot(
            now=now,
            nodes={n.name: node_view(n) for n in self.nodes.values()},
            partitions=self.partitions,
            running=[running_view(j, now) for j in self.running.values()],
            pending=list(self.pending.values()),
            jobs=list(self.jobs.values()),
            gone=self.gone,
            params=self.sched_params,
        )

    def schedule_pass(self, now: float) -> Decision | None:
        if not self.pending:
            return None
        decision = run_pass(self.snapshot(now))
        self.apply(decision, now)
        return decision

    def apply(self, decision: Decision, now: float) -> None:
        pending = self.pending
        # Priority and reasons are derived each pass: kept in memory, not written out.
        for job_id, prio in decision.priorities.items():
            job = pending.get(job_id)
            if job is not None:
                job.priority = prio
                if not job.held:
                    job.last_sched_eval = now
        for job_id in decision.became_eligible:
            job = pending.get(job_id)
            if job is not None and job.eligible_time is None:
                job.eligible_time = now  # written once: a restart must not reset its age
                self.mark(job)
        more = False
        for start in decision.starts:
            found = pending.get(start.job_id)
            if found is None:
                continue
            job = found
            if start.array_task_id is not None:
                if not job.array_tasks or start.array_task_id not in job.array_tasks:
                    continue
                job = self.split_array_task(found, now, start.array_task_id)
                more = more or bool(found.array_tasks)
            self.start_job(job, start.alloc, now)
        for job_id, why in decision.reasons.items():
            waiting = pending.get(job_id)
            if waiting is not None:
                waiting.reason = why.text()
                self.pending_reasons[job_id] = why
        for job_id, text in decision.dependency_texts.items():
            waiting = pending.get(job_id)
            if waiting is not None:
                waiting.dependency_text = text
        for job_id, (start_at, names) in decision.planned.items():
            waiting = pending.get(job_id)
            if waiting is not None:
                waiting.sched_start = start_at
                waiting.sched_nodes = list(names)
        if more:  # array records with tasks left get another pass
            self.request_schedule()

    def priority_now(self, job: Job) -> int:
        """The job's priority as the next pass will compute it (for a new or changed job)."""
        return pass_priorities([job], self.clock(), self.sched_params.priority,
                               self.partitions)[job.job_id]
