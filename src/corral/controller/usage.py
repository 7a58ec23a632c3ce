"""The agents' resource samples, attributed to jobs, steps and GPUs (sstat, sacct, metrics).

An agent's `usage` message (agent.usage) carries its running steps' figures and its GPUs'
samples.  The book keeps, in memory: the latest figures of each running step per node (what
`sstat` prints), the latest GPU samples per node (metrics), and per step and node the GPU
utilisation and memory of the GPUs the job holds there.  A step's final figures are stored on
its record (`Step.usage`, persisted with the job: what `sacct` prints)."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

from corral.controller.reclaim import reclaimer
from corral.model.hostlists import expand
from corral.model.job import Job, Step

if TYPE_CHECKING:
    from collections.abc import Callable

    from corral.controller.jobs import JobEvent
    from corral.controller.state import Controller

log = logging.getLogger("corral.controller")

FIGURES = ("cpu_user", "cpu_sys", "rss", "rss_max", "read", "write", "ntasks", "time")
GPU_NUMBERS = ("util", "memory_used", "memory_total")


class BadUsage(ValueError):
    pass


def _number(d: dict[str, Any], key: str) -> float:
    v = d.get(key, 0)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        raise BadUsage(f"{key} is not a non-negative number")
    return v


def _figures(d: dict[str, Any]) -> dict[str, Any]:
    return {k: _number(d, k) for k in FIGURES}


def _gpu(d: dict[str, Any]) -> dict[str, Any]:
    index = d.get("index")
    if type(index) is not int or not 0 <= index < 1024:
        raise BadUsage("gpu index is not an integer 0-1023")
    out: dict[str, Any] = {"index": index, **{k: _number(d, k) for k in GPU_NUMBERS}}
    power = d.get("power_w")
    out["power_w"] = _number(d, "power_w") if power is not None else None
    procs = d.get("processes") or []
    out["processes"] = len(procs) if isinstance(procs, list) else 0
    return out


def _step_nodes(job: Job, rec: Step) -> list[str]:
    if rec.step_id == "batch":
        return [job.batch_host] if job.batch_host else []
    try:
        return expand(rec.nodes) if rec.nodes else list(job.nodes)
    except ValueError:
        return list(job.nodes)


class UsageBook:
    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        # (job id, step id) -> node -> latest figures (running steps)
        self.live: dict[tuple[int, str], dict[str, dict[str, Any]]] = {}
        # node -> (time, its GPUs' latest samples)
        self.gpus: dict[str, tuple[float, list[dict[str, Any]]]] = {}
        # (job id, step id, node) -> [utilisation sum, samples, utilisation max, memory max]
        self.gpu_acc: dict[tuple[int, str, str], list[float]] = {}
        # job id -> node -> (utilisation, memory) of its GPUs at the last sample
        self.job_gpu: dict[int, dict[str, tuple[float, float]]] = {}
        self.sample_listeners: list[Callable[[str], None]] = []  # told each node sampled
        # node -> the running jobs holding GPUs there: a node's sample visits those, not
        # every running job (1,000 nodes sampled every 30 s against 5,000 running jobs)
        self.gpu_jobs: dict[str, set[int]] = {}
        self._gpu_nodes: dict[int, tuple[str, ...]] = {}  # job -> those nodes
        for job in list(ctl.running.values()):
            self._track(job)
        ctl.table.subscribe(self._on_job)

    def _on_job(self, ev: JobEvent) -> None:
        """Keep `gpu_jobs` what the job table's running jobs hold (running: every job in an
        active state, suspended ones too, as the table keeps them)."""
        if ev.job.job_id in self.ctl.running:
            self._track(ev.job)
        else:
            self._untrack(ev.job.job_id)

    def _track(self, job: Job) -> None:
        nodes = tuple(dict.fromkeys(a.node for a in job.alloc if a.gpus))
        if self._gpu_nodes.get(job.job_id) == nodes:
            return
        self._untrack(job.job_id)
        if nodes:
            self._gpu_nodes[job.job_id] = nodes
            for node in nodes:
                self.gpu_jobs.setdefault(node, set()).add(job.job_id)

    def _untrack(self, job_id: int) -> None:
        for node in self._gpu_nodes.pop(job_id, ()):
            on = self.gpu_jobs.get(node)
            if on is not None:
                on.discard(job_id)
                if not on:
                    del self.gpu_jobs[node]

    # ---- from the agents -------------------------------------------------------------
    def agent_usage(self, time_: float, gpus: list[dict[str, Any]],
                    steps: list[dict[str, Any]], nodes: list[str]) -> None:
        """One agent's `usage` message; a bad entry is refused alone (logged)."""
        if not nodes:
            return
        by_node: dict[str, list[dict[str, Any]]] = {}
        for g in gpus:
            try:
                sample = _gpu(g if isinstance(g, dict) else {})
            except BadUsage as e:
                log.warning("GPU sample from %s refused: %s", nodes[0], e)
                continue
            node = g.get("node")
            by_node.setdefault(node if node in nodes else nodes[0], []).append(sample)
        for node, samples in by_node.items():
            self._gpu_samples(node, time_, samples)
            for listener in self.sample_listeners:  # controller.metrics: the node's lines
                listener(node)
        for entry in steps:
            try:
                self._step_entry(entry, nodes)
            except BadUsage as e:
                log.warning("usage entry from %s refused: %s", nodes[0], e)

    def _step_entry(self, entry: Any, nodes: list[str]) -> None:
        if not isinstance(entry, dict):
            raise BadUsage("not an object")
        jid, sid = entry.get("job_id"), entry.get("step")
        if type(jid) is not int or not isinstance(sid, str):
            raise BadUsage("job_id/step missing")
        job = self.ctl.jobs.get(jid)
        if job is None:
            return  # gone from memory: nothing to attach to
        rec = next((s for s in job.steps if s.step_id == sid), None)
        if rec is None:
            return
        where = _step_nodes(job, rec)
        node = next((n for n in where if n in nodes), None)
        if node is None:
            raise BadUsage(f"step {jid}.{sid} does not run on this agent's nodes")
        fig = _figures(entry)
        acc = self.gpu_acc.get((jid, sid, node))
        if acc is not None and acc[1]:
            fig.update(gpuutil_ave=round(acc[0] / acc[1], 2), gpuutil_max=acc[2],
                       gpumem_max=int(acc[3]))
        if entry.get("final") is True:
            self.gpu_acc.pop((jid, sid, node), None)
            live = self.live.get((jid, sid))
            if live is not None:
                live.pop(node, None)
                if not live:
                    del self.live[(jid, sid)]
            rec.usage = {**(rec.usage or {}), node: fig}
            self.ctl.mark(job)
        elif rec.end_time is None:
            self.live.setdefault((jid, sid), {})[node] = fig

    def _gpu_samples(self, node: str, time_: float, samples: list[dict[str, Any]]) -> None:
        self.gpus[node] = (time_, samples)
        by_index = {g["index"]: g for g in samples}
        n = self.ctl.nodes.get(node)
        if n is None:
            return
        running = self.ctl.running
        jobs = [job for job_id in sorted(self.gpu_jobs.get(node, ()))
                if (job := running.get(job_id)) is not None]
        reclaimer(self.ctl).observe(node, samples, self.ctl.clock(), jobs)  # idle-since tracking
        for job in jobs:
            held = [i for a in job.alloc if a.node == node for i in a.gpus]
            if not held:
                continue
            util = sum(by_index[i]["util"] for i in held if i in by_index)
            mem = sum(by_index[i]["memory_used"] for i in held if i in by_index)
            self.job_gpu.setdefault(job.job_id, {})[node] = (util, mem)
            for rec in job.steps:
                if rec.end_time is None and node in _step_nodes(job, rec):
                    acc = self.gpu_acc.setdefault((job.job_id, rec.step_id, node),
                                                  [0.0, 0, 0.0, 0.0])
                    acc[0] += util
                    acc[1] += 1
                    acc[2] = max(acc[2], util)
                    acc[3] = max(acc[3], mem)

    def job_ended(self, job_id: int) -> None:
        """Forget a finished job's live figures (its final ones are on its steps)."""
        self.job_gpu.pop(job_id, None)
        for key in [k for k in self.live if k[0] == job_id]:
            del self.live[key]
        for acc_key in [k for k in self.gpu_acc if k[0] == job_id]:
            del self.gpu_acc[acc_key]

    # ---- for sstat ---------------------------------------------------------------------
    def running_steps(self, job_id: int, step_id: str | None) -> list[dict[str, Any]]:
        """sstat's rows: each running step of the job (or the one named) with its figures."""
        out = []
        for (jid, sid), per_node in sorted(self.live.items()):
            if jid != job_id or (step_id is not None and sid != step_id):
                continue
            job = self.ctl.jobs.get(jid)
            rec = next((s for s in job.steps if s.step_id == sid), None) if job else None
            out.append({"job_id": jid, "step": sid, "usage": dict(per_node),
                        "ntasks": rec.ntasks if rec is not None else 1})
        return out
