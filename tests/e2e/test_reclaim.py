"""Idle-GPU reclaim on a real cluster with simulated GPUs (agent.gpu.SimulatedBackend): an
allocated GPU left at 0 % is noticed, then requeued or cancelled per the policy; a busy one
is left alone; an interactive allocation goes before a batch job.  Minutes are seconds here."""

from __future__ import annotations

import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from corral.agent.gpu import SIM_FILE, write_simulated
from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


METRICS_PORT = _free_port()
CONFIG = f"""\
ClusterName=reclaimcluster
KillWait=2
MinJobAge=600
SchedulerInterval=1
JobAcctGatherFrequency=1
CorralMetricsListen=127.0.0.1:{METRICS_PORT}
CorralIdleGpuReclaim=notice=2s,after=3s,batch_after=15s,action=requeue
CorralIdleGpuReclaimPartitions=cut:cancel
NodeName=node-[1-4] CPUs=2 RealMemory=2000 Gres=gpu:1
PartitionName=debug Nodes=node-[1-2] Default=YES MaxTime=INFINITE State=UP
PartitionName=cut Nodes=node-[3-4] MaxTime=INFINITE State=UP
"""
BUSY = {"node-2"}  # the others' GPUs stay at 0 % with no process


def _gpus() -> list[dict[str, object]]:
    return [{"node": f"node-{i}", "index": 0, "util": 80.0 if f"node-{i}" in BUSY else 0.0,
             "memory_used": 0, "memory_total": 16 << 30, "power_w": 50.0,
             "processes": [{"pid": 1, "used_memory": 1 << 30}] if f"node-{i}" in BUSY else []}
            for i in range(1, 5)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    home = Path(tmp_path_factory.mktemp("reclaim"))
    write_simulated(str(home / SIM_FILE), _gpus())
    c = Cluster(home, CONFIG)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _show(c: Cluster, job: int) -> str:
    return c.ok("scontrol", "show", "job", str(job))


def _comment(c: Cluster, job: int) -> str:
    out = c.ok("sacct", "-j", str(job), "-X", "-n", "-P", "-o", "Comment")
    return out.strip()


def test_idle_gpu_is_noticed_then_requeued_and_a_busy_one_is_not(cluster: Cluster) -> None:
    c = cluster
    busy = c.sbatch("-w", "node-2", "--gres=gpu:1", "--wrap", "sleep 300")
    idle = c.sbatch("-w", "node-1", "--gres=gpu:1", "--wrap", "sleep 300")
    try:
        c.wait_state(idle, "RUNNING", timeout=30)
        c.wait_for(lambda: "Comment=idle-gpu: GPUs idle since" in _show(c, idle), timeout=30,
                   what="the idle job's notice")
        assert "requeue due" in _show(c, idle)
        assert "requeued" not in _comment(c, idle)  # not before batch_after
        c.wait_for(lambda: "requeued" in _comment(c, idle), timeout=40, what="the requeue")
        comment = _comment(c, idle)
        assert comment.startswith("idle-gpu: requeued ") and "GPU-hours reclaimed" in comment
        c.wait_for(lambda: "Restarts=1" in _show(c, idle), timeout=30, what="the restart")
        # the busy job, running all along, was never noticed
        assert c.state(busy) == "RUNNING"
        assert "idle-gpu" not in _show(c, busy) and "Restarts=0" in _show(c, busy)
        log = (c.home / "log" / "controller.log").read_text()
        assert f"job {idle} (user root, account " in log and "requeued by idle-GPU reclaim" in log
        with urllib.request.urlopen(  # noqa: S310 (loopback)
                f"http://127.0.0.1:{METRICS_PORT}/metrics/jobs-users-accts", timeout=10) as r:
            text = r.read().decode()
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for f in text_string_to_metric_families(text) for s in f.samples}
        hours = [v for (n, lab), v in samples.items()
                 if n == "corral_gpu_hours_reclaimed_total" and ("username", "root") in lab]
        # one GPU idle from its first sample until the requeue: some seconds of it
        assert len(hours) == 1 and 2 / 3600 <= hours[0] <= 120 / 3600, hours
        reclaims = [v for (n, lab), v in samples.items() if n == "corral_gpu_reclaims_total"
                    and ("action", "requeue") in lab]
        assert reclaims == [1.0]
    finally:
        c.run("scancel", str(busy), str(idle))
    c.wait_state(idle, "CANCELLED", timeout=30)
    c.wait_state(busy, "CANCELLED", timeout=30)


def test_interactive_allocation_goes_first_and_the_partition_says_cancel(
        cluster: Cluster) -> None:
    c = cluster
    batch = c.sbatch("-p", "cut", "-w", "node-4", "--gres=gpu:1", "--wrap", "sleep 300")
    c.wait_state(batch, "RUNNING", timeout=30)
    # an srun that makes its own allocation: interactive, and told of the notice
    srun = subprocess.Popen(["srun", "-p", "cut", "-w", "node-3", "--gres=gpu:1", "sleep", "300"],
                            env=c.env, cwd=c.workdir, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        c.wait_for(lambda: len(c.squeue_ids("-t", "R")) == 2, timeout=30, what="both running")
        alloc = next(int(j) for j in c.squeue_ids("-t", "R") if int(j) != batch)
        c.wait_state(alloc, "CANCELLED", timeout=40)
        # the batch job, idle as long (minus a second or two), still runs
        assert c.state(batch) == "RUNNING"
        assert "idle-gpu: GPUs idle since" in _show(c, batch)
        assert _comment(c, alloc).startswith("idle-gpu: cancelled ")
        _out, err = srun.communicate(timeout=30)
        assert "Corral: the 1 GPU(s) of job" in err and "cancelled at" in err, err
        assert srun.returncode != 0
        c.wait_state(batch, "CANCELLED", timeout=40)  # after its own, longer grace
        assert _comment(c, batch).startswith("idle-gpu: cancelled ")
    finally:
        if srun.poll() is None:
            srun.kill()
            srun.wait(timeout=10)
        c.run("scancel", str(batch))
