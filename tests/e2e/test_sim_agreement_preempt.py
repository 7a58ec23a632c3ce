"""The simulator preempts as the live cluster does (issue 15): partition-priority preemption
with REQUEUE on one 8-GPU node.  Jobs of a low-tier partition fill the node; jobs of a
high-tier one arrive and requeue them.  The trace is replayed through sbatch, then in `corral
sim` with the same slurm.conf, the submit times the cluster saw and each job's last run time;
every job's last start (a requeued job's rerun) agrees within the cluster's latency, in the
same order.  (Which jobs the simulation requeued is not in `--jobs-out`; a different victim
would move its rerun's start by far more than the latency.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, running
from tests.e2e.sim_replay import TraceJob, assert_same_starts, replay_live, replay_sim

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
TRACE = [TraceJob(*job) for job in (
    (0.0, 16.3, 4, "low"), (0.6, 16.7, 4, "low"), (1.2, 9.1, 2, "low"), (3.4, 5.3, 4, "high"),
    (4.3, 7.9, 2, "low"), (9.8, 4.6, 8, "high"), (10.5, 3.3, 2, "low"), (11.2, 2.7, 1, "high"))]
LIMIT_S = 120
LATENCY_S = 3.0
ORDER_GAP_S = 1.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory, CONFIG, "simpre") as c:
        yield c


def test_the_simulator_preempts_as_the_cluster_does(cluster: Cluster, tmp_path: Path) -> None:
    live = replay_live(cluster, TRACE, "2")
    restarts = [int(cluster.ok("scontrol", "show", "job", str(j)).split("Restarts=")[1].split()[0])
                for j in live.ids]
    assert sum(1 for r in restarts if r) >= 2, f"the trace must requeue jobs: {restarts}"
    assert all(r == 0 for r, job in zip(restarts, TRACE, strict=True) if job.partition == "high")
    sim = replay_sim(cluster, tmp_path, CONFIG, TRACE, live, LIMIT_S)
    assert_same_starts(sim, live.starts, LATENCY_S, ORDER_GAP_S)
