"""Prometheus metrics under Slurm's names, `sstat`'s and `sdiag`'s routes.

The routes of Slurm's OpenMetrics endpoint (Slurm 25.11, `MetricsType=metrics/openmetrics`):
`/metrics/nodes`, `/metrics/jobs`, `/metrics/partitions`, `/metrics/scheduler`,
`/metrics/jobs-users-accts`, with Slurm's metric names, labels and HELP text for every series
Corral can fill, plus `corral_` series Slurm lacks (GPU utilisation and memory per node, GPU,
job, user and account; allocated GPUs that are idle; pending jobs by reason).  Everything is
computed from memory at the request, in one go on the event loop (no pass runs meanwhile).
The sdiag counters are derived from the controller's typed job events (controller.jobs).

Served on the controller's socket, and over plain HTTP on `CorralMetricsListen=[HOST:]PORT`
(HOST 127.0.0.1 unless given) for a Prometheus server.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from corral.controller.jobs import JobEvent, JobEventKind
from corral.controller.usage import UsageBook
from corral.model.job import JobState

if TYPE_CHECKING:
    from corral.controller.server import Api
    from corral.controller.state import Controller

log = logging.getLogger("corral.controller")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
IDLE_GPU_UTIL = 1.0  # percent: a GPU below this, with no process, counts as idle

# Slurm's job-state gauges: (metric suffix, HELP, the states counted)
JOB_STATES: list[tuple[str, str, tuple[JobState, ...]]] = [
    ("bootfail", "Number of jobs in BootFail state", (JobState.BOOT_FAIL,)),
    ("cancelled", "Number of jobs in Cancelled state", (JobState.CANCELLED,)),
    ("completed", "Number of jobs in Completed state", (JobState.COMPLETED,)),
    ("completing", "Number of jobs in Completing state", (JobState.COMPLETING,)),
    ("deadline", "Number of jobs in Deadline state", (JobState.DEADLINE,)),
    ("failed", "Number of jobs in Failed state", (JobState.FAILED,)),
    ("node_failed", "Number of jobs in Node Failed state", (JobState.NODE_FAIL,)),
    ("outofmemory", "Number of jobs in Out of Memory state", (JobState.OUT_OF_MEMORY,)),
    ("pending", "Number of jobs in Pending state", (JobState.PENDING,)),
    ("preempted", "Number of jobs in Preempted state", (JobState.PREEMPTED,)),
    ("running", "Number of jobs in Running state", (JobState.RUNNING,)),
    ("suspended", "Number of jobs in Suspended state", (JobState.SUSPENDED,)),
    ("timeout", "Number of jobs in Timeout state", (JobState.TIMEOUT,)),
]
FINISHED = frozenset(s for s in JobState if s.finished)


def _gauge(name: str, doc: str, value: float | None = None,
           labels: list[str] | None = None) -> GaugeMetricFamily:
    if labels:
        return GaugeMetricFamily(name, doc, labels=labels)
    return GaugeMetricFamily(name, doc, value=value or 0)


class SchedCounters:
    """Slurm's sdiag statistics, from the job events and the passes' durations."""

    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.reset_time = time.time()
        self.counts: Counter[str] = Counter()
        self.cycle_max = 0.0
        self.cycle_sum = 0.0
        self.cycles = 0
        self._seen_passes = 0
        ctl.table.subscribe(self.on_event)

    def on_event(self, ev: JobEvent) -> None:
        c = self.counts
        if ev.kind is JobEventKind.SUBMITTED:
            c["submitted"] += 1
        elif ev.kind is JobEventKind.STARTED:
            c["started"] += 1
            if ev.job.scheduler == "Backfill":
                c["backfilled"] += 1
        elif ev.kind is JobEventKind.ENDED:
            if ev.new is JobState.COMPLETED:
                c["completed"] += 1
            elif ev.new is JobState.CANCELLED:
                c["canceled"] += 1
            else:
                c["failed"] += 1
        elif ev.kind is JobEventKind.REQUEUED:
            c["requeued"] += 1

    def observe_pass(self) -> None:
        """Take the last pass's duration (the controller times each pass)."""
        passes = self.ctl.sched_passes
        if passes != self._seen_passes:
            last = self.ctl.last_sched_duration
            self.cycles += passes - self._seen_passes
            self.cycle_sum += last * (passes - self._seen_passes)
            self.cycle_max = max(self.cycle_max, last)
            self._seen_passes = passes

    def snapshot(self) -> dict[str, Any]:
        self.observe_pass()
        ctl = self.ctl
        return {
            "time": time.time(), "reset_time": self.reset_time, "start_time": ctl.started,
            "jobs_submitted": self.counts["submitted"], "jobs_started": self.counts["started"],
            "jobs_completed": self.counts["completed"], "jobs_canceled": self.counts["canceled"],
            "jobs_failed": self.counts["failed"], "jobs_requeued": self.counts["requeued"],
            "jobs_backfilled": self.counts["backfilled"],
            "jobs_pending": len(ctl.pending), "jobs_running": len(ctl.running),
            "cycle_last_us": int(ctl.last_sched_duration * 1e6),
            "cycle_max_us": int(self.cycle_max * 1e6),
            "cycle_sum_us": int(self.cycle_sum * 1e6), "cycles": self.cycles,
            "queue_len": len(ctl.pending),
        }


