"""The agent's per-GPU series over plain HTTP, for a Prometheus server on each GPU machine.

    CorralAgentMetricsListen=[HOST:]PORT     in slurm.conf (HOST 127.0.0.1 unless given)

The controller sends the setting with "registered"; the agent then serves `GET /metrics`:
each GPU's utilisation, memory used and total, power draw and process count, sampled at
the scrape from the agent's GPU backend (agent.gpu: NVML, or the simulated one), and which
job holds each GPU (`corral_gpu_job_info{node,gpu,jobid} 1`, one series per held GPU, as
Prometheus' info-style series are: join it on `node` and `gpu`).  Labels `node` and `gpu`
(the index on the node) are those of the controller's `/metrics/gpus`.  No authentication:
keep it on loopback or on a network only Prometheus reaches.

Which job holds a GPU comes from the controller's messages to this agent: a batch launch
(its node's GPUs), an srun step's tasks (SLURM_JOB_GPUS of each node), a job start sent for
the Prolog; it ends with the job's end, its acknowledgement, or, for a step's GPUs, when no
step of the job runs here any more.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable
from typing import Any

from aiohttp import web

from corral.agent.gpu import GpuBackend, GpuSample
from corral.exposition import CONTENT_TYPE, Family, expose

log = logging.getLogger("corral.agent")

KEY = "CorralAgentMetricsListen"  # slurm.conf; sent to agents as "agent_metrics_listen"
CONFIG_FIELD = "agent_metrics_listen"

BATCH, STEP, ALLOC = "batch", "step", "alloc"  # where a holding was learnt


def _indices(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip().isdigit()]


class GpuHolders:
    """Which job holds each GPU of this agent's nodes: (node, index) -> (job id, source)."""

    def __init__(self, nodes: list[str]) -> None:
        self.nodes = set(nodes)
        self.held: dict[tuple[str, int], tuple[int, str]] = {}

    def hold(self, job_id: int, node: str, gpus: list[int], source: str) -> None:
        if node in self.nodes:
            for g in gpus:
                self.held[(node, g)] = (job_id, source)

    def release(self, job_id: int, nodes: list[str] | None = None) -> None:
        for key in [k for k, (j, _s) in self.held.items()
                    if j == job_id and (nodes is None or k[0] in nodes)]:
            del self.held[key]

    def observe(self, m: Any) -> None:
        """One message from the controller (a raw dict, before it is handled)."""
        if not isinstance(m, dict):
            return
        try:
            kind = m.get("type")
            if kind == "launch":
                spec = m["launch"]
                node = spec.get("node_name") or (next(iter(self.nodes)) if len(self.nodes) == 1
                                                  else "")
                self.hold(int(spec["job_id"]), node, [int(g) for g in spec.get("gpus") or []],
                          BATCH)
            elif kind == "launch_tasks":
                for t in m.get("tasks") or []:
                    env = t.get("env") or {}
                    ids = env.get("SLURM_JOB_GPUS") or env.get("SLURM_STEP_GPUS") or ""
                    self.hold(int(m["job_id"]), t.get("node") or "", _indices(ids), STEP)
            elif kind == "job_start":
                for node, ids in (m.get("gpus") or {}).items():
                    self.hold(int(m["job_id"]), node, _indices(ids), ALLOC)
            elif kind == "job_end":
                self.release(int(m["job_id"]), list(m.get("nodes") or []) or None)
            elif kind == "ack":
                self.release(int(m["job_id"]))
            elif kind == "registered":
                for jid in m.get("ack") or []:
                    self.release(int(jid))
        except (KeyError, TypeError, ValueError, AttributeError):
            pass  # malformed: the agent's own decoding logs it

    def recover(self, job_dirs: dict[int, str]) -> None:
        """Jobs that ran through an agent restart: their batch launch, from its job dir."""
        for job_id, d in job_dirs.items():
            try:
                with open(os.path.join(d, "launch.json"), "rb") as f:
                    spec = json.loads(f.read(1 << 22))
                self.hold(job_id, spec.get("node_name") or "", [int(g) for g in spec["gpus"]],
                          BATCH)
            except (OSError, ValueError, KeyError, TypeError):
                continue

    def current(self, live: Callable[[int, str], bool]) -> dict[tuple[str, int], int]:
        """The holdings whose job still holds them (`live(job_id, source)`)."""
        for key in [k for k, (j, s) in self.held.items() if not live(j, s)]:
            del self.held[key]
        return {k: j for k, (j, _s) in self.held.items()}


