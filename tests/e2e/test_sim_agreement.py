"""The simulator schedules as the live cluster does: a small trace (30 short jobs) is
replayed on a running cluster through sbatch, then in `corral sim` with the same slurm.conf
and the submit times the cluster saw; the jobs start in the same order, at the same times
within the cluster's scheduling latency (the simulation is given the submit times and run
times the cluster saw)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, running
from tests.e2e.sim_replay import TraceJob, assert_same_starts, replay_live, replay_sim

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
TRACE = [TraceJob(round(0.9 * i, 1), 2.3 + 1.5 * (i * 7 % 4), GPUS[i % len(GPUS)])
         for i in range(30)]
LIMIT_S = 60  # every job's time limit (sbatch -t 1): what backfill plans with
LATENCY_S = 3.0  # how far a live start may be from the simulated one (launch, reports, drift)
ORDER_GAP_S = 1.0  # starts closer than this in the simulation may come in either order live


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory, CONFIG, "simagree") as c:
        yield c


def test_the_simulator_starts_jobs_as_the_cluster_does(cluster: Cluster, tmp_path: Path) -> None:
    live = replay_live(cluster, TRACE, "1")
    sim = replay_sim(cluster, tmp_path, CONFIG, TRACE, live, LIMIT_S)
    waited = sum(1 for s, at in zip(sim, live.submitted, strict=True) if s - at > 1)
    assert waited >= 10, "the trace must make jobs wait, or it tests nothing"
    assert_same_starts(sim, live.starts, LATENCY_S, ORDER_GAP_S)
