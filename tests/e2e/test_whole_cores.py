"""Issue 18, item 6: `--hint=nomultithread` under SelectTypeParameters=CR_Core on nodes with
two threads per core allocates whole cores, as Slurm does (-c48 -> 96 CPUs, -c1 -> 2)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.cluster import Cluster, running

pytestmark = pytest.mark.slow

CONFIG = """\
ClusterName=smt
KillWait=2
MinJobAge=600
SchedulerInterval=1
SelectTypeParameters=CR_Core
NodeName=node-[1-2] CPUs=96 Sockets=2 CoresPerSocket=24 ThreadsPerCore=2 RealMemory=64000
PartitionName=debug Nodes=node-[1-2] Default=YES MaxTime=INFINITE State=UP
"""


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory, CONFIG) as cl:
        yield cl


def alloc_cpus(c: Cluster, jid: int) -> str:
    return c.ok("sacct", "-j", str(jid), "-X", "-n", "-o", "AllocCPUS").strip()


def test_nomultithread_counts_whole_cores(c: Cluster) -> None:
    big = c.sbatch("--hint=nomultithread", "-c48", "--wrap", "echo $SLURM_CPUS_PER_TASK; sleep 30")
    small = c.sbatch("--hint=nomultithread", "-c1", "--wrap", "sleep 30")
    for j in (big, small):
        c.wait_state(j, "RUNNING")
    assert (alloc_cpus(c, big), alloc_cpus(c, small)) == ("96", "2")
    assert "CPUs/Task=48" in c.ok("scontrol", "show", "job", str(big))  # as asked
    c.ok("scancel", str(big), str(small))
