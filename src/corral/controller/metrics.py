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
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from aiohttp import web

from corral.controller.errors import SlurmError
from corral.controller.jobs import JobEvent, JobEventKind
from corral.controller.reclaim import reclaimer
from corral.controller.usage import UsageBook
from corral.model.job import JobState
from corral.model.reclaim import IDLE_GPU_UTIL

if TYPE_CHECKING:
    from corral.controller.server import Api
    from corral.controller.state import Controller

log = logging.getLogger("corral.controller")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

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


class Family:
    """One gauge: its name, HELP text, label names and rows (label values, value)."""

    __slots__ = ("name", "doc", "labels", "rows")

    def __init__(self, name: str, doc: str, labels: tuple[str, ...] = (),
                 value: float | None = None) -> None:
        self.name, self.doc, self.labels = name, doc, labels
        self.rows: list[tuple[tuple[str, ...], float]] = [] if labels else [((), value or 0)]

    def add(self, values: tuple[str, ...], value: float) -> None:
        self.rows.append((values, value))


def _label(v: str) -> str:
    if "\\" in v or '"' in v or "\n" in v:
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return v


def _value(x: float) -> str:
    if isinstance(x, int):
        return str(int(x))  # a bool as 0/1
    return repr(float(x)) if math.isfinite(x) else ("NaN" if x != x else ("+Inf" if x > 0 else "-Inf"))


def expose(families: Iterable[Family]) -> bytes:
    """The Prometheus text format (version 0.0.4), as prometheus-client's generate_latest
    writes it for gauges, at a fraction of its cost per sample (tests check both agree)."""
    out: list[str] = []
    for f in families:
        name = f.name
        doc = f.doc.replace("\\", "\\\\").replace("\n", "\\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} gauge\n")
        if not f.labels:
            out.append(f"{name} {_value(f.rows[0][1])}\n")
        elif len(f.labels) == 1:
            pre = f'{name}{{{f.labels[0]}="'
            out.extend([f'{pre}{_label(v[0])}"}} {x if type(x) is int else _value(x)}\n'
                        for v, x in f.rows])
        else:
            keys = f.labels
            out.extend([name + "{" + ",".join(f'{k}="{_label(v)}"' for k, v in zip(keys, vs, strict=True))
                        + f"}} {_value(x)}\n" for vs, x in f.rows])
    return "".join(out).encode()


class JobAgg:
    """Counts of a group of jobs (the cluster, a partition, a user, an account)."""

    __slots__ = ("jobs", "states", "held", "finished", "cpus", "gpus", "mem", "nodes")

    def __init__(self) -> None:
        self.jobs = self.held = self.finished = self.cpus = self.gpus = self.mem = self.nodes = 0
        self.states = [0] * len(JOB_STATES)


STATE_SLOT = {st: i for i, (_s, _d, states) in enumerate(JOB_STATES) for st in states}


class JobCounts:
    """Job counts per group, kept from the job events (controller.jobs): the cluster (""),
    each partition ("p:NAME"), user ("u:NAME") and account ("a:NAME").  A scrape reads them
    without looking at every job.  Jobs dropped from memory (MinJobAge) or loaded without an
    event are caught up when the table's size no longer matches (`reconcile`)."""

    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.groups: dict[str, JobAgg] = {"": JobAgg()}
        # job id -> (its groups, its state, what it adds while active) as counted
        self.counted: dict[int, tuple[tuple[str, ...], JobState, tuple[int, int, int, int]]] = {}
        for job in list(ctl.jobs.values()):
            self._add(job)
        ctl.table.subscribe(self.on_event)

    @staticmethod
    def _keys(job: Any) -> tuple[str, ...]:
        return ("", "p:" + (job.partition or "").split(",")[0], "u:" + job.user,
                "a:" + (job.account or ""))

    def _apply(self, keys: tuple[str, ...], state: JobState,
               alloc: tuple[int, int, int, int], sign: int) -> None:
        slot = STATE_SLOT.get(state)
        finished = state in FINISHED
        for k in keys:
            a = self.groups.get(k)
            if a is None:
                a = self.groups[k] = JobAgg()
            a.jobs += sign
            if slot is not None:
                a.states[slot] += sign
            if finished:
                a.finished += sign
            if state.active:
                a.cpus += sign * alloc[0]
                a.gpus += sign * alloc[1]
                a.mem += sign * alloc[2]
                a.nodes += sign * alloc[3]

    def _add(self, job: Any) -> None:
        alloc = (job.alloc_cpus, job.alloc_gpus, job.alloc_mem, len(job.nodes)) \
            if job.state.active else (0, 0, 0, 0)
        keys = self._keys(job)
        self.counted[job.job_id] = (keys, job.state, alloc)
        self._apply(keys, job.state, alloc, 1)

    def _remove(self, job_id: int) -> None:
        counted = self.counted.pop(job_id, None)
        if counted is not None:
            self._apply(*counted, -1)

    def on_event(self, ev: JobEvent) -> None:
        self._remove(ev.job.job_id)
        self._add(ev.job)

    def reconcile(self) -> None:
        jobs = self.ctl.jobs
        if len(jobs) == len(self.counted):
            return
        for jid in [j for j in self.counted if j not in jobs]:
            self._remove(jid)
        for jid, job in jobs.items():
            if jid not in self.counted:
                self._add(job)

    def view(self, prefix: str) -> dict[str, JobAgg]:
        """The groups of one kind ("p:", "u:", "a:"; "" for the cluster), named, with the
        held jobs counted now (holding is not a state change)."""
        self.reconcile()
        if not prefix:
            out = {"": self.groups[""]}
        else:
            out = {k[len(prefix):]: a for k, a in self.groups.items()
                   if k.startswith(prefix) and a.jobs}
        for a in out.values():
            a.held = 0
        held = [j for j in self.ctl.pending.values() if j.held]
        for j in held:
            k = "" if not prefix else dict(zip(("p:", "u:", "a:"), self._keys(j)[1:],
                                               strict=True))[prefix][len(prefix):]
            if k in out:
                out[k].held += 1
        return out