def families(samples: list[GpuSample], nodes: list[str],
             holders: dict[tuple[str, int], int]) -> list[Family]:
    """The per-GPU gauges of one scrape.  A sample's node is its own where it names one of
    this agent's nodes, else the agent's first node (the controller's rule too)."""
    labels = ("node", "gpu")
    util = Family("corral_gpu_utilization_percent",
                  "GPU utilisation at the last sample (NVML), per node and GPU", labels)
    mem = Family("corral_gpu_memory_used_bytes", "GPU memory in use at the last sample", labels)
    total = Family("corral_gpu_memory_total_bytes", "GPU memory in all", labels)
    power = Family("corral_gpu_power_watts", "GPU power draw at the last sample", labels)
    procs = Family("corral_gpu_processes", "Processes using the GPU at the last sample", labels)
    alloc = Family("corral_gpu_allocated", "1 if a job holds the GPU, else 0", labels)
    info = Family("corral_gpu_job_info", "The job holding the GPU (1 per held GPU)",
                  ("node", "gpu", "jobid"))
    for s in samples:
        node = s.node if s.node in nodes else (nodes[0] if nodes else "")
        key = (node, str(s.index))
        util.add(key, s.util)
        mem.add(key, s.memory_used)
        total.add(key, s.memory_total)
        if s.power_w is not None:
            power.add(key, s.power_w)
        procs.add(key, len(s.processes))
        job = holders.get((node, s.index))
        alloc.add(key, int(job is not None))
        if job is not None:
            info.add((*key, str(job)), 1)
    return [util, mem, total, power, procs, alloc, info]


def liveness(job_dir: Callable[[int], str], live_steps: Callable[[], set[int]]
             ) -> Callable[[int, str], bool]:
    """Whether a holding stands: a batch job's while its job directory is there (until the
    controller acknowledges its end), a step's while a step of the job runs here or its
    batch job does, one from a job start until the job's end."""
    def live(job_id: int, source: str) -> bool:
        if source == ALLOC:
            return True
        if source == STEP and job_id in live_steps():
            return True
        return os.path.isdir(job_dir(job_id))
    return live


def parse_listen(text: str) -> tuple[str, int] | None:
    """`[HOST:]PORT` -> (host, port); None when empty or malformed."""
    text = text.strip()
    if not text:
        return None
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host, int(port)


class AgentMetrics:
    """The HTTP listener; `configure` starts, moves or stops it as the setting says."""

    def __init__(self, nodes: list[str], gpus: GpuBackend,
                 live: Callable[[int, str], bool]) -> None:
        self.nodes = nodes
        self.gpus = gpus
        self.live = live
        self.holders = GpuHolders(nodes)
        self.listen: tuple[str, int] | None = None
        self._runner: web.AppRunner | None = None

    async def render(self) -> bytes:
        try:  # NVML calls block briefly: off the loop
            samples = await asyncio.get_running_loop().run_in_executor(None, self.gpus.sample)
        except Exception:
            samples = []
        return expose(families(samples, self.nodes, self.holders.current(self.live)))

    async def _serve(self, _request: web.Request) -> web.Response:
        return web.Response(body=await self.render(), headers={"Content-Type": CONTENT_TYPE})

    async def configure(self, setting: str | None) -> None:
        listen = parse_listen(setting or "")
        if setting and listen is None:
            log.warning("%s=%s is not [HOST:]PORT: no GPU metrics served", KEY, setting)
        if listen == self.listen:
            return
        await self.close()
        if listen is None:
            return
        app = web.Application()
        app.router.add_get("/metrics", self._serve)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, listen[0], listen[1]).start()
        except OSError as e:
            await runner.cleanup()
            log.warning("GPU metrics not served on %s:%d: %s", *listen, e)
            return
        self._runner, self.listen = runner, listen
        log.info("GPU metrics on http://%s:%d/metrics", *listen)

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self._runner, self.listen = None, None
