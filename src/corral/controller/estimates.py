"""How right the start estimates are: each job's first estimated start against its actual start.

The scheduling pass plans when each blocked job should start (backfill's `Decision.planned`,
what `squeue --start` shows).  `StartEstimates` keeps the first such estimate of every
pending job and, when the job starts, the error: actual start minus first estimate (positive:
it started later than first said).  The metrics (controller.metrics) export the median and
p90 of the absolute errors over the last `WINDOW` starts, and their count and sum since the
controller started.

Pure: fed the pass's `planned` dicts and the job table's typed events, no clock and no I/O.
A job that starts in the pass that first sees it was never estimated and is not counted.  A
job requeued or ended while pending loses its estimate; a requeued job is estimated anew.
An array's tasks are planned under the array's id: the first task to start takes that
estimate, and the next task's is the first one made after it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from corral.controller.jobs import JobEvent, JobEventKind

WINDOW = 10_000  # the starts the quantiles are taken over (the most recent)


def quantile(sorted_values: list[float], q: float) -> float:
    """The q-quantile of sorted values, linearly interpolated (NaN for none)."""
    if not sorted_values:
        return float("nan")
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


class StartEstimates:
    def __init__(self, window: int = WINDOW) -> None:
        self.first: dict[int, float] = {}  # pending job (or array) id -> first estimated start
        self.errors: deque[float] = deque(maxlen=window)  # signed, seconds, latest last
        self.count = 0  # starts measured since the controller started
        self.abs_sum = 0.0

    def planned(self, planned: Mapping[int, tuple[float, Any]]) -> None:
        """A pass's plan: {job id: (estimated start, nodes)}; only the first estimate stays."""
        first = self.first
        for job_id, (start, _nodes) in planned.items():
            if job_id not in first and start == start and start != float("inf"):
                first[job_id] = float(start)

    def started(self, job_id: int, array_id: int | None, start_time: float) -> float | None:
        """A job started at `start_time`: its error (None when it had no estimate)."""
        est = self.first.pop(job_id, None)
        if est is None and array_id is not None:
            est = self.first.pop(array_id, None)
        if est is None:
            return None
        err = start_time - est
        self.errors.append(err)
        self.count += 1
        self.abs_sum += abs(err)
        return err

    def forget(self, job_id: int) -> None:
        self.first.pop(job_id, None)

    def on_job(self, ev: JobEvent) -> None:
        """The job table's typed events (controller.jobs)."""
        job = ev.job
        if ev.kind is JobEventKind.STARTED:
            if job.start_time is not None:
                self.started(job.job_id, job.array_job_id, job.start_time)
            else:
                self.forget(job.job_id)
        elif ev.kind in (JobEventKind.ENDED, JobEventKind.REQUEUED, JobEventKind.UNSTARTED):
            self.forget(job.job_id)  # ended while pending; requeued: estimated anew

    def quantiles(self, qs: Iterable[float] = (0.5, 0.9)) -> dict[float, float]:
        """Quantiles of the absolute errors over the window (NaN while there are none)."""
        values = sorted(abs(e) for e in self.errors)
        return {q: quantile(values, q) for q in qs}

    def bias(self) -> float:
        """Median of the signed errors over the window: > 0 when jobs start later than
        estimated (NaN while there are none)."""
        return quantile(sorted(self.errors), 0.5)
