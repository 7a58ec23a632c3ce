"""Partition policy through the real commands: a partition's QOS= limits its jobs (and
only its jobs) with Slurm's reason, MaxMemPerNode refuses with Slurm's message,
DefMemPerGPU/DefCpuPerGPU give a GPU job its memory and CPUs, and array tasks each count
in a submit limit."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow

SACCTMGR = ["sacctmgr"]  # the real command
CONFIG = """\
ClusterName=lab
KillWait=2
MinJobAge=600
SchedulerInterval=1
AccountingStorageEnforce=associations,limits
NodeName=node-[1-2] CPUs=8 RealMemory=8000 Gres=gpu:2
PartitionName=debug Nodes=node-[1-2] Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=node-[1-2] QOS=gpuq MaxMemPerNode=6000 DefMemPerGPU=1500 DefCpuPerGPU=3 State=UP
"""


@pytest.fixture(scope="module")
def c() -> Iterator[Cluster]:
    home = Path(tempfile.mkdtemp(prefix="corral-partpol-"))
    cl = Cluster(home / "c", CONFIG)
    cl.start()
    try:
        cl.ok(*SACCTMGR, "-i", "add", "qos", "gpuq", "MaxTRESPerUser=gres/gpu=1")
        cl.ok(*SACCTMGR, "-i", "add", "account", "lab")
        cl.ok(*SACCTMGR, "-i", "add", "user", "root", "account=lab")
        yield cl
    finally:
        cl.stop()
        shutil.rmtree(home, ignore_errors=True)


def test_partition_qos_limits_its_jobs(c: Cluster) -> None:
    a = c.sbatch("-p", "gpu", "--gpus=1", "-o", "/dev/null", "--wrap", "sleep 60")
    b = c.sbatch("-p", "gpu", "--gpus=1", "-o", "/dev/null", "--wrap", "sleep 60")
    d = c.sbatch("-p", "debug", "--gpus=1", "-o", "/dev/null", "--wrap", "sleep 60")
    try:
        c.wait_state(a, "RUNNING")
        c.wait_state(d, "RUNNING")  # the debug partition has no QoS
        assert c.ok("squeue", "-h", "-j", str(b), "-o", "%T %r").strip() == \
            "PENDING QOSMaxGRESPerUser"
        c.ok("scancel", str(a))
        c.wait_state(b, "RUNNING")
    finally:
        c.ok("scancel", str(a), str(b), str(d))


def test_partition_memory_limit_and_gpu_defaults(c: Cluster) -> None:
    r = c.run("sbatch", "-p", "gpu", "--mem=7000", "--wrap", "true")
    assert r.returncode == 1 and r.stderr == (
        "sbatch: error: Batch job submission failed: Memory required by task is not "
        "available\n"), r
    j = c.sbatch("-p", "gpu", "--gpus=1", "--hold", "--wrap", "true")
    try:
        out = c.ok("scontrol", "show", "job", str(j))
        assert "MinMemoryNode=1500M" in out and "NumCPUs=3 " in out, out
    finally:
        c.ok("scancel", str(j))


def test_array_tasks_count_in_max_submit_jobs(c: Cluster) -> None:
    c.ok(*SACCTMGR, "-i", "modify", "user", "where", "name=root", "set", "MaxSubmitJobs=3")
    try:
        r = c.run("sbatch", "--array=0-3", "--hold", "--wrap", "true")
        assert r.returncode == 1 and "Job violates accounting/QOS policy" in r.stderr, r
        j = c.sbatch("--array=0-2", "--hold", "-o", "/dev/null", "--wrap", "true")
        r = c.run("sbatch", "--hold", "--wrap", "true")
        assert r.returncode == 1 and "job submit limit" in r.stderr, r
        c.ok("scancel", str(j))
    finally:
        c.ok(*SACCTMGR, "-i", "modify", "user", "where", "name=root", "set",
             "MaxSubmitJobs=-1")
