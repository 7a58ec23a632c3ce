"""The simulator schedules as the live cluster does: a small trace (30 short jobs) is
replayed on a running cluster through sbatch, then in `corral sim` with the same slurm.conf
and the submit times the cluster saw; the jobs start in the same order, at the same times
within the cluster's scheduling latency (the simulation is given the submit times and run
times the cluster saw)."""

from __future__ import annotations

import csv
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, running

CONFIG = """\
ClusterName=simagree
KillWait=2
MinJobAge=600
SchedulerInterval=1
NodeName=node-1 CPUs=8 RealMemory=16000 Gres=gpu:8
PartitionName=gpu Nodes=node-1 Default=YES MaxTime=INFINITE State=UP
"""
# (submit offset s, run time s, GPUs): one node of 8 GPUs oversubscribed about twice, so
# most jobs wait and backfill decides (one node: no placement choice for small timing
# differences to flip); times avoid near-ties between submissions and ends
GPUS = (1, 2, 4, 1, 3, 2, 1, 4, 2, 1)
TRACE = [(round(0.9 * i, 1), 2.3 + 1.5 * (i * 7 % 4), GPUS[i % len(GPUS)]) for i in range(30)]
LIMIT_S = 60  # every job's time limit (sbatch -t 1): what backfill plans with
LATENCY_S = 3.0  # how far a live start may be from the simulated one (launch, reports, drift)
ORDER_GAP_S = 1.0  # starts closer than this in the simulation may come in either order live


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory, CONFIG, "simagree") as c:
        yield c


def replay_live(c: Cluster) -> tuple[list[float], list[float], list[float]]:
    """Submit the trace at its times; each job writes when it started and when its work
    ended.  Returns the submit and start offsets the cluster saw (seconds from the first
    submission) and how long each job's work really took (a loaded machine stretches the
    sleeps: the simulation is given the real run times, so a late end is not counted as a
    scheduling difference)."""
    stamps = c.workdir / "stamps"
    stamps.mkdir()
    submitted: list[float] = []
    ids: list[int] = []
    t0 = time.time()
    for i, (at, run, gpus) in enumerate(TRACE):
        delay = t0 + at - time.time()
        if delay > 0:
            time.sleep(delay)
        submitted.append(time.time() - t0)
        ids.append(c.sbatch("-N1", "-n1", "-c1", f"--gpus-per-node={gpus}", "-t", "1",
                            "-o", "/dev/null",
                            f"--wrap=date +%s.%N > {stamps}/{i}; sleep {run}; "
                            f"date +%s.%N > {stamps}/{i}.end"))
    for jid in ids:
        c.wait_state(jid, "COMPLETED", timeout=240)
    starts = [float((stamps / str(i)).read_text()) - t0 for i in range(len(TRACE))]
    runs = [float((stamps / f"{i}.end").read_text()) - t0 - starts[i] for i in range(len(TRACE))]
    return submitted, starts, runs


def replay_sim(c: Cluster, tmp: Path, submitted: list[float], runs: list[float]) -> list[float]:
    trace = tmp / "trace.csv"
    with open(trace, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["submit", "run_time", "time_limit", "gpus", "cpus"])
        for at, run, (_, _, gpus) in zip(submitted, runs, TRACE, strict=True):
            w.writerow([f"{at:.3f}", f"{run:.3f}", LIMIT_S, gpus, 1])
    conf = tmp / "slurm.conf"
    conf.write_text(CONFIG)
    out = tmp / "jobs.csv"
    c.ok("corral", "sim", str(trace), "--config", str(conf), "--jobs-out", str(out), timeout=120)
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert [r["state"] for r in rows] == ["COMPLETED"] * len(TRACE)
    return [float(r["start"]) for r in rows]


def test_the_simulator_starts_jobs_as_the_cluster_does(cluster: Cluster, tmp_path: Path) -> None:
    submitted, live, runs = replay_live(cluster)
    sim = replay_sim(cluster, tmp_path, submitted, runs)
    waited = sum(1 for s, at in zip(sim, submitted, strict=True) if s - at > 1)
    assert waited >= 10, "the trace must make jobs wait, or it tests nothing"
    far = [(i, round(s, 2), round(x, 2)) for i, (s, x) in enumerate(zip(sim, live, strict=True))
           if abs(s - x) > LATENCY_S]
    assert not far, f"(job, simulated start, live start) further apart than {LATENCY_S} s: {far}"
    swapped = [(a, b) for a in range(len(TRACE)) for b in range(len(TRACE))
               if sim[a] + ORDER_GAP_S < sim[b] and live[a] > live[b]]
    assert not swapped, f"started in another order live: {swapped}"
