"""A cluster as backfill sees it (node views, running and pending jobs), moved along by hand
between passes in the randomized tests of sched/backfill.py (test_sched_kept.py,
test_sched_starts_only.py): jobs a pass started take their nodes, ended jobs give them back."""

from __future__ import annotations

from corral.model.job import NodeAlloc
from corral.sched import backfill
from corral.sched.snapshot import INFINITE_TIME, NodeView, PendingView, RunningView


def take(v: NodeView, a: NodeAlloc) -> None:
    v.free_cpus -= a.cpus
    v.free_mem -= a.mem_mb
    v.free_gpus = [g for g in v.free_gpus if g not in a.gpus]
    v.job_count += 1


def give(v: NodeView, a: NodeAlloc) -> None:
    v.free_cpus += a.cpus
    v.free_mem += a.mem_mb
    v.free_gpus = sorted(v.free_gpus + list(a.gpus))
    v.job_count -= 1


def end_jobs(views: dict[str, NodeView], running: list[RunningView],
             ended: list[RunningView]) -> None:
    """The `ended` jobs leave `running` and give their nodes back."""
    for r in ended:
        running.remove(r)
        for a in r.alloc:
            give(views[a.node], a)


def start_jobs(views: dict[str, NodeView], pending: list[PendingView],
               running: list[RunningView], placed: backfill.Placement, now: float) -> None:
    """The jobs `placed` started leave `pending`, run, and take their nodes."""
    started = dict(placed.starts)
    for job in [j for j in pending if j.job_id in started]:
        pending.remove(job)
        end = INFINITE_TIME if job.time_limit < 0 else now + job.time_limit
        running.append(RunningView(job.job_id, end, started[job.job_id]))
        for a in started[job.job_id]:
            take(views[a.node], a)
