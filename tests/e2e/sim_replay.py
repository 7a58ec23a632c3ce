"""Shared by the simulator-agreement tests: replay a small trace on a live cluster through
sbatch, replay it in `corral sim` with the same slurm.conf, and compare the starts."""

from __future__ import annotations

import csv
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.e2e.cluster import Cluster


@dataclass(frozen=True)
class TraceJob:
    at: float  # submit offset, seconds
    run: float  # the work's length, seconds
    gpus: int
    partition: str | None = None  # None: the default partition


@dataclass(frozen=True)
class LiveRun:
    submitted: list[float]  # submit offsets the cluster saw (from the first submission)
    starts: list[float]  # each job's last start (a requeued job's rerun)
    runs: list[float]  # how long each last run's work really took
    ids: list[int]


def replay_live(c: Cluster, trace: Sequence[TraceJob], time_limit: str) -> LiveRun:
    """Submit the trace at its times; each run of a job overwrites when it started and when
    its work ended.  The real run times are returned because a loaded machine stretches the
    sleeps: the simulation is given them, so a late end is not counted as a scheduling
    difference."""
    stamps = c.workdir / "stamps"
    stamps.mkdir()
    submitted: list[float] = []
    ids: list[int] = []
    t0 = time.time()
    for i, job in enumerate(trace):
        delay = t0 + job.at - time.time()
        if delay > 0:
            time.sleep(delay)
        submitted.append(time.time() - t0)
        part = ["-p", job.partition] if job.partition else []
        ids.append(c.sbatch("-N1", "-n1", "-c1", f"--gpus-per-node={job.gpus}", *part,
                            "-t", time_limit, "-o", "/dev/null",
                            f"--wrap=date +%s.%N > {stamps}/{i}; sleep {job.run}; "
                            f"date +%s.%N > {stamps}/{i}.end"))
    for jid in ids:
        c.wait_state(jid, "COMPLETED", timeout=240)
    starts = [float((stamps / str(i)).read_text()) - t0 for i in range(len(trace))]
    runs = [float((stamps / f"{i}.end").read_text()) - t0 - starts[i]
            for i in range(len(trace))]
    return LiveRun(submitted, starts, runs, ids)


def replay_sim(c: Cluster, tmp: Path, config: str, trace: Sequence[TraceJob], live: LiveRun,
               limit_s: int) -> list[float]:
    """Each job's last start in `corral sim`, given the submit and run times the cluster
    saw."""
    path = tmp / "trace.csv"
    with_partition = any(job.partition for job in trace)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["submit", "run_time", "time_limit", "gpus", "cpus"]
                   + (["partition"] if with_partition else []))
        for at, run, job in zip(live.submitted, live.runs, trace, strict=True):
            w.writerow([f"{at:.3f}", f"{run:.3f}", limit_s, job.gpus, 1]
                       + ([job.partition] if with_partition else []))
    conf = tmp / "slurm.conf"
    conf.write_text(config)
    out = tmp / "jobs.csv"
    c.ok("corral", "sim", str(path), "--config", str(conf), "--jobs-out", str(out), timeout=120)
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert [r["state"] for r in rows] == ["COMPLETED"] * len(trace)
    return [float(r["start"]) for r in rows]


def assert_same_starts(sim: list[float], live: list[float], latency_s: float,
                       order_gap_s: float) -> None:
    """Every start within `latency_s` of the simulated one, and jobs the simulation started
    more than `order_gap_s` apart started in the same order live."""
    far = [(i, round(s, 2), round(x, 2)) for i, (s, x) in enumerate(zip(sim, live, strict=True))
           if abs(s - x) > latency_s]
    assert not far, f"(job, simulated start, live start) further apart than {latency_s} s: {far}"
    swapped = [(a, b) for a in range(len(sim)) for b in range(len(sim))
               if sim[a] + order_gap_s < sim[b] and live[a] > live[b]]
    assert not swapped, f"started in another order live: {swapped}"
