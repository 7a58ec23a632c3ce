"""The simulator preempts as the live cluster does (issue 15): partition-priority preemption
with REQUEUE on one 8-GPU node.  Jobs of a low-tier partition fill the node; jobs of a
high-tier one arrive and requeue them.  The trace is replayed through sbatch, then in `corral
sim` with the same slurm.conf, the submit times the cluster saw and each job's last run time;
every job's last start (a requeued job's rerun) agrees within the cluster's latency, in the
same order.  (Which jobs the simulation requeued is not in `--jobs-out`; a different victim
would move its rerun's start by far more than the latency.)"""

from __future__ import annotations

import csv
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, running

CONFIG = """\
ClusterName=simpre
KillWait=2
MinJobAge=600
SchedulerInterval=1
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
NodeName=node-1 CPUs=8 RealMemory=16000 Gres=gpu:8
PartitionName=low Nodes=node-1 Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=high Nodes=node-1 MaxTime=INFINITE State=UP PriorityTier=10
"""
# (submit offset s, run time s, GPUs, partition): times avoid near-ties
TRACE = [(0.0, 16.3, 4, "low"), (0.6, 16.7, 4, "low"), (1.2, 9.1, 2, "low"),
         (3.4, 5.3, 4, "high"), (4.3, 7.9, 2, "low"), (9.8, 4.6, 8, "high"),
         (10.5, 3.3, 2, "low"), (11.2, 2.7, 1, "high")]
LIMIT_S = 120
LATENCY_S = 3.0
ORDER_GAP_S = 1.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory, CONFIG, "simpre") as c:
        yield c


def replay_live(c: Cluster) -> tuple[list[float], list[float], list[float], list[int]]:
    """Submit the trace at its times; each run of a job overwrites when it started and when
    its work ended.  Returns the submit offsets, each job's last start, its last run's
    length and how often it was requeued."""
    stamps = c.workdir / "stamps"
    stamps.mkdir()
    submitted: list[float] = []
    ids: list[int] = []
    t0 = time.time()
    for i, (at, run, gpus, part) in enumerate(TRACE):
        delay = t0 + at - time.time()
        if delay > 0:
            time.sleep(delay)
        submitted.append(time.time() - t0)
        ids.append(c.sbatch("-N1", "-n1", "-c1", f"--gpus-per-node={gpus}", "-p", part,
                            "-t", "2", "-o", "/dev/null",
                            f"--wrap=date +%s.%N > {stamps}/{i}; sleep {run}; "
                            f"date +%s.%N > {stamps}/{i}.end"))
    for jid in ids:
        c.wait_state(jid, "COMPLETED", timeout=240)
    starts = [float((stamps / str(i)).read_text()) - t0 for i in range(len(TRACE))]
    runs = [float((stamps / f"{i}.end").read_text()) - t0 - starts[i] for i in range(len(TRACE))]
    restarts = [int(c.ok("scontrol", "show", "job", str(j)).split("Restarts=")[1].split()[0])
                for j in ids]
    return submitted, starts, runs, restarts


def replay_sim(c: Cluster, tmp: Path, submitted: list[float], runs: list[float]) -> list[float]:
    """Each job's last start in `corral sim` (a requeued job's rerun)."""
    trace = tmp / "trace.csv"
    with open(trace, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["submit", "run_time", "time_limit", "gpus", "cpus", "partition"])
        for at, run, (_, _, gpus, part) in zip(submitted, runs, TRACE, strict=True):
            w.writerow([f"{at:.3f}", f"{run:.3f}", LIMIT_S, gpus, 1, part])
    conf = tmp / "slurm.conf"
    conf.write_text(CONFIG)
    out = tmp / "jobs.csv"
    c.ok("corral", "sim", str(trace), "--config", str(conf), "--jobs-out", str(out), timeout=120)
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert [r["state"] for r in rows] == ["COMPLETED"] * len(TRACE)
    return [float(r["start"]) for r in rows]


def test_the_simulator_preempts_as_the_cluster_does(cluster: Cluster, tmp_path: Path) -> None:
    submitted, live, runs, restarts = replay_live(cluster)
    assert sum(1 for r in restarts if r) >= 2, f"the trace must requeue jobs: {restarts}"
    assert all(r == 0 for r, (*_, part) in zip(restarts, TRACE, strict=True) if part == "high")
    sim = replay_sim(cluster, tmp_path, submitted, runs)
    far = [(i, round(s, 2), round(x, 2)) for i, (s, x) in enumerate(zip(sim, live, strict=True))
           if abs(s - x) > LATENCY_S]
    assert not far, f"(job, simulated start, live start) further apart than {LATENCY_S} s: {far}"
    swapped = [(a, b) for a in range(len(TRACE)) for b in range(len(TRACE))
               if sim[a] + ORDER_GAP_S < sim[b] and live[a] > live[b]]
    assert not swapped, f"started in another order live: {swapped}"
