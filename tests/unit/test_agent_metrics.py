"""agent.metrics: which job holds each GPU (from the controller's messages), the per-GPU
series (parsed by prometheus-client) and the listener's setting."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from corral.agent import gpu
from corral.agent.metrics import (
    ALLOC,
    BATCH,
    STEP,
    AgentMetrics,
    GpuHolders,
    families,
    liveness,
    parse_listen,
)
from corral.exposition import expose


def test_holders_follow_the_controllers_messages(tmp_path: Path) -> None:
    h = GpuHolders(["n1", "n2"])
    h.observe({"type": "launch", "launch": {"job_id": 5, "node_name": "n1", "gpus": [0, 1]}})
    h.observe({"type": "launch_tasks", "job_id": 5, "step_id": 0, "tasks": [
        {"node": "n2", "env": {"SLURM_JOB_GPUS": "1"}}, {"node": "elsewhere", "env": {}}]})
    h.observe({"type": "job_start", "job_id": 7, "nodes": ["n2"], "gpus": {"n2": "0"}})
    h.observe({"type": "launch", "launch": "junk"})  # malformed: ignored
    assert h.held == {("n1", 0): (5, BATCH), ("n1", 1): (5, BATCH), ("n2", 1): (5, STEP),
                      ("n2", 0): (7, ALLOC)}
    h.observe({"type": "job_end", "job_id": 7, "nodes": ["n2"]})
    assert ("n2", 0) not in h.held
    # a step's GPUs stand while a step of the job runs here (or its batch job does)
    job_dir = tmp_path / "job5"
    steps: set[int] = {5}
    live = liveness(lambda j: str(tmp_path / f"job{j}"), lambda: steps)
    assert h.current(live) == {("n2", 1): 5}  # no job directory: the batch holding is gone
    steps.clear()
    assert h.current(live) == {}
    job_dir.mkdir()
    h.observe({"type": "launch", "launch": {"job_id": 5, "node_name": "n1", "gpus": [0]}})
    assert h.current(live) == {("n1", 0): 5}
    h.observe({"type": "registered", "ack": [5]})
    assert h.current(live) == {}


def test_recover_reads_the_launch_of_jobs_running_through_a_restart(tmp_path: Path) -> None:
    d = tmp_path / "job9"
    d.mkdir()
    (d / "launch.json").write_text(json.dumps({"job_id": 9, "node_name": "n1", "gpus": [3]}))
    h = GpuHolders(["n1"])
    h.recover({9: str(d), 10: str(tmp_path / "job10")})
    assert h.held == {("n1", 3): (9, BATCH)}


def test_families_parse_and_label_each_gpu() -> None:
    samples = [gpu.GpuSample(0, 40.0, 1 << 30, 16 << 30, 70.5, [gpu.GpuProcess(1, 5)], "n2"),
               gpu.GpuSample(1, 0.0, 0, 16 << 30, None, [], None)]
    text = expose(families(samples, ["n1", "n2"], {("n2", 0): 12})).decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert all(f.documentation and f.type == "gauge" for f in fams.values())

    def values(name: str) -> dict[tuple[str, ...], float]:
        return {tuple(s.labels.values()): s.value for s in fams[name].samples}
    assert values("corral_gpu_utilization_percent") == {("n2", "0"): 40.0, ("n1", "1"): 0.0}
    assert values("corral_gpu_power_watts") == {("n2", "0"): 70.5}  # none where not reported
    assert values("corral_gpu_processes") == {("n2", "0"): 1.0, ("n1", "1"): 0.0}
    assert values("corral_gpu_allocated") == {("n2", "0"): 1.0, ("n1", "1"): 0.0}
    assert values("corral_gpu_job_info") == {("n2", "0", "12"): 1.0}


def test_parse_listen() -> None:
    assert parse_listen("9400") == ("127.0.0.1", 9400)
    assert parse_listen("0.0.0.0:9400") == ("0.0.0.0", 9400)
    assert parse_listen("[::1]:9400") == ("::1", 9400)
    assert parse_listen("") is None and parse_listen("x:y") is None
    assert parse_listen("70000") is None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_listener_serves_moves_and_stops(tmp_path: Path) -> None:
    sim = tmp_path / "gpus.json"
    gpu.write_simulated(str(sim), [{"index": 0, "util": 25.0}])
    m = AgentMetrics(["n1"], gpu.SimulatedBackend(str(sim)), lambda j, s: True)

    async def scenario() -> None:
        port = _free_port()
        await m.configure(f"127.0.0.1:{port}")
        loop = asyncio.get_running_loop()
        url = f"http://127.0.0.1:{port}/metrics"
        body = await loop.run_in_executor(None, lambda: urllib.request.urlopen(url, timeout=10).read())
        assert b'corral_gpu_utilization_percent{node="n1",gpu="0"} 25.0' in body
        await m.configure(f"127.0.0.1:{port}")  # unchanged: still served
        assert m.listen == ("127.0.0.1", port)
        await m.configure("")
        assert m.listen is None
        try:
            await loop.run_in_executor(None, lambda: urllib.request.urlopen(url, timeout=5))
            raise AssertionError("still served")
        except OSError:
            pass

    asyncio.run(asyncio.wait_for(scenario(), 30))