def job_families(prefix: str, label: str | None, groups: dict[str, JobAgg]) -> Iterator[Family]:
    """Slurm's job-count gauges for each group (`label` None: the one cluster-wide group)."""
    labels = (label,) if label else ()
    keys = sorted(groups)

    def fam(name: str, doc: str, get: Callable[[JobAgg], float]) -> Family:
        f = Family(f"{prefix}{name}", doc, labels, None if label else get(groups[""]))
        if label:
            f.rows = [((k,), get(groups[k])) for k in keys]
        return f
    yield fam("jobs", "Total number of jobs" if prefix != "slurm_partition_" else
              "Number of jobs in this partition", lambda a: a.jobs)
    for slot, (suffix, doc, _states) in enumerate(JOB_STATES):
        yield fam(f"jobs_{suffix}", doc, lambda a, i=slot: a.states[i])  # type: ignore[misc]
    yield fam("jobs_hold", "Number of jobs in Hold state", lambda a: a.held)
    yield fam("jobs_finished", "Number of jobs in Finished" if prefix == "slurm_partition_"
              else "Number of finished jobs", lambda a: a.finished)
    if prefix != "slurm_partition_":  # Slurm has no partition_jobs_nodes_alloc
        yield fam("jobs_nodes_alloc", "Total number of nodes allocated by jobs",
                  lambda a: a.nodes)
    yield fam("jobs_cpus_alloc", "Total number of Cpus allocated by jobs", lambda a: a.cpus)
    yield fam("jobs_gpus_alloc", "Total number of GPUs allocated by jobs", lambda a: a.gpus)
    yield fam("jobs_memory_alloc", "Total memory bytes allocated by jobs",
              lambda a: a.mem << 20)


