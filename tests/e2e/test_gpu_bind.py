"""End-to-end: per-task GPU binding (--gpus-per-task, --gpu-bind) and the job's cgroup for
srun tasks, on the 4-node x 4-GPU test cluster (declared GPUs)."""

from __future__ import annotations

import os
import re
import time

import pytest

from corral.agent.cgroup import cluster_group_name
from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow

SHOW = "echo $SLURM_PROCID $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES $SLURM_STEP_GPUS"


def _rows(out: str) -> dict[int, list[str]]:
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        rows[int(parts[0])] = parts[1:]
    return rows


def test_gpus_per_task_gives_each_task_its_own_gpu(cluster: Cluster) -> None:
    r = cluster.run("srun", "-N2", "--ntasks-per-node=4", "--gpus-per-task=1",
                    "bash", "-c", SHOW, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = _rows(r.stdout)
    assert sorted(rows) == list(range(8))
    per_node: dict[str, set[str]] = {}
    for _, (node, cuda, step_gpus) in rows.items():
        assert len(cuda.split(",")) == 1 and step_gpus == cuda
        per_node.setdefault(node, set()).add(cuda)
    assert len(per_node) == 2 and all(len(g) == 4 for g in per_node.values())


def test_gpus_per_task_inside_a_batch_job(cluster: Cluster) -> None:
    out = cluster.workdir / "gpt.out"
    jid = cluster.sbatch("-N1", "-n4", "--gres=gpu:4", "-o", str(out),
                         "--wrap", f"echo batch $SLURM_STEP_GPUS; srun --gpus-per-task=1 "
                         f"bash -c '{SHOW}'")
    assert cluster.wait_state(jid, "COMPLETED", 60) == "COMPLETED"
    lines = out.read_text().splitlines()
    assert lines[0] == "batch 0,1,2,3"  # the batch step's GPUs, as Slurm sets them
    rows = _rows("\n".join(lines[1:]))
    assert sorted(c for _, c, _ in rows.values()) == ["0", "1", "2", "3"]


@pytest.mark.parametrize("bind,expected", [
    ("map_gpu:3,1", ["3", "1", "3", "1"]),
    ("mask_gpu:0x3,0xc", ["0,1", "2,3", "0,1", "2,3"]),
    ("single:2", ["0", "0", "1", "1"]),
    ("per_task:2", ["0,1", "2,3", "0", "0"]),  # past the GPUs: the first, as slurmstepd
    ("none", ["0,1,2,3"] * 4),
    ("closest", ["0,1,2,3"] * 4),
])
def test_gpu_bind_kinds(cluster: Cluster, bind: str, expected: list[str]) -> None:
    r = cluster.run("srun", "-N1", "-n4", "--gres=gpu:4", f"--gpu-bind={bind}",
                    "bash", "-c", SHOW, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = _rows(r.stdout)
    assert [rows[i][1] for i in range(4)] == expected


def test_gpu_bind_verbose_and_invalid(cluster: Cluster) -> None:
    r = cluster.run("srun", "-N1", "-n2", "--gres=gpu:2", "--gpu-bind=verbose,per_task:1",
                    "bash", "-c", "echo $CUDA_VISIBLE_DEVICES", timeout=60)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == ["0", "1"]
    lines = sorted(ln for ln in r.stderr.splitlines() if ln.startswith("gpu-bind:"))
    assert lines == [
        "gpu-bind: usable_gres=0x1; bit_alloc=0x3; local_inx=0; global_list=0; local_list=0",
        "gpu-bind: usable_gres=0x2; bit_alloc=0x3; local_inx=0; global_list=1; local_list=1",
    ]
    r = cluster.run("srun", "--gpu-bind=sideways", "true")
    assert (r.returncode, r.stderr) == (1, "srun: error: Invalid --gpu-bind argument: "
                                           "gpu:sideways\n")


def test_srun_task_runs_in_its_jobs_cgroup(cluster: Cluster) -> None:
    if os.geteuid() != 0 or not os.access("/sys/fs/cgroup", os.W_OK):
        pytest.skip("needs a writable cgroup hierarchy (root)")
    group = f"corral/{cluster_group_name(str(cluster.home))}"
    out = cluster.workdir / "cg.out"
    jid = cluster.sbatch("-N1", "-n1", "-o", str(out), "--wrap",
                         "srun bash -c 'cat /proc/$$/cgroup'")
    assert cluster.wait_state(jid, "COMPLETED", 60) == "COMPLETED"
    text = out.read_text()
    # its own step group beside the batch step's, under the job's group (its limits)
    assert re.search(rf"/{group}/job_{jid}/step_0\b", text), text
    # a standalone srun: its allocation has no batch step, the step gets the job's group
    r = cluster.run("srun", "-N1", "bash", "-c", "echo $SLURM_JOB_ID; cat /proc/$$/cgroup",
                    timeout=60)
    assert r.returncode == 0, r.stderr
    job = r.stdout.split()[0]
    assert re.search(rf"/{group}/job_{job}/step_0\b", r.stdout), r.stdout


ONE_NODE = """\
ClusterName=onenode
KillWait=2
SchedulerInterval=1
NodeName=node-1 CPUs={cpus} RealMemory=4000
PartitionName=debug Nodes=node-1 Default=YES MaxTime=INFINITE State=UP
"""


def test_srun_tasks_bound_to_the_jobs_cpus(tmp_path_factory: pytest.TempPathFactory) -> None:
    # an agent serving one node binds jobs to real CPUs; its srun tasks get the job's
    if os.geteuid() != 0 or not os.access("/sys/fs/cgroup", os.W_OK):
        pytest.skip("needs a writable cgroup hierarchy (root)")
    cpus = len(os.sched_getaffinity(0))
    if cpus < 2:
        pytest.skip("needs two CPUs")
    c = Cluster(tmp_path_factory.mktemp("onenode"), ONE_NODE.format(cpus=cpus))
    try:
        c.start()
        out = c.workdir / "cpus.out"
        show = "grep Cpus_allowed_list /proc/self/status"
        jid = c.sbatch("-n1", "-o", str(out), "--wrap", f"{show}; srun {show}")
        assert c.wait_state(jid, "COMPLETED", 60) == "COMPLETED"
        batch, task = [ln.split()[-1] for ln in out.read_text().splitlines()]
        assert batch == task and "," not in task and "-" not in task  # one CPU, the job's
        # `scontrol -d show job` names the CPU the agent bound the job to
        out2 = c.workdir / "cpus2.out"
        jid = c.sbatch("-n1", "-o", str(out2), "--wrap", f"{show}; sleep 30")
        c.wait_for(lambda: out2.exists() and out2.read_text().strip() != "", timeout=30,
                   what="the job's CPU")
        cpu = out2.read_text().split()[-1]
        deadline = time.monotonic() + 10
        while f"CPU_IDs={cpu} " not in (shown := c.ok("scontrol", "-d", "show", "job", str(jid))) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        assert f"CPU_IDs={cpu} " in shown, shown
        c.ok("scancel", str(jid))
    finally:
        c.stop()
