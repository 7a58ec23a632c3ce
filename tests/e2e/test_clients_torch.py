"""PyTorch/Lightning multi-node recipes, unchanged, in a real two-node Corral job.

The usual recipe: `sbatch -N2 --ntasks-per-node=2` a script that exports
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1) and a MASTER_PORT,
then `srun python train.py`; each task takes its rank from SLURM_PROCID, SLURM_LOCALID,
SLURM_NODEID and its world size from SLURM_NTASKS (what Lightning's SLURMEnvironment reads).
MASTER_ADDR must be a host the tasks can reach, so this cluster's two nodes are named after
two names of this machine: `localhost` and its host name.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

# One script for every mode: the job runs it once per task under srun.
PROBE = r'''
import json, os, socket, sys, time
from datetime import timedelta

mode, out = sys.argv[1], sys.argv[2]
rank = int(os.environ["SLURM_PROCID"])
record = {name: os.environ.get(name) for name in (
    "SLURM_JOB_ID", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
    "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_NNODES", "SLURM_NTASKS_PER_NODE",
    "SLURMD_NODENAME", "MASTER_ADDR", "MASTER_PORT")}

if mode == "tcp":
    # Rank 0 listens on MASTER_ADDR; every other rank, on either node, connects to it.
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    world = int(os.environ["SLURM_NTASKS"])
    if rank == 0:
        with socket.create_server((addr, port)) as server:
            server.settimeout(30)
            peers = []
            for _ in range(world - 1):
                conn, _ = server.accept()
                with conn:
                    peers.append(conn.makefile().readline().strip())
        record["peers"] = sorted(peers)
    else:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection((addr, port), timeout=5) as conn:
                    conn.sendall(f"{rank} {os.environ['SLURMD_NODENAME']}\n".encode())
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
elif mode == "lightning":
    from lightning.fabric.plugins.environments import SLURMEnvironment
    env = SLURMEnvironment()
    # Raises if SLURM_NTASKS_PER_NODE / SLURM_NNODES disagree with what the job asked for.
    env.validate_settings(num_devices=2, num_nodes=2)
    record["lightning"] = {
        "detect": SLURMEnvironment.detect(), "world_size": env.world_size(),
        "global_rank": env.global_rank(), "local_rank": env.local_rank(),
        "node_rank": env.node_rank(), "main_address": env.main_address,
        "main_port": env.main_port, "job_id": SLURMEnvironment.job_id()}
elif mode == "gloo":
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="env://", rank=rank,
                            world_size=int(os.environ["SLURM_NTASKS"]),
                            timeout=timedelta(seconds=60))
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    record["sum"] = value.item()
    record["world_size"] = dist.get_world_size()
    dist.destroy_process_group()
elif mode == "fabric":
    import torch
    from lightning.fabric import Fabric
    fabric = Fabric(accelerator="cpu", devices=2, num_nodes=2, strategy="ddp")
    fabric.launch()
    total = fabric.all_reduce(torch.tensor([float(fabric.global_rank + 1)]), reduce_op="sum")
    record["fabric"] = {
        "global_rank": fabric.global_rank, "local_rank": fabric.local_rank,
        "node_rank": fabric.node_rank, "world_size": fabric.world_size, "sum": total.item(),
        "cluster_environment": type(fabric._connector.cluster_environment).__name__}

with open(os.path.join(out, f"rank-{rank}.json"), "w") as f:
    json.dump(record, f)
'''

JOB_SCRIPT = """\
#!/bin/bash
#SBATCH -N2 --ntasks-per-node=2 -J torch-recipe
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT={port}
export GLOO_SOCKET_IFNAME=lo
srun {python} {probe} {mode} {out}
"""


def _loopback_only(name: str) -> bool:
    """The name resolves, and only to this machine's loopback addresses."""
    try:
        infos = socket.getaddrinfo(name, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def _node_names() -> list[str]:
    names = sorted({"localhost", socket.gethostname()})
    if len(names) != 2:
        pytest.skip("this machine's host name is `localhost`: no second name for a node")
    for name in names:
        if not _loopback_only(name):
            pytest.skip(f"{name} does not resolve to loopback only: tasks could not reach it here")
    return names


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def nodes() -> list[str]:
    # Sorted: Slurm lists a job's nodes sorted, and rank 0 runs on the first one listed.
    return _node_names()


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory: pytest.TempPathFactory, nodes: list[str]) -> Iterator[Cluster]:
    hostlist = ",".join(nodes)
    config = (
        "ClusterName=torchcluster\nKillWait=2\nMinJobAge=600\nSchedulerInterval=1\n"
        f"NodeName={hostlist} CPUs=4 RealMemory=8000\n"
        f"PartitionName=debug Nodes={hostlist} Default=YES MaxTime=INFINITE State=UP\n")
    c = Cluster(Path(tmp_path_factory.mktemp("corral-torch")), config=config)
    try:
        c.start()
        yield c
    finally:
        c.run("scancel", "-n", "torch-recipe")
        c.stop()


