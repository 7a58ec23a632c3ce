"""What a simulation's run is judged by: utilisation, waits, bounded slowdown, makespan, and
GPU-seconds left idle while jobs were waiting."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from corral.sim.engine import SimResult

TAU = 10.0  # seconds: the bounded slowdown's floor on run time


@dataclass(frozen=True, slots=True)
class Summary:
    jobs: int
    started: int
    refused: int
    never_started: int
    timed_out: int
    utilisation: float  # of GPUs (CPUs on a cluster without GPUs), over the makespan
    resource: str  # "GPU" or "CPU"
    mean_wait: float
    median_wait: float
    p95_wait: float
    mean_bounded_slowdown: float
    makespan: float
    idle_gpu_seconds_while_pending: float
    passes: int
    wall_seconds: float
    # GPU-seconds (CPU-seconds without GPUs) of runs that preemption threw away: a requeued
    # victim's earlier runs, a cancelled victim's run
    lost_to_preemption: float = 0.0

    @property
    def jobs_per_second(self) -> float:
        return self.jobs / self.wall_seconds if self.wall_seconds > 0 else float("inf")


def percentile(sorted_values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks."""
    if not sorted_values:
        return 0.0
    pos = (len(sorted_values) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarise(result: SimResult) -> Summary:
    recs = result.records
    ran = [r for r in recs if r.start is not None]
    waits = sorted(r.start - r.submit for r in ran if r.start is not None)
    gpus = result.total_gpus > 0
    total = result.total_gpus if gpus else result.total_cpus
    first = min((r.submit for r in recs), default=0.0)
    last = max((r.end for r in recs if r.end is not None), default=first)
    makespan = max(0.0, last - first)
    busy = lost = 0.0
    slowdowns: list[float] = []
    # (time, change of busy GPUs, change of waiting jobs): idle GPUs count while jobs wait
    changes: list[tuple[float, int, int]] = []
    for r in recs:
        if r.job_id is None:
            continue
        size = r.gpus if gpus else r.cpus
        changes.append((r.submit, 0, 1))
        # the resources it held: every run (a preempted one's too), less its suspensions
        for a, b in r.holding(last):
            busy += size * (b - a)
            changes.append((a, size, 0))
            changes.append((b, -size, 0))
        for a, b in r.stopped:  # not waiting while it ran before a requeue
            changes.append((a, 0, -1))
            changes.append((b, 0, 1))
            lost += size * (b - a)
        if r.state == "PREEMPTED" and r.start is not None and r.end is not None:
            lost += size * (r.end - r.start)
        if r.start is None:
            continue
        end = r.end if r.end is not None else last
        run = end - r.start
        slowdowns.append(max(1.0, (r.start - r.submit + run) / max(run, TAU)))
        changes.append((r.start, 0, -1))
    changes.sort()
    idle_while_pending = 0.0
    used = waiting = 0
    prev = first
    for t, d_used, d_waiting in changes:
        if waiting > 0 and gpus:
            idle_while_pending += (result.total_gpus - used) * (t - prev)
        used += d_used
        waiting += d_waiting
        prev = t
    return Summary(
        jobs=len(recs), started=len(ran),
        refused=sum(1 for r in recs if r.job_id is None),
        never_started=sum(1 for r in recs if r.job_id is not None and r.start is None),
        timed_out=sum(1 for r in recs if r.state == "TIMEOUT"),
        utilisation=busy / (total * makespan) if total and makespan else 0.0,
        resource="GPU" if gpus else "CPU",
        mean_wait=statistics.fmean(waits) if waits else 0.0,
        median_wait=statistics.median(waits) if waits else 0.0,
        p95_wait=percentile(waits, 95),
        mean_bounded_slowdown=statistics.fmean(slowdowns) if slowdowns else 0.0,
        makespan=makespan, idle_gpu_seconds_while_pending=idle_while_pending,
        passes=result.passes, wall_seconds=result.wall_seconds, lost_to_preemption=lost)


def render(s: Summary) -> str:
    lines = [
        f"jobs                      {s.jobs} ({s.started} started, {s.timed_out} timed out, "
        f"{s.never_started} never started, {s.refused} refused)",
        f"{s.resource} utilisation           {s.utilisation * 100:.1f} %",
        f"wait mean/median/p95      {s.mean_wait:.1f} / {s.median_wait:.1f} / {s.p95_wait:.1f} s",
        f"mean bounded slowdown     {s.mean_bounded_slowdown:.2f} (tau {TAU:.0f} s)",
        f"makespan                  {s.makespan:.0f} s",
        f"idle GPU-s while pending  {s.idle_gpu_seconds_while_pending:.0f}",
        *([f"{s.resource + '-s lost to preemption':26}{s.lost_to_preemption:.0f}"]
          if s.lost_to_preemption else []),
        f"scheduling passes         {s.passes}",
        f"wall time                 {s.wall_seconds:.2f} s ({s.jobs_per_second:.0f} jobs/s)",
    ]
    return "\n".join(lines) + "\n"