class Metrics:
    def __init__(self, ctl: Controller, book: UsageBook) -> None:
        self.ctl = ctl
        self.book = book
        self.sched = SchedCounters(ctl)
        self.counts = JobCounts(ctl)
        ctl.table.subscribe(self._forget_ended)

    def _forget_ended(self, ev: JobEvent) -> None:
        if ev.kind is JobEventKind.ENDED:
            self.book.job_ended(ev.job.job_id)

    # ---- /metrics/nodes ------------------------------------------------------------------
    def nodes(self) -> Iterator[Family]:
        nodes = sorted(self.ctl.nodes.values(), key=lambda n: n.name)
        per: list[tuple[str, str, Callable[[Any], float]]] = [
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
            f = Family(name, doc, ("node",))
            f.rows = [((n.name,), get(n)) for n in nodes]
            yield f
        free = Family("slurm_node_memory_free_bytes", "Free memory in bytes of the node",
                      ("node",))
        free.rows = [((n.name,), n.free_mem << 20) for n in nodes if n.free_mem is not None]
        yield free
        states: Counter[str] = Counter()
        for n in nodes:
            long = n.state_name()
            states[long.split("+")[0].rstrip("*")] += 1
            if "DRAIN" in long:
                states["drain"] += 1
                states["draining" if n.job_count else "drained"] += 1
            if long.endswith("*"):
                states["noresp"] += 1
        yield Family("slurm_nodes", "Total number of nodes", value=len(nodes))
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
            yield Family(f"slurm_nodes_{name}", doc, value=states[key])
        node_util = Family("corral_node_gpu_utilization_percent",
                           "Mean utilisation of the node's GPUs at the last sample", ("node",))
        idle = Family("corral_node_gpus_alloc_idle",
                      "GPUs allocated to a job that showed no utilisation and no process at "
                      "the last sample", ("node",))
        for node, (_t, samples) in sorted(self.book.gpus.items()):
            found = self.ctl.nodes.get(node)
            held = set(found.alloc_gpus) if found is not None else set()
            if samples:
                node_util.add((node,), sum(g["util"] for g in samples) / len(samples))
            idle.add((node,), sum(1 for g in samples if g["index"] in held
                                  and g["util"] < IDLE_GPU_UTIL and not g["processes"]))
        yield node_util
        yield idle

    # ---- /metrics/gpus (Corral's) ----------------------------------------------------------
    def gpus(self) -> Iterator[Family]:
        """Per GPU and per job: Corral's series, on their own route (they are many)."""
        util = Family("corral_gpu_utilization_percent",
                      "GPU utilisation at the last sample (NVML), per node and GPU",
                      ("node", "gpu"))
        mem = Family("corral_gpu_memory_used_bytes", "GPU memory in use at the last sample",
                     ("node", "gpu"))
        power = Family("corral_gpu_power_watts", "GPU power draw at the last sample",
                       ("node", "gpu"))
        alloc = Family("corral_gpu_allocated", "1 if a job holds the GPU, else 0",
                       ("node", "gpu"))
        for node, (_t, samples) in sorted(self.book.gpus.items()):
            n = self.ctl.nodes.get(node)
            held = set(n.alloc_gpus) if n is not None else set()
            for g in samples:
                labels = (node, str(g["index"]))
                util.add(labels, g["util"])
                mem.add(labels, g["memory_used"])
                if g["power_w"] is not None:
                    power.add(labels, g["power_w"])
                alloc.add(labels, int(g["index"] in held))
        yield from (util, mem, power, alloc)
        jutil = Family("corral_job_gpu_utilization_percent",
                       "Utilisation summed over the job's GPUs at the last sample",
                       ("jobid", "username", "account"))
        jmem = Family("corral_job_gpu_memory_used_bytes",
                      "Memory in use on the job's GPUs at the last sample",
                      ("jobid", "username", "account"))
        for jid, per_node in sorted(self.book.job_gpu.items()):
            job = self.ctl.jobs.get(jid)
            if job is None:
                continue
            who = (str(jid), job.user, job.account or "")
            jutil.add(who, sum(u for u, _ in per_node.values()))
            jmem.add(who, sum(m for _, m in per_node.values()))
        yield jutil
        yield jmem

    # ---- /metrics/jobs -------------------------------------------------------------------
    def jobs(self) -> Iterator[Family]:
        yield from job_families("slurm_", None, self.counts.view(""))
        reasons = Family("corral_jobs_pending_reason", "Pending jobs by their typed reason",
                         ("reason",))
        why = self.ctl.pending_reasons
        counts = Counter(why[j.job_id].code.value if j.job_id in why else "None"
                         for j in self.ctl.pending.values())
        reasons.rows = [((str(r),), c) for r, c in sorted(counts.items())]
        yield reasons

    # ---- /metrics/partitions -------------------------------------------------------------
    def partitions(self) -> Iterator[Family]:
        parts = self.ctl.partitions
        yield Family("slurm_partitions", "Total number of partitions", value=len(parts))
        counted = self.counts.view("p:")
        groups = {p: counted.get(p) or JobAgg() for p in parts}
        yield from job_families("slurm_partition_", "partition", groups)
        nodes = self.ctl.nodes
        sums: dict[str, list[float]] = {}
        for p, part in parts.items():
            acc = sums[p] = [0.0] * 10
            for name in part.nodes:
                n = nodes.get(name)
                if n is None:
                    continue
                st = n.state_name()
                acc[0] += n.cpus
                acc[1] += n.gpus
                acc[2] += 1
                acc[3] += n.alloc_cpus
                acc[4] += max(0, n.cpus - n.alloc_cpus)
                acc[5] += st == "IDLE"
                acc[6] += st == "MIXED"
                acc[7] += st == "ALLOCATED"
                acc[8] += n.alloc_mem << 20
                acc[9] += n.real_memory << 20
        for i, (name, doc) in enumerate([
                ("cpus", "Partition total cpus"), ("gpus", "Partition total gpus"),
                ("nodes", "Partition total nodes"),
                ("nodes_cpus_alloc", "Number of allocated cpus"),
                ("nodes_cpus_idle", "Number of idle CPUs on all nodes"),
                ("nodes_idle", "Nodes in Idle state"), ("nodes_mixed", "Nodes in Mixed state"),
                ("nodes_alloc", "Nodes allocated"),
                ("nodes_mem_alloc", "Amount of allocated memory of all nodes"),
                ("nodes_mem_tot", "Total amount of memory of all nodes")]):
            f = Family(f"slurm_partition_{name}", doc, ("partition",))
            f.rows = [((p,), int(sums[p][i])) for p in parts]
            yield f

    # ---- /metrics/jobs-users-accts --------------------------------------------------------
    def users_accounts(self) -> Iterator[Family]:
        by_user: dict[str, float] = {}
        by_account: dict[str, float] = {}
        jobs = self.ctl.jobs
        for jid, per_node in self.book.job_gpu.items():
            job = jobs.get(jid)
            if job is not None:
                util = sum(u for u, _ in per_node.values())
                by_user[job.user] = by_user.get(job.user, 0.0) + util
                acct = job.account or ""
                by_account[acct] = by_account.get(acct, 0.0) + util
        for prefix, label, totals in (("user", "username", by_user),
                                      ("account", "account", by_account)):
            yield from job_families(f"slurm_{prefix}_", label, self.counts.view(prefix[0] + ":"))
            gutil = Family(f"corral_{prefix}_gpu_utilization_percent",
                           "Utilisation summed over the GPUs of its running jobs", (label,))
            gutil.rows = [((k,), v) for k, v in sorted(totals.items())]
            yield gutil
        yield from self.reclaim_families()

    def reclaim_families(self) -> Iterator[Family]:
        """Idle-GPU reclaim (controller/reclaim.py): counters since the controller started."""
        rec = reclaimer(self.ctl)
        labels = ("username", "account")
        hours = Family("corral_gpu_hours_reclaimed_total",
                       "GPU-hours of allocations ended by idle-GPU reclaim (GPUs x time idle "
                       "before the action)", labels)
        hours.rows = [(k, v) for k, v in sorted(rec.hours.items())]
        count = Family("corral_gpu_reclaims_total", "Jobs requeued or cancelled by idle-GPU "
                       "reclaim", (*labels, "action"))
        count.rows = [(k, v) for k, v in sorted(rec.reclaims.items())]
        notices = Family("corral_gpu_idle_notices_total",
                         "Idle-GPU notices sent to job owners", labels)
        notices.rows = [(k, v) for k, v in sorted(rec.notices.items())]
        yield hours
        yield count
        yield notices

    # ---- /metrics/scheduler --------------------------------------------------------------
    def scheduler(self) -> Iterator[Family]:
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
            yield Family(f"slurm_{name}", doc, value=value)

    # ---- exposition -----------------------------------------------------------------------
    SECTIONS = ("nodes", "jobs", "partitions", "scheduler", "jobs-users-accts", "gpus")

    def families(self, section: str) -> Iterable[Family]:
        return {"nodes": self.nodes, "jobs": self.jobs, "partitions": self.partitions,
                "scheduler": self.scheduler, "jobs-users-accts": self.users_accounts,
                "gpus": self.gpus}[section]()

    def render(self, section: str | None = None) -> bytes:
        sections = [section] if section else list(self.SECTIONS)
        return expose(f for s in sections for f in self.families(s))


def add_routes(app: web.Application, api: Api) -> None:
    """The metrics, sstat and sdiag routes; the metrics' TCP listener if configured."""
    from corral.controller.server import peer_identity  # server imports this module

    metrics = Metrics(api.ctl, api.usage_book)
    r = app.router

    async def section(request: web.Request) -> web.Response:
        name = request.match_info.get("section")
        if name is not None and name not in Metrics.SECTIONS:
            raise web.HTTPNotFound()
        return web.Response(body=metrics.render(name), headers={"Content-Type": CONTENT_TYPE})

    async def section_on_socket(request: web.Request) -> web.Response:
        peer_identity(request, api.ctl)  # a private cluster's metrics are its owner's
        return await section(request)

    async def sdiag(request: web.Request) -> web.Response:
        peer_identity(request, api.ctl)
        return web.json_response(metrics.sched.snapshot())

    async def step_usage(request: web.Request) -> web.Response:
        who = peer_identity(request, api.ctl)
        try:
            job_id = int(request.query.get("job", ""))
        except ValueError:
            raise SlurmError("Invalid job id specified", 0) from None
        job = api.ctl.jobs.get(job_id)
        # as slurmd answers a step's statistics: to the job's owner and operators only
        if job is not None and not who.operator and who.uid != job.uid:
            raise SlurmError("Access/permission denied", 2002, 403)
        state = job.state.value if job is not None else None
        steps = api.usage_book.running_steps(job_id, request.query.get("step"))
        return web.json_response({"job_id": job_id, "state": state, "steps": steps})

    r.add_get("/metrics", section_on_socket)
    r.add_get("/metrics/{section}", section_on_socket)
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