def _run_recipe(cluster: Cluster, tmp_path: Path, mode: str, timeout: float = 60) -> list[dict[str, Any]]:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    out = tmp_path / "ranks"
    out.mkdir()
    script = tmp_path / "recipe.sh"
    script.write_text(JOB_SCRIPT.format(port=_free_port(), python=sys.executable, probe=probe,
                                        mode=mode, out=out))
    log = tmp_path / "recipe-%j.out"
    jid = cluster.sbatch("-o", str(log), str(script))
    log = tmp_path / f"recipe-{jid}.out"
    try:
        cluster.wait_state(jid, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=timeout)
    finally:
        cluster.run("scancel", str(jid))
    text = log.read_text() if log.exists() else "(no output)"
    assert cluster.state(jid) == "COMPLETED", text
    records = [json.loads((out / f"rank-{rank}.json").read_text()) for rank in range(4)]
    assert all(r["SLURM_JOB_ID"] == str(jid) for r in records)
    return records


def test_ranks_master_addr_and_a_connection_to_it(two_hosts: Cluster, nodes: list[str],
                                                   tmp_path: Path) -> None:
    records = _run_recipe(two_hosts, tmp_path, "tcp")
    hostlist = ",".join(nodes)
    for rank, r in enumerate(records):
        assert (r["SLURM_NTASKS"], r["SLURM_PROCID"], r["SLURM_LOCALID"], r["SLURM_NODEID"]) == \
            ("4", str(rank), str(rank % 2), str(rank // 2)), r
        assert (r["SLURM_NNODES"], r["SLURM_NTASKS_PER_NODE"]) == ("2", "2"), r
        assert r["SLURM_JOB_NODELIST"] == r["SLURM_NODELIST"] == hostlist, r
        assert r["SLURMD_NODENAME"] == nodes[rank // 2], r
        # Every rank agrees on MASTER_ADDR, and it names the node rank 0 runs on.
        assert r["MASTER_ADDR"] == nodes[0], r
    assert records[0]["peers"] == [f"1 {nodes[0]}", f"2 {nodes[1]}", f"3 {nodes[1]}"]


def test_lightning_slurm_environment(two_hosts: Cluster, nodes: list[str], tmp_path: Path) -> None:
    pytest.importorskip("lightning.fabric", reason="lightning is not installed")
    records = _run_recipe(two_hosts, tmp_path, "lightning", timeout=90)
    for rank, r in enumerate(records):
        assert r["lightning"] == {
            "detect": True, "world_size": 4, "global_rank": rank, "local_rank": rank % 2,
            "node_rank": rank // 2, "main_address": nodes[0],
            "main_port": int(r["MASTER_PORT"]), "job_id": int(r["SLURM_JOB_ID"])}, r


def test_torch_distributed_gloo_all_reduce(two_hosts: Cluster, tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="PyTorch is not installed")
    records = _run_recipe(two_hosts, tmp_path, "gloo", timeout=120)
    assert [(r["sum"], r["world_size"]) for r in records] == [(10.0, 4)] * 4


def test_lightning_fabric_ddp_all_reduce(two_hosts: Cluster, nodes: list[str],
                                        tmp_path: Path) -> None:
    pytest.importorskip("lightning.fabric", reason="lightning is not installed")
    records = _run_recipe(two_hosts, tmp_path, "fabric", timeout=150)
    for rank, r in enumerate(records):
        assert r["fabric"] == {
            "global_rank": rank, "local_rank": rank % 2, "node_rank": rank // 2,
            "world_size": 4, "sum": 10.0, "cluster_environment": "SLURMEnvironment"}, r