class Metrics:
    def __init__(self, ctl: Controller, book: UsageBook) -> None:
        self.ctl = ctl
        self.book = book
        self.sched = SchedCounters(ctl)
        ctl.table.subscribe(self._forget_ended)

    def _forget_ended(self, ev: JobEvent) -> None:
        if ev.kind is JobEventKind.ENDED:
            self.book.job_ended(ev.job.job_id)

    # ---- /metrics/nodes ------------------------------------------------------------------
    def nodes(self) -> Iterator[Metric]:
        nodes = list(self.ctl.nodes.values())
        per = [
            ("slurm_node_cpus", "Total number of cpus in the node", lambda n: n.cpus),
            ("slurm_node_cpus_alloc", "Allocated cpus in the node", lambda n: n.alloc_cpus),
            ("slurm_node_cpus_idle", "Idle cpus in the node",
             lambda n: max(0, n.cpus - n.alloc_cpus)),
            ("slurm_node_gpus", "Total number of GPUs in the node", lambda n: n.gpus),
            ("slurm_node_gpus_alloc", "Number of GPUs currently allocated by jobs on the node",
             lambda n: len(n.alloc_gpus)),
            ("slurm_node_memory_alloc_bytes", "Bytes allocated to jobs in the node",
             lambda n: n.alloc_mem << 20),
            ("slurm_node_memory_bytes", "Total memory in bytes of the node",
             lambda n: n.real_memory << 20),
        ]
        for name, doc, get in per:
            g = _gauge(name, doc, labels=["node"])
            for n in nodes:
                g.add_metric([n.name], get(n))
            yield g
        free = _gauge("slurm_node_memory_free_bytes", "Free memory in bytes of the node",
                      labels=["node"])
        for n in nodes:
            if n.free_mem is not None:
                free.add_metric([n.name], n.free_mem << 20)
        yield free
        states: Counter[str] = Counter()
        for n in nodes:
            long = n.state_name()
            base = long.split("+")[0].rstrip("*")
            states[base] += 1
            if "DRAIN" in long:
                states["drain"] += 1
                states["draining" if n.job_count else "drained"] += 1
            if long.endswith("*"):
                states["noresp"] += 1
        yield _gauge("slurm_nodes", "Total number of nodes", len(nodes))
        for key, name, doc in [
                ("ALLOCATED", "alloc", "Number of nodes in Allocated state"),
                ("DOWN", "down", "Number of nodes in Down state"),
                ("drain", "drain", "Number of nodes with Drain flag"),
                ("drained", "drained", "Number of drained nodes"),
                ("draining", "draining",
                 "Number of nodes in draining condition (Drain state with active jobs)"),
                ("IDLE", "idle", "Number of nodes in Idle state"),
                ("MIXED", "mixed", "Number of nodes in Mixed state"),
                ("noresp", "noresp", "Number of nodes with Not Responding flag")]:
            yield _gauge(f"slurm_nodes_{name}", doc, states[key])
        yield from self._gpu_series()

    def _gpu_series(self) -> Iterator[Metric]:
        util = _gauge("corral_gpu_utilization_percent",
                      "GPU utilisation at the last sample (NVML), per node and GPU",
                      labels=["node", "gpu"])
        mem = _gauge("corral_gpu_memory_used_bytes", "GPU memory in use at the last sample",
                     labels=["node", "gpu"])
        power = _gauge("corral_gpu_power_watts", "GPU power draw at the last sample",
                       labels=["node", "gpu"])
        node_util = _gauge("corral_node_gpu_utilization_percent",
                           "Mean utilisation of the node's GPUs at the last sample",
                           labels=["node"])
        idle = _gauge("corral_node_gpus_alloc_idle",
                      "GPUs allocated to a job that showed no utilisation and no process at "
                      "the last sample", labels=["node"])
        for node, (_t, samples) in sorted(self.book.gpus.items()):
            n = self.ctl.nodes.get(node)
            held = set(n.alloc_gpus) if n is not None else set()
            idle_count = 0
            for g in samples:
                labels = [node, str(g["index"])]
                util.add_metric(labels, g["util"])
                mem.add_metric(labels, g["memory_used"])
                if g["power_w"] is not None:
                    power.add_metric(labels, g["power_w"])
                if g["index"] in held and g["util"] < IDLE_GPU_UTIL and not g["processes"]:
                    idle_count += 1
            if samples:
                node_util.add_metric([node], sum(g["util"] for g in samples) / len(samples))
            idle.add_metric([node], idle_count)
        yield from (util, mem, power, node_util, idle)

    # ---- /metrics/jobs -------------------------------------------------------------------
    def jobs(self) -> Iterator[Metric]:
        jobs = list(self.ctl.jobs.values())
        by_state = Counter(j.state for j in jobs)
        yield _gauge("slurm_jobs", "Total number of jobs", len(jobs))
        for suffix, doc, states in JOB_STATES:
            yield _gauge(f"slurm_jobs_{suffix}", doc, sum(by_state[s] for s in states))
        active = [j for j in jobs if j.state.active]
        yield _gauge("slurm_jobs_hold", "Number of jobs in Hold state",
                     sum(1 for j in jobs if j.state is JobState.PENDING and j.held))
        yield _gauge("slurm_jobs_finished", "Number of finished jobs",
                     sum(by_state[s] for s in FINISHED))
        yield _gauge("slurm_jobs_cpus_alloc", "Total number of Cpus allocated by jobs",
                     sum(j.alloc_cpus for j in active))
        yield _gauge("slurm_jobs_gpus_alloc", "Total number of GPUs allocated by jobs",
                     sum(j.alloc_gpus for j in active))
        yield _gauge("slurm_jobs_memory_alloc", "Total memory bytes allocated by jobs",
                     sum(j.alloc_mem for j in active) << 20)
        yield _gauge("slurm_jobs_nodes_alloc", "Total number of nodes allocated by jobs",
                     sum(len(j.nodes) for j in active))
        reasons = _gauge("corral_jobs_pending_reason", "Pending jobs by their typed reason",
                         labels=["reason"])
        why = self.ctl.pending_reasons
        counts = Counter(why[j.job_id].code.value if j.job_id in why else "None"
                         for j in self.ctl.pending.values())
        for reason, count in sorted(counts.items()):
            reasons.add_metric([str(reason)], count)
        yield reasons
        util = _gauge("corral_job_gpu_utilization_percent",
                      "Utilisation summed over the job's GPUs at the last sample",
                      labels=["jobid", "username", "account"])
        mem = _gauge("corral_job_gpu_memory_used_bytes",
                     "Memory in use on the job's GPUs at the last sample",
                     labels=["jobid", "username", "account"])
        for jid, per_node in sorted(self.book.job_gpu.items()):
            job = self.ctl.jobs.get(jid)
            if job is None:
                continue
            labels = [str(jid), job.user, job.account or ""]
            util.add_metric(labels, sum(u for u, _ in per_node.values()))
            mem.add_metric(labels, sum(m for _, m in per_node.values()))
        yield util
        yield mem

    # ---- /metrics/partitions -------------------------------------------------------------
    def partitions(self) -> Iterator[Metric]:
        parts = self.ctl.partitions
        yield _gauge("slurm_partitions", "Total number of partitions", len(parts))
        jobs_by: dict[str, Counter[JobState]] = {p: Counter() for p in parts}
        alloc: dict[str, list[int]] = {p: [0, 0, 0] for p in parts}
        for j in self.ctl.jobs.values():
            for p in (j.partition or "").split(","):
                if p in jobs_by:
                    jobs_by[p][j.state] += 1
                    if j.state.active:
                        a = alloc[p]
                        a[0] += j.alloc_cpus
                        a[1] += j.alloc_gpus
                        a[2] += j.alloc_mem << 20
                    break
        def fam(name: str, doc: str, get: Callable[[str], float]) -> GaugeMetricFamily:
            g = _gauge(f"slurm_partition_{name}", doc, labels=["partition"])
            for p in parts:
                g.add_metric([p], get(p))
            return g
        yield fam("jobs", "Number of jobs in this partition",
                  lambda p: sum(jobs_by[p].values()))
        for suffix, doc, states in JOB_STATES:
            yield fam(f"jobs_{suffix}", doc, _state_count(jobs_by, states))
        yield fam("jobs_cpus_alloc", "Total number of Cpus allocated by jobs",
                  lambda p: alloc[p][0])
        yield fam("jobs_gpus_alloc", "Total number of GPUs allocated by jobs",
                  lambda p: alloc[p][1])
        yield fam("jobs_memory_alloc", "Total memory bytes allocated by jobs",
                  lambda p: alloc[p][2])
        nodes = self.ctl.nodes

        def members(p: str) -> list[Any]:
            return [nodes[n] for n in parts[p].nodes if n in nodes]
        yield fam("cpus", "Partition total cpus", lambda p: sum(n.cpus for n in members(p)))
        yield fam("gpus", "Partition total gpus", lambda p: sum(n.gpus for n in members(p)))
        yield fam("nodes", "Partition total nodes", lambda p: len(members(p)))
        yield fam("nodes_cpus_alloc", "Number of allocated cpus",
                  lambda p: sum(n.alloc_cpus for n in members(p)))
        yield fam("nodes_cpus_idle", "Number of idle CPUs on all nodes",
                  lambda p: sum(max(0, n.cpus - n.alloc_cpus) for n in members(p)))
        yield fam("nodes_idle", "Nodes in Idle state",
                  lambda p: sum(1 for n in members(p) if n.state_name() == "IDLE"))
        yield fam("nodes_mixed", "Nodes in Mixed state",
                  lambda p: sum(1 for n in members(p) if n.state_name() == "MIXED"))
        yield fam("nodes_alloc", "Nodes allocated",
                  lambda p: sum(1 for n in members(p) if n.state_name() == "ALLOCATED"))
        yield fam("nodes_mem_alloc", "Amount of allocated memory of all nodes",
                  lambda p: sum(n.alloc_mem << 20 for n in members(p)))
        yield fam("nodes_mem_tot", "Total amount of memory of all nodes",
                  lambda p: sum(n.real_memory << 20 for n in members(p)))

    # ---- /metrics/jobs-users-accts --------------------------------------------------------
    def users_accounts(self) -> Iterator[Metric]:
        for prefix, label, key in (("user", "username", lambda j: j.user),
                                   ("account", "account", lambda j: j.account or "")):
            groups: dict[str, list[Any]] = {}
            for j in self.ctl.jobs.values():
                groups.setdefault(key(j), []).append(j)
            def fam(name: str, doc: str, get: Callable[[list[Any]], float],
                    prefix: str = prefix, label: str = label,
                    groups: dict[str, list[Any]] = groups) -> GaugeMetricFamily:
                g = _gauge(f"slurm_{prefix}_{name}", doc, labels=[label])
                for k, js in sorted(groups.items()):
                    g.add_metric([k], get(js))
                return g
            yield fam("jobs", "Total number of jobs", len)
            for suffix, doc, states in JOB_STATES:
                yield fam(f"jobs_{suffix}", doc, _in_states(states))
            yield fam("jobs_cpus_alloc", "Total number of Cpus allocated by jobs",
                      lambda js: sum(j.alloc_cpus for j in js if j.state.active))
            yield fam("jobs_gpus_alloc", "Total number of GPUs allocated by jobs",
                      lambda js: sum(j.alloc_gpus for j in js if j.state.active))
            yield fam("jobs_memory_alloc", "Total memory bytes allocated by jobs",
                      lambda js: sum(j.alloc_mem << 20 for j in js if j.state.active))
            yield fam("jobs_nodes_alloc", "Total number of nodes allocated by jobs",
                      lambda js: sum(len(j.nodes) for j in js if j.state.active))
            gutil = _gauge(f"corral_{prefix}_gpu_utilization_percent",
                           "Utilisation summed over the GPUs of its running jobs",
                           labels=[label])
            totals: dict[str, float] = {}
            for jid, per_node in self.book.job_gpu.items():
                job = self.ctl.jobs.get(jid)
                if job is not None:
                    totals[key(job)] = totals.get(key(job), 0.0) + sum(
                        u for u, _ in per_node.values())
            for k, v in sorted(totals.items()):
                gutil.add_metric([k], v)
            yield gutil

    # ---- /metrics/scheduler --------------------------------------------------------------
    def scheduler(self) -> Iterator[Metric]:
        s = self.sched.snapshot()
        mean = s["cycle_sum_us"] // s["cycles"] if s["cycles"] else 0
        for name, doc, value in [
                ("schedule_cycle_cnt", "Scheduling cycle count", s["cycles"]),
                ("schedule_cycle_last", "Last scheduling cycle time", s["cycle_last_us"]),
                ("schedule_cycle_max", "Max scheduling cycle time", s["cycle_max_us"]),
                ("schedule_cycle_tot", "Sum of scheduling cycle times", s["cycle_sum_us"]),
                ("sched_mean_cycle", "Mean scheduling cycle time", mean),
                ("schedule_queue_len", "Jobs pending queue length", s["queue_len"]),
                # Corral's backfill is a stage of each pass: its cycles are the passes
                ("bf_cycle_cnt", "Backfill cycle count", s["cycles"]),
                ("bf_cycle_last", "Last backfill cycle time", s["cycle_last_us"]),
                ("bf_cycle_max", "Max backfill cycle time", s["cycle_max_us"]),
                ("backfilled_jobs", "Total backfilled jobs since reset", s["jobs_backfilled"]),
                ("sdiag_jobs_submitted", "Jobs submitted since reset", s["jobs_submitted"]),
                ("sdiag_jobs_started", "Jobs started since reset", s["jobs_started"]),
                ("sdiag_jobs_completed", "Jobs completed since reset", s["jobs_completed"]),
                ("sdiag_jobs_canceled", "Jobs canceled since reset", s["jobs_canceled"]),
                ("sdiag_jobs_failed", "Jobs failed since reset", s["jobs_failed"]),
                ("sdiag_jobs_pending", "Jobs pending at timestamp", s["jobs_pending"]),
                ("sdiag_jobs_running", "Jobs running at timestamp", s["jobs_running"]),
                ("sdiag_job_states_ts", "Job states timestamp", int(s["time"])),
                ("sched_stats_timestamp", "Statistics snapshot timestamp", int(s["time"]))]:
            yield _gauge(f"slurm_{name}", doc, value)

    # ---- exposition -----------------------------------------------------------------------
    SECTIONS = ("nodes", "jobs", "partitions", "scheduler", "jobs-users-accts")

    def families(self, section: str) -> Iterable[Metric]:
        return {"nodes": self.nodes, "jobs": self.jobs, "partitions": self.partitions,
                "scheduler": self.scheduler, "jobs-users-accts": self.users_accounts}[section]()

    def render(self, section: str | None = None) -> bytes:
        sections = [section] if section else list(self.SECTIONS)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families(lambda: [m for s in sections for m in self.families(s)]))
        return generate_latest(registry)


