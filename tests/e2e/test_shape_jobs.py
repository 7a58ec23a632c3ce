"""End-to-end: job shape details (issue 9) through the real commands — --tmp (TmpDisk),
--mincpus as CPUs allocated on every node, a --gpus total without -N spread over as many
4-GPU nodes as it needs, and what squeue/scontrol show of them."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.e2e.cluster import Cluster, running

pytestmark = pytest.mark.slow

CONFIG = """\
ClusterName=shape
KillWait=2
MinJobAge=600
SchedulerInterval=1
NodeName=node-[1-2] CPUs=16 RealMemory=64000 Gres=gpu:4 TmpDisk=1000
NodeName=node-[3-4] CPUs=16 RealMemory=64000 Gres=gpu:4 TmpDisk=200000
PartitionName=debug Nodes=node-[1-4] Default=YES MaxTime=INFINITE State=UP
PartitionName=gpumem Nodes=node-[1-4] DefMemPerGPU=12000 MaxTime=INFINITE State=UP
"""

REFUSED = ("sbatch: error: Batch job submission failed: "
           "Requested node configuration is not available\n")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory, CONFIG, name="shape") as c:
        yield c


def _squeue(c: Cluster, job: int, fmt: str) -> str:
    return c.ok("squeue", "-h", "-j", str(job), "-o", fmt).strip()


def _wait_output(c: Cluster, job: int) -> str:
    c.wait_state(job, "COMPLETED", timeout=60)
    return (c.workdir / f"slurm-{job}.out").read_text()


def test_tmp_picks_nodes_with_that_much_tmp_disk(cluster: Cluster) -> None:
    c = cluster
    j = c.sbatch("--tmp=2G", "--wrap", "sleep 60")
    c.wait_state(j, "RUNNING")
    assert _squeue(c, j, "%N") in ("node-3", "node-4")
    assert _squeue(c, j, "%d") == "2G"
    assert c.ok("squeue", "-h", "-j", str(j), "-O", "MinTmpDisk").strip() == "2G"
    assert "MinTmpDiskNode=2G\n" in c.ok("scontrol", "show", "job", str(j))
    # srun and salloc too: two nodes with 150000 MB are node-3 and node-4
    assert c.ok("srun", "--tmp=150000", "-N2", "bash", "-c", "echo $SLURMD_NODENAME",
                timeout=60).split() in (["node-3", "node-4"], ["node-4", "node-3"])
    assert c.ok("salloc", "--tmp=1500", "-N1", "srun", "bash", "-c", "echo $SLURMD_NODENAME",
                timeout=60).strip() in ("node-3", "node-4")
    # a job without --tmp still shows 0
    k = c.sbatch("-H", "--wrap", "true")
    assert _squeue(c, k, "%d") == "0"
    assert "MinTmpDiskNode=0\n" in c.ok("scontrol", "show", "job", str(k))
    c.ok("scancel", str(j), str(k))


def test_tmp_more_than_any_node_has_is_refused(cluster: Cluster) -> None:
    c = cluster
    r = c.run("sbatch", "--tmp=200001", "--wrap", "true")
    assert (r.returncode, r.stderr) == (1, REFUSED)
    r = c.run("sbatch", "-N3", "--tmp=2000", "--wrap", "true")  # two nodes have it
    assert (r.returncode, r.stderr) == (1, REFUSED)
    r = c.run("srun", "--tmp=1T", "true")
    assert r.returncode == 1
    assert r.stderr == ("srun: error: Unable to allocate resources: Requested node "
                        "configuration is not available\n")
    # a bad size: Slurm's message and exit code, as for --mem
    for cmd in ("sbatch", "salloc", "srun"):
        r = c.run(cmd, "--tmp=1.5G", "--wrap" if cmd == "sbatch" else "true", "true")
        assert (r.returncode, r.stderr) == (255, f"{cmd}: error: Invalid --tmp specification\n")


def test_scontrol_show_node_tmp_disk(cluster: Cluster) -> None:
    assert " TmpDisk=200000 " in cluster.ok("scontrol", "show", "node", "node-3")
    assert " TmpDisk=1000 " in cluster.ok("scontrol", "show", "node", "node-1")


def test_mincpus_is_allocated(cluster: Cluster) -> None:
    c = cluster
    j = c.sbatch("-H", "-n1", "--mincpus=6", "--wrap",
                 "echo $SLURM_CPUS_ON_NODE $SLURM_JOB_CPUS_PER_NODE $SLURM_NTASKS")
    assert _squeue(c, j, "%c") == "6"
    assert "MinCPUsNode=6 " in c.ok("scontrol", "show", "job", str(j))
    c.ok("scontrol", "release", str(j))
    assert _wait_output(c, j) == "6 6 1\n"
    assert "NumCPUs=6 NumTasks=1 " in c.ok("scontrol", "show", "job", str(j))
    # two nodes: each gets --mincpus CPUs
    out = c.ok("srun", "-N2", "-n2", "--mincpus=5", "-l", "bash", "-c",
               "echo $SLURM_CPUS_ON_NODE", timeout=60)
    assert sorted(out.splitlines()) == ["0: 5", "1: 5"]
    # -c and --ntasks-per-node: Slurm's pn_min_cpus
    k = c.sbatch("-H", "--ntasks-per-node=3", "-c2", "--wrap", "true")
    assert _squeue(c, k, "%c") == "6"
    assert "MinCPUsNode=6 " in c.ok("scontrol", "show", "job", str(k))
    c.ok("scancel", str(k))


def test_gpus_total_without_nodes_spreads_over_nodes(cluster: Cluster) -> None:
    c = cluster
    script = ("echo $SLURM_JOB_NUM_NODES $SLURM_JOB_GPUS $CUDA_VISIBLE_DEVICES "
              "$SLURM_GPUS_ON_NODE\n")
    j = c.sbatch("--gpus=8", "--wrap", script)
    out = _wait_output(c, j)
    assert out == "2 0,1,2,3 0,1,2,3 4\n"
    detail = c.ok("scontrol", "show", "-d", "job", str(j))
    assert "NumNodes=2 " in detail
    # both nodes hold 4 GPUs (one detail line for nodes alike, as Slurm prints them)
    hosts = re.findall(r"\n\s+Nodes=(\S+) CPU_IDs=\S+ Mem=\d+ GRES=gpu:4\(IDX:0-3\)\n", detail)
    assert len(c.ok("scontrol", "show", "hostnames", ",".join(hosts)).split()) == 2, detail
    assert "TRES=cpu=2,mem=0,node=2,billing=2,gres/gpu=8\n" in detail
    # 16 GPUs: the whole cluster; 17: none can hold it
    r = c.run("sbatch", "--gpus=17", "--wrap", "true")
    assert (r.returncode, r.stderr) == (1, REFUSED)
    # with -N1 the node count is fixed: 8 GPUs never fit one node
    r = c.run("sbatch", "-N1", "--gpus=8", "--wrap", "true")
    assert (r.returncode, r.stderr) == (1, REFUSED)
    # srun outside a job: a step on both nodes, each task with its node's 4 GPUs
    out = c.ok("srun", "--gpus=8", "-l", "bash", "-c", "echo $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES",
               timeout=60)
    rows = sorted(out.splitlines())
    assert len(rows) == 2 and all(r.endswith(" 0,1,2,3") for r in rows), out


def test_pending_ntasks_job_shows_the_nodes_it_needs(cluster: Cluster) -> None:
    # squeue(1) %D: "the minimum number of nodes required by a pending job"; Slurm shows
    # the count its placement test found (node_cnt_wag): -n30 on 16-CPU nodes needs 2
    c = cluster
    busy = c.sbatch("-N4", "--exclusive", "-t", "5", "--wrap", "sleep 120")
    c.wait_state(busy, "RUNNING")
    try:
        j = c.sbatch("-n30", "-t", "5", "--wrap", "true")
        c.wait_for(lambda: _squeue(c, j, "%r") == "Resources", what="planned")
        c.wait_for(lambda: _squeue(c, j, "%D") == "2", what="2 nodes shown")
        assert "NumNodes=2 NumCPUs=30 NumTasks=30 " in c.ok("scontrol", "show", "job", str(j))
    finally:
        c.ok("scancel", str(busy))
    c.wait_state(j, "COMPLETED", timeout=60)
    assert c.ok("sacct", "-j", str(j), "-X", "-n", "-P", "-o", "NNodes").strip() == "2"


def test_gpus_total_job_runs_a_plain_srun_on_every_node(cluster: Cluster) -> None:
    # spread over 2 nodes without -n: one task per node, so srun's default step covers both
    c = cluster
    j = c.sbatch("--gpus=8", "--wrap",
                 "echo $SLURM_NTASKS; srun bash -c 'echo $SLURMD_NODENAME' | sort")
    out = _wait_output(c, j).split()
    assert out[0] == "2" and len(set(out[1:])) == 2, out


def test_gpus_total_with_def_mem_per_gpu_is_charged_per_node(cluster: Cluster) -> None:
    # DefMemPerGPU=12000 and 8 GPUs over 4-GPU nodes of 64000 MB: 48000 MB on each node,
    # not 96000 (which no node has)
    c = cluster
    j = c.sbatch("-p", "gpumem", "--gpus=8", "--wrap", "echo $SLURM_MEM_PER_NODE")
    assert _wait_output(c, j).strip() == "48000"


def test_held_ntasks_job_shows_the_nodes_its_tasks_need(cluster: Cluster) -> None:
    # held, the job is never planned: the submit test's count is what squeue shows
    c = cluster
    j = c.sbatch("-H", "-n30", "--wrap", "true")
    assert _squeue(c, j, "%D") == "2"
    assert "NumNodes=2 NumCPUs=30 NumTasks=30 " in c.ok("scontrol", "show", "job", str(j))
    k = c.sbatch("-H", "-n4", "--wrap", "true")  # fits one node: 1, as asked
    assert _squeue(c, k, "%D") == "1"
    c.ok("scancel", str(j), str(k))


def test_reconfigure_applies_a_new_tmp_disk(cluster: Cluster) -> None:
    c = cluster
    conf = c.home / "slurm.conf"
    old = conf.read_text()
    r = c.run("sbatch", "--tmp=150000", "-N4", "--wrap", "true")  # two nodes have 1000 MB
    assert (r.returncode, r.stderr) == (1, REFUSED)
    try:
        conf.write_text(old.replace("TmpDisk=1000", "TmpDisk=300000"))
        c.ok("scontrol", "reconfigure")
        assert " TmpDisk=300000 " in c.ok("scontrol", "show", "node", "node-1")
        j = c.sbatch("--tmp=150000", "-N4", "--wrap", "true")  # now every node has it
        c.wait_state(j, "COMPLETED", timeout=60)
    finally:
        conf.write_text(old)
        c.ok("scontrol", "reconfigure")
    assert " TmpDisk=1000 " in c.ok("scontrol", "show", "node", "node-1")
