"""Run-time predictions from each user's recent jobs, for planning backfill (EASY++:
Tsafrir, Etsion and Feitelson, "Backfilling using system-generated predictions rather than
user runtime estimates", IEEE TPDS 2007).

A user's next job is predicted to run as long as the mean of their last `depth` jobs'
run times, never longer than its own time limit.  Predictions only move the plan: a job is
never stopped before its real limit, and a running job that outlives its prediction is
expected to run to its limit from then on.  Pure: the core feeds the history with the run
times of ended jobs and reads predictions when it builds a pass's snapshot.

Setting: `SchedulerParameters=corral_predict_runtime=N` (N recent jobs per user; 0 or
absent: time limits, as Slurm).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from .snapshot import INFINITE_TIME

SETTING = "corral_predict_runtime"
# how a job ended decides whether its run time says how long the user's jobs run: a job
# cancelled, preempted or lost with its node was stopped, it did not finish
_FINISHED_ON_ITS_OWN = frozenset({"COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY"})


def parse_depth(scheduler_parameters: str) -> int:
    """`corral_predict_runtime=N` of SchedulerParameters (0 when absent or not a count)."""
    for item in scheduler_parameters.split(","):
        key, _, value = item.strip().partition("=")
        if key == SETTING:
            value = value.strip()
            return int(value) if value.isdigit() else 0
    return 0


def counts(state: str) -> bool:
    """Whether a job that ended in `state` tells how long its user's jobs run."""
    return state in _FINISHED_ON_ITS_OWN


class RuntimeHistory:
    """The run times of each user's last `depth` jobs that finished on their own."""

    __slots__ = ("depth", "recent")

    def __init__(self, depth: int = 2) -> None:
        self.depth = max(0, depth)
        self.recent: dict[str, deque[float]] = {}

    def record(self, user: str, run_seconds: float) -> None:
        if self.depth <= 0 or run_seconds < 0:
            return
        runs = self.recent.get(user)
        if runs is None:
            runs = self.recent[user] = deque(maxlen=self.depth)
        runs.append(run_seconds)

    def resize(self, depth: int) -> None:
        """A new depth (a reconfigure): the most recent run times are kept."""
        depth = max(0, depth)
        if depth == self.depth:
            return
        self.depth = depth
        self.recent = {u: deque(list(r)[-depth:], maxlen=depth)
                       for u, r in self.recent.items() if depth > 0}

    def mean(self, user: str) -> float | None:
        """The mean run time of the user's recent jobs, or None without any."""
        runs = self.recent.get(user)
        if not runs:
            return None
        return sum(runs) / len(runs)

    def means(self, users: Iterable[str]) -> dict[str, float]:
        """`mean` of each of `users` that has a history."""
        out: dict[str, float] = {}
        for u in users:
            if u not in out:
                m = self.mean(u)
                if m is not None:
                    out[u] = m
        return out


def predicted_run(limit: float, mean: float | None) -> float:
    """A job's predicted run time: its user's recent mean, capped by its limit (seconds,
    <= 0 or INFINITE_TIME: no limit).  A job without a limit or a user without history
    is predicted to run to its limit."""
    if limit <= 0 or limit == INFINITE_TIME:
        return INFINITE_TIME
    if mean is None:
        return limit
    return min(limit, mean)


def expected_end(start: float, limit: float, mean: float | None, now: float) -> float:
    """When a running job is expected to end: start + its predicted run time while that is
    still ahead; once the job has outlived its prediction, start + its limit (it is never
    stopped before)."""
    if limit <= 0 or limit == INFINITE_TIME:
        return INFINITE_TIME
    end = start + predicted_run(limit, mean)
    return end if end > now else start + limit
