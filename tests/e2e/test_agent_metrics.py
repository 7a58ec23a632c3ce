"""The agent's per-GPU series on a running cluster (CorralAgentMetricsListen), parsed with
prometheus-client's parser: simulated GPUs (agent.gpu.SimulatedBackend) with utilisations the
test sets, and the job holding each GPU."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from corral.agent.gpu import SIM_FILE, write_simulated
from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow
MB = 1 << 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


PORT = _free_port()
CONFIG = f"""\
ClusterName=agentmetrics
KillWait=2
MinJobAge=600
SchedulerInterval=1
CorralAgentMetricsListen=127.0.0.1:{PORT}
NodeName=node-[1-2] CPUs=4 RealMemory=4000 Gres=gpu:2
PartitionName=debug Nodes=node-[1-2] Default=YES MaxTime=INFINITE State=UP
"""


def _gpus() -> list[dict[str, object]]:
    return [{"node": n, "index": i, "util": float(10 * k + i), "memory_used": (k + 1) * 256 * MB,
             "memory_total": 16384 * MB, "power_w": 100.0 + k,
             "processes": [{"pid": 1, "used_memory": MB}] if i == 0 else []}
            for k, n in enumerate(("node-1", "node-2")) for i in range(2)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    home = Path(tmp_path_factory.mktemp("agentmetrics"))
    write_simulated(str(home / SIM_FILE), _gpus())
    c = Cluster(home, CONFIG)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _scrape() -> dict[str, dict[tuple[str, ...], float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/metrics", timeout=10) as r:  # noqa: S310
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    out: dict[str, dict[tuple[str, ...], float]] = {}
    for f in text_string_to_metric_families(text):
        assert f.documentation and f.type == "gauge", f.name
        out[f.name] = {tuple(s.labels.values()): s.value for s in f.samples}
    return out


def test_agent_serves_each_gpu_and_its_job(cluster: Cluster) -> None:
    def up() -> bool:
        try:
            return bool(_scrape())
        except OSError:
            return False
    cluster.wait_for(up, timeout=30, what="the agent's metrics listener")
    m = _scrape()
    assert m["corral_gpu_utilization_percent"] == {
        ("node-1", "0"): 0.0, ("node-1", "1"): 1.0, ("node-2", "0"): 10.0, ("node-2", "1"): 11.0}
    assert m["corral_gpu_memory_used_bytes"][("node-2", "1")] == 512 * MB
    assert m["corral_gpu_memory_total_bytes"][("node-1", "0")] == 16384 * MB
    assert m["corral_gpu_power_watts"][("node-2", "0")] == 101.0
    assert m["corral_gpu_processes"] == {
        ("node-1", "0"): 1.0, ("node-1", "1"): 0.0, ("node-2", "0"): 1.0, ("node-2", "1"): 0.0}
    assert set(m["corral_gpu_allocated"].values()) == {0.0}
    assert m.get("corral_gpu_job_info", {}) == {}

    job = cluster.sbatch("--gres=gpu:2", "-w", "node-2", "--wrap", "sleep 60")
    try:
        cluster.wait_state(job, "RUNNING", timeout=30)
        m = _scrape()
        assert m["corral_gpu_job_info"] == {("node-2", "0", str(job)): 1.0,
                                            ("node-2", "1", str(job)): 1.0}
        assert m["corral_gpu_allocated"] == {
            ("node-1", "0"): 0.0, ("node-1", "1"): 0.0, ("node-2", "0"): 1.0, ("node-2", "1"): 1.0}
        # the utilisation is sampled at each scrape
        write_simulated(str(cluster.home / SIM_FILE),
                        [{**g, "util": 99.0} if g["node"] == "node-2" else g for g in _gpus()])
        assert _scrape()["corral_gpu_utilization_percent"][("node-2", "1")] == 99.0
    finally:
        cluster.run("scancel", str(job))
    cluster.wait_state(job, "CANCELLED", timeout=30)

    def released() -> bool:
        return _scrape().get("corral_gpu_job_info", {}) == {}
    cluster.wait_for(released, timeout=30, what="the GPUs' release")
    assert set(_scrape()["corral_gpu_allocated"].values()) == {0.0}