def _state_count(jobs_by: dict[str, Counter[JobState]],
                 states: tuple[JobState, ...]) -> Callable[[str], float]:
    return lambda p: sum(jobs_by[p][x] for x in states)


def _in_states(states: tuple[JobState, ...]) -> Callable[[list[Any]], float]:
    return lambda js: sum(1 for j in js if j.state in states)


class _Families(Collector):
    def __init__(self, make: Callable[[], list[Metric]]) -> None:
        self.make = make

    def collect(self) -> Iterable[Metric]:
        return self.make()

    def describe(self) -> Iterable[Metric]:
        return []


def add_routes(app: web.Application, api: Api) -> None:
    """The metrics, sstat and sdiag routes; the metrics' TCP listener if configured."""
    metrics = Metrics(api.ctl, api.usage_book)
    r = app.router

    async def section(request: web.Request) -> web.Response:
        name = request.match_info.get("section")
        if name is not None and name not in Metrics.SECTIONS:
            raise web.HTTPNotFound()
        return web.Response(body=metrics.render(name), headers={"Content-Type": CONTENT_TYPE})

    async def sdiag(request: web.Request) -> web.Response:
        return web.json_response(metrics.sched.snapshot())

    async def step_usage(request: web.Request) -> web.Response:
        try:
            job_id = int(request.query.get("job", ""))
        except ValueError:
            raise web.HTTPBadRequest(text="job must be a job id") from None
        job = api.ctl.jobs.get(job_id)
        state = job.state.value if job is not None else None
        steps = api.usage_book.running_steps(job_id, request.query.get("step"))
        return web.json_response({"job_id": job_id, "state": state, "steps": steps})

    r.add_get("/metrics", section)
    r.add_get("/metrics/{section}", section)
    r.add_get("/v1/sdiag", sdiag)
    r.add_get("/v1/usage", step_usage)
    listen = api.ctl.config.options.get("CorralMetricsListen", "").strip()
    if listen:
        host, _, port = listen.rpartition(":")
        tcp = web.Application()
        tcp.router.add_get("/metrics", section)
        tcp.router.add_get("/metrics/{section}", section)
        runner = web.AppRunner(tcp, access_log=None)

        async def start(_app: web.Application) -> None:
            await runner.setup()
            await web.TCPSite(runner, host or "127.0.0.1", int(port)).start()
            log.info("metrics on http://%s:%s/metrics", host or "127.0.0.1", port)

        async def stop(_app: web.Application) -> None:
            await runner.cleanup()

        app.on_startup.append(start)
        app.on_cleanup.append(stop)
