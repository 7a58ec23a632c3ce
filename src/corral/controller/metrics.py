"""Prometheus metrics under Slurm's names, `sstat`'s and `sdiag`'s routes.

The routes of Slurm's OpenMetrics endpoint (Slurm 25.11, `MetricsType=metrics/openmetrics`):
`/metrics/nodes`, `/metrics/jobs`, `/metrics/partitions`, `/metrics/scheduler`,
`/metrics/jobs-users-accts`, with Slurm's metric names, labels and HELP text for every series
Corral can fill, plus `corral_` series Slurm lacks (GPU utilisation and memory per node, GPU,
job, user and account; allocated GPUs that are idle; pending jobs by reason; node health;
the start-estimate error, controller.estimates).  Everything comes from memory, on the event
loop between passes: job counts per group are kept from the typed job events
(controller.jobs), and each route's text from pieces (per node, group, GPU node, job) that
are written anew only when what they show changed, kept by family as bytes — a route
with no change is answered with the bytes of the scrape before, and the combined `/metrics`
joins the routes' kept pieces once.  The sdiag counters are derived from the same events.

Served on the controller's socket, and over plain HTTP on `CorralMetricsListen=[HOST:]PORT`
(HOST 127.0.0.1 unless given) for a Prometheus server.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from itertools import compress, repeat
from operator import attrgetter, is_not, itemgetter, ne
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from aiohttp import web

from corral.controller.errors import SlurmError
from corral.controller.estimates import StartEstimates
from corral.controller.jobs import JobEvent, JobEventKind
from corral.controller.metrics_gpus import GpuRoute
from corral.controller.reclaim import reclaimer
from corral.controller.usage import UsageBook
from corral.exposition import CONTENT_TYPE, Family, expose
from corral.exposition import escape_label as _label
from corral.exposition import format_value as _value
from corral.model.job import JobState
from corral.model.reclaim import IDLE_GPU_UTIL

if TYPE_CHECKING:
    from corral.controller.server import Api
    from corral.controller.state import Controller

log = logging.getLogger("corral.controller")

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
_UTIL = itemgetter("util")


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
        elif ev.kind is JobEventKind.UNSTARTED:  # a start taken back (its commit failed)
            c["started"] -= 1

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


class JobAgg:
    """Counts of a group of jobs (the cluster, a partition, a user, an account).  `version`
    grows at each change of the counts: a scrape re-renders only the groups that changed."""

    __slots__ = ("jobs", "states", "held", "finished", "cpus", "gpus", "mem", "nodes",
                 "version")

    def __init__(self) -> None:
        self.jobs = self.held = self.finished = self.cpus = self.gpus = self.mem = self.nodes = 0
        self.version = 0
        self.states = [0] * len(JOB_STATES)


STATE_SLOT = {st: i for i, (_s, _d, states) in enumerate(JOB_STATES) for st in states}


class JobCounts:
    """Job counts per group, kept from the job events (controller.jobs): the cluster (""),
    each partition ("p:NAME"), user ("u:NAME") and account ("a:NAME").  A scrape reads them
    without looking at every job.  Jobs dropped from memory (MinJobAge) or loaded without an
    event are caught up when the table's size no longer matches (`reconcile`).  `generation`
    grows at every change."""

    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.groups: dict[str, JobAgg] = {"": JobAgg()}
        self.kinds: dict[str, dict[str, JobAgg]] = {"p:": {}, "u:": {}, "a:": {}}  # by name
        self.generation = 0
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
        self.generation += 1
        for k in keys:
            a = self.groups.get(k)
            if a is None:
                a = self.groups[k] = JobAgg()
                if k:
                    self.kinds[k[:2]][k[2:]] = a
            a.version += 1
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

    def view(self, prefix: str, held: list[Any] | None = None) -> dict[str, JobAgg]:
        """The groups of one kind ("p:", "u:", "a:"; "" for the cluster), named, with the
        held jobs (`held`: the pending jobs held now, if the caller has them) counted now
        (holding is not a state change)."""
        self.reconcile()
        if not prefix:
            out = {"": self.groups[""]}
        else:
            out = {k: a for k, a in self.kinds[prefix].items() if a.jobs}
        for a in out.values():
            a.held = 0
        if held is None:
            held = [j for j in self.ctl.pending.values() if j.held]
        at = KIND_AT.get(prefix)
        for j in held:
            k = "" if at is None else self._keys(j)[at][2:]
            if k in out:
                out[k].held += 1
        return out


KIND_AT = {"p:": 1, "u:": 2, "a:": 3}  # a group kind's place in JobCounts._keys


def _header(name: str, doc: str) -> str:
    doc = doc.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {name} {doc}\n# TYPE {name} gauge\n"


def _num(x: float) -> str:
    return str(x) if type(x) is int else _value(x)


def _scalar(name: str, doc: str, value: float) -> str:
    return f"{_header(name, doc)}{name} {_num(value)}\n"


def job_family_specs(prefix: str) -> list[tuple[str, str, Callable[[JobAgg], float]]]:
    """Slurm's job-count gauges of a group kind: (name, HELP, value of a group)."""
    part = prefix == "slurm_partition_"
    out: list[tuple[str, str, Callable[[JobAgg], float]]] = [
        (f"{prefix}jobs", "Number of jobs in this partition" if part else "Total number of jobs",
         lambda a: a.jobs)]
    for slot, (suffix, doc, _states) in enumerate(JOB_STATES):
        out.append((f"{prefix}jobs_{suffix}", doc, lambda a, i=slot: a.states[i]))  # type: ignore[misc]
    out.append((f"{prefix}jobs_hold", "Number of jobs in Hold state", lambda a: a.held))
    out.append((f"{prefix}jobs_finished", "Number of jobs in Finished" if part
                else "Number of finished jobs", lambda a: a.finished))
    if not part:  # Slurm has no partition_jobs_nodes_alloc
        out.append((f"{prefix}jobs_nodes_alloc", "Total number of nodes allocated by jobs",
                    lambda a: a.nodes))
    out += [(f"{prefix}jobs_cpus_alloc", "Total number of Cpus allocated by jobs", lambda a: a.cpus),
            (f"{prefix}jobs_gpus_alloc", "Total number of GPUs allocated by jobs", lambda a: a.gpus),
            (f"{prefix}jobs_memory_alloc", "Total memory bytes allocated by jobs",
             lambda a: a.mem << 20)]
    return out


def job_families(prefix: str, label: str | None, groups: dict[str, JobAgg]) -> Iterator[Family]:
    """Slurm's job-count gauges for each group (`label` None: the one cluster-wide group)."""
    labels = (label,) if label else ()
    keys = sorted(groups)
    for name, doc, get in job_family_specs(prefix):
        f = Family(name, doc, labels, None if label else get(groups[""]))
        if label:
            f.rows = [((k,), get(groups[k])) for k in keys]
        yield f


def _values_of(specs: list[tuple[str, str, Callable[[JobAgg], float]]]
               ) -> Callable[[JobAgg], list[int]]:
    """A group's values of every family of `specs`, in one call (job_family_specs' order:
    jobs, each state, held, finished, [nodes,] cpus, gpus, memory in bytes)."""
    with_nodes = len(specs) == len(JOB_STATES) + 7

    def values(a: JobAgg) -> list[int]:
        if with_nodes:
            return [a.jobs, *a.states, a.held, a.finished, a.nodes, a.cpus, a.gpus, a.mem << 20]
        return [a.jobs, *a.states, a.held, a.finished, a.cpus, a.gpus, a.mem << 20]
    # what each family's spec gives, checked once against the one call
    probe = JobAgg()
    probe.jobs, probe.held, probe.finished, probe.nodes, probe.cpus, probe.gpus, probe.mem = \
        range(2, 9)
    probe.states = list(range(10, 10 + len(JOB_STATES)))
    assert values(probe) == [spec[2](probe) for spec in specs]
    return values


class GroupLines:
    """The job-count families of one group kind.  Each family keeps its lines in group-name
    order (a column) and its text as bytes: a group whose counts changed (JobAgg.version)
    rewrites the lines whose value changed, and only the families with a changed line are
    joined again (a submission changes two of a user's twenty lines)."""

    def __init__(self, prefix: str, label: str) -> None:
        self.specs = job_family_specs(prefix)
        self.all_values = _values_of(self.specs)
        self.headers = [_header(name, doc) for name, doc, _get in self.specs]
        self.label = label
        self.pos: dict[str, int] = {}  # group -> its place in name order
        self.keys: list[tuple[int, int]] = []  # per place: (version, held) rendered
        self.values: list[list[int]] = []  # per place: each family's value rendered
        self.heads: list[list[str]] = []  # per place: each family's name and label part
        self.cols: list[list[str]] = [[] for _ in self.specs]  # family -> lines in order
        self.families: list[bytes] = []  # family -> its text

    def _lay_out(self, groups: dict[str, JobAgg]) -> None:
        names = sorted(groups)
        self.pos = {name: i for i, name in enumerate(names)}
        self.keys = [(groups[n].version, groups[n].held) for n in names]
        self.values = [self.all_values(groups[n]) for n in names]
        self.heads = [[f'{spec[0]}{{{self.label}="{_label(n)}"}} ' for spec in self.specs]
                      for n in names]
        self.cols = [[f"{head[i]}{_num(vals[i])}\n"
                      for head, vals in zip(self.heads, self.values, strict=True)]
                     for i in range(len(self.specs))]

    def render(self, groups: dict[str, JobAgg]) -> tuple[list[bytes], bool]:
        """Each family's text, and whether any changed since the last call."""
        if groups.keys() != self.pos.keys() or not self.families:
            self._lay_out(groups)
            dirty: set[int] | range = range(len(self.specs))
        else:
            dirty = set()
            keys, values, heads, cols, all_values = (self.keys, self.values, self.heads,
                                                     self.cols, self.all_values)
            for name, at in self.pos.items():
                a = groups[name]
                key = (a.version, a.held)
                if key == keys[at]:
                    continue
                keys[at] = key
                new = all_values(a)
                old = values[at]
                if new == old:
                    continue
                values[at] = new
                head = heads[at]
                for i in _changed(new, old):
                    cols[i][at] = f"{head[i]}{_num(new[i])}\n"
                    dirty.add(i)
        if not dirty:
            return self.families, False
        if not self.families:
            self.families = [b""] * len(self.specs)
        for i in dirty:
            self.families[i] = (self.headers[i] + "".join(self.cols[i])).encode()
        return self.families, True


# the per-node families of /metrics/nodes, in order: (name, HELP)
NODE_SERIES: list[tuple[str, str]] = [
    ("slurm_node_cpus", "Total number of cpus in the node"),
    ("slurm_node_cpus_alloc", "Allocated cpus in the node"),
    ("slurm_node_cpus_idle", "Idle cpus in the node"),
    ("slurm_node_gpus", "Total number of GPUs in the node"),
    ("slurm_node_gpus_alloc", "Number of GPUs currently allocated by jobs on the node"),
    ("slurm_node_memory_alloc_bytes", "Bytes allocated to jobs in the node"),
    ("slurm_node_memory_bytes", "Total memory in bytes of the node"),
    ("slurm_node_memory_free_bytes", "Free memory in bytes of the node"),
]
NODE_SERIES_CORRAL: list[tuple[str, str]] = [
    ("corral_node_gpu_utilization_percent",
     "Mean utilisation of the node's GPUs at the last sample"),
    ("corral_node_gpus_alloc_idle",
     "GPUs allocated to a job that showed no utilisation and no process at the last sample"),
    ("corral_node_health_failing",
     "1 for each health check (source: program or gpu) the node fails now, with the "
     "verdict's reason"),
    ("corral_node_health_drained",
     "1 if a failed health check drained the node and it has not been resumed since"),
]
NODE_STATE_SERIES = [
    ("ALLOCATED", "alloc", "Number of nodes in Allocated state"),
    ("DOWN", "down", "Number of nodes in Down state"),
    ("drain", "drain", "Number of nodes with Drain flag"),
    ("drained", "drained", "Number of drained nodes"),
    ("draining", "draining", "Number of nodes in draining condition (Drain state with active jobs)"),
    ("IDLE", "idle", "Number of nodes in Idle state"),
    ("MIXED", "mixed", "Number of nodes in Mixed state"),
    ("noresp", "noresp", "Number of nodes with Not Responding flag")]


# what a node's allocation and state lines are made of (with the GPUs it has allocated)
_ALLOC_OF = attrgetter("cpus", "alloc_cpus", "gpus", "alloc_mem", "real_memory", "admin_state",
                       "registered", "responding", "job_count", "exclusive_job")
_ALLOC_GPUS = attrgetter("alloc_gpus")
_FREE_MEM = attrgetter("free_mem")
_CODE_VALUE = attrgetter("code._value_")
_NO_REASON = SimpleNamespace(code=SimpleNamespace(_value_=None))  # a pending job without one
_NO_HEALTH: tuple[tuple[tuple[str, str], ...], bool] = ((), False)


class _Same:
    """An object in a cache key, compared by identity (not by its possibly deep ==)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


def _changed(new: list[Any], old: list[Any]) -> list[int]:
    """The places where two lists of the same length differ (C loops: walked at each scrape)."""
    if new == old:
        return []
    return list(compress(range(len(new)), map(ne, new, old)))


class NodeLine:
    """One node's lines of the per-node families, in four parts each kept with what it was
    rendered from: the allocation and state (changed by jobs and admins), the free memory
    (each heartbeat), the GPU sample (each JobAcctGatherFrequency) and the health verdicts.
    A heartbeat re-renders one line of the node, not twelve.  `at`: the node's place in
    name order, where its lines stand in the route's columns (and what each part was
    rendered from, in Metrics' key columns)."""

    __slots__ = ("label", "at", "alloc", "state", "sums", "busy", "free", "gpu", "health_key",
                 "health", "failing")

    def __init__(self, name: str) -> None:
        self.label = f'{{node="{_label(name)}"}} '
        self.at = -1
        self.alloc: list[str] = []
        self.state = ""
        self.sums: tuple[int, ...] = ()
        self.busy = False
        self.free = ""
        self.gpu: list[str] = ["", ""]
        self.health_key: tuple[Any, ...] | None = None
        self.health: list[str] = ["", ""]
        self.failing = False


class OwnerGpu:
    """GPU utilisation summed per user and per account over their running jobs' GPUs at the
    last sample, kept from the samples as they come: a node's sample updates the jobs on
    that node (`on_sample`), a job's start and end add and remove it, and a scrape sums only
    the owners whose jobs changed."""

    def __init__(self, ctl: Controller, book: UsageBook) -> None:
        self.ctl, self.book = ctl, book
        self.owner: dict[int, tuple[str, str]] = {}  # job -> ("u:USER", "a:ACCOUNT")
        self.job_util: dict[int, float] = {}  # job -> utilisation summed over its GPUs
        self.members: dict[str, dict[int, float]] = {}  # owner -> job -> its utilisation
        self.dirty: set[str] = set()
        self.lines: dict[str, str] = {}  # owner -> its line
        self.heads: dict[str, str] = {}  # owner -> its line up to the value
        self.order: dict[str, list[str]] = {}  # "u:"/"a:" -> the owners, sorted
        self.text: tuple[str, str] | None = None
        for job in list(ctl.running.values()):
            self.track(job)
        for jid in list(book.job_gpu):
            self.update(jid)

    def track(self, job: Any) -> None:
        """A job started: its owners (the book knows the nodes where it holds GPUs)."""
        self.owner[job.job_id] = ("u:" + job.user, "a:" + (job.account or ""))

    def forget(self, job_id: int) -> None:
        """A job ended or went back to pending."""
        self._set(job_id, None)
        self.owner.pop(job_id, None)

    def _set(self, job_id: int, util: float | None) -> None:
        who = self.owner.get(job_id)
        if who is None:
            return
        for key in who:
            m = self.members.setdefault(key, {})
            if util is None:
                m.pop(job_id, None)
            else:
                m[job_id] = util
            self.dirty.add(key)
        if util is None:
            self.job_util.pop(job_id, None)
        else:
            self.job_util[job_id] = util

    def update(self, job_id: int) -> None:
        per = self.book.job_gpu.get(job_id)
        if per is None or job_id not in self.owner:
            return
        util = sum([u for u, _m in per.values()])
        if self.job_util.get(job_id) != util:
            self._set(job_id, util)

    def on_sample(self, node: str) -> None:
        for job_id in self.book.gpu_jobs.get(node, ()):
            self.update(job_id)

    FAMILIES = (("u:", "corral_user_gpu_utilization_percent", "username"),
                ("a:", "corral_account_gpu_utilization_percent", "account"))
    NAMES = {tag: (name, label) for tag, name, label in FAMILIES}

    def render(self) -> tuple[str, str]:
        """The two families' text: per user, per account.  An owner's line is written anew
        when its jobs' use changed; the owners are sorted again when one comes or goes."""
        if self.text is not None and not self.dirty:
            return self.text
        lines, heads = self.lines, self.heads
        came_or_went = self.text is None
        changed = False
        for key in self.dirty:
            m = self.members.get(key)
            if m:
                total = sum(m.values())
                head = heads.get(key)
                if head is None:
                    name, label = self.NAMES[key[:2]]
                    head = heads[key] = f'{name}{{{label}="{_label(key[2:])}"}} '
                if type(total) is float and 0 <= total < 1e15 and total.is_integer():
                    # whole percents (NVML's): as repr writes it, without two conversions
                    line = f"{head}{int(total)}.0\n"
                else:  # rounded: the sums' last bits do not depend on the order jobs came in
                    line = f"{head}{_value(round(total, 6))}\n"
                old = lines.get(key)
                if old != line:
                    came_or_went = came_or_went or old is None
                    lines[key] = line
                    changed = True
            else:
                came_or_went = came_or_went or key in lines
                lines.pop(key, None)
                heads.pop(key, None)
                self.members.pop(key, None)
        self.dirty.clear()
        if not changed and not came_or_went and self.text is not None:
            return self.text
        if came_or_went:
            self.order = {tag: sorted(k for k in lines if k.startswith(tag))
                          for tag, _n, _l in self.FAMILIES}
        out = [_header(name, "Utilisation summed over the GPUs of its running jobs")
               + "".join([lines[k] for k in self.order[tag]])
               for tag, name, _label in self.FAMILIES]
        self.text = (out[0], out[1])
        return self.text


class Metrics:
    """The routes' text.  Each route is rendered from per-node and per-group pieces that are
    re-rendered only when what they show changed (a node's figures, a group's counts, a
    node's GPU sample), kept in columns (one list of lines per family, in order) so that a
    changed family is joined in one C call, and each family's text is kept as bytes: a
    route is the list of its families' bytes (`chunks`), and the combined `/metrics` joins
    the routes' chunks once."""

    def __init__(self, ctl: Controller, book: UsageBook) -> None:
        self.ctl = ctl
        self.book = book
        self.sched = SchedCounters(ctl)
        self.counts = JobCounts(ctl)
        self.estimates: StartEstimates = ctl.estimates  # kept by the controller (the web too)
        ctl.table.subscribe(self._on_job)
        self._nodes: dict[str, NodeLine] = {}
        self._walk: list[tuple[str, NodeLine]] = []  # the nodes in name order
        self._node_set: set[str] = set()
        self._node_set_order: list[str] = []  # the same, in name order
        self.alloc_generation = 0  # grows when a node's allocation or state changes
        self._dirty: set[str] = set()  # node parts changed since /metrics/nodes was joined
        # /metrics/nodes' lines by family, each a list in node order
        self._alloc_cols: list[list[str]] = []
        self._free_col: list[str] = []
        self._gpu_cols: list[list[str]] = []
        self._health_cols: list[list[str]] = []
        self._node_text: dict[str, bytes] = {}  # /metrics/nodes' text by part
        # what each node's parts were rendered from, in node order (compared in C loops)
        self._alloc_keys: list[Any] = []
        self._alloc_held: list[Any] = []  # copies of each node's alloc_gpus as its alloc part shows
        self._free_keys: list[Any] = []
        self._gpu_keys: list[Any] = []  # the sample each node's GPU part shows
        self._gpu_held: list[Any] = []  # and the GPUs held then
        self._health_count = 0  # nodes whose health part shows a failure or a drain
        self._health_unknown = False  # nodes whose health part was never rendered
        self._users = GroupLines("slurm_user_", "username")
        self._accounts = GroupLines("slurm_account_", "account")
        self._partitions = GroupLines("slurm_partition_", "partition")
        self._kept: dict[str, tuple[Any, bytes]] = {}  # route -> (what it showed, its bytes)
        self._memo: dict[str, Any] | None = None  # what one render computes once for all routes
        self._joined: dict[str | None, tuple[list[bytes], bytes]] = {}  # route -> (pieces, text)
        self.gpu_route = GpuRoute(ctl, book)
        ctl.table.subscribe(self.gpu_route.on_job)
        ctl.cluster.subscribers.append(self.gpu_route.on_node)
        book.sample_listeners.append(self._on_gpu_sample)
        self.owner_gpu = OwnerGpu(ctl, book)
        self._partition_nodes: tuple[Any, bytes] | None = None

    def _on_job(self, ev: JobEvent) -> None:
        if ev.kind is JobEventKind.ENDED:
            self.book.job_ended(ev.job.job_id)
        if ev.kind is JobEventKind.STARTED:
            self.owner_gpu.track(ev.job)
        elif ev.kind in (JobEventKind.ENDED, JobEventKind.REQUEUED, JobEventKind.UNSTARTED):
            self.owner_gpu.forget(ev.job.job_id)

    def _on_gpu_sample(self, name: str) -> None:
        """A node's GPUs were sampled: its lines are written now, while the samples are at
        hand, not by the next scrape (which finds them written).  Only for routes scraped
        before: nothing is rendered for a route no one reads."""
        try:
            self.owner_gpu.on_sample(name)
            self.gpu_route.on_sample(name)
            n = self.ctl.nodes.get(name)
            entry = self.book.gpus.get(name)
            ln = self._nodes.get(name)
            if n is None or entry is None or ln is None or ln.at < 0:
                return
            if self._gpu_keys[ln.at] is not entry or self._gpu_held[ln.at] != n.alloc_gpus:
                self._gpu_part(ln, n, entry)
        except Exception:  # the metrics must never stop the agents' reports
            log.exception("metrics: GPU sample of %s", name)

    def _cached(self, route: str, key: Any, make: Callable[[], bytes]) -> bytes:
        kept = self._kept.get(route)
        if kept is not None and kept[0] == key:
            return kept[1]
        body = make()
        self._kept[route] = (key, body)
        return body

    def _held(self) -> list[Any]:
        """The pending jobs held now (once per render: holding is not an event)."""
        memo = self._memo
        if memo is not None and "held" in memo:
            held: list[Any] = memo["held"]
            return held
        held = [j for j in self.ctl.pending.values() if j.held]
        if memo is not None:
            memo["held"] = held
        return held

    # ---- per-node pieces ------------------------------------------------------------------
    def _alloc_part(self, ln: NodeLine, n: Any) -> None:
        lab = ln.label
        idle_cpus = max(0, n.cpus - n.alloc_cpus)
        values = (n.cpus, n.alloc_cpus, idle_cpus, n.gpus, len(n.alloc_gpus),
                  n.alloc_mem << 20, n.real_memory << 20)
        ln.alloc = [f"{name}{lab}{v}\n" for (name, _doc), v in zip(NODE_SERIES, values,
                                                                   strict=False)]
        st = ln.state = n.state_name()
        ln.busy = n.job_count > 0
        ln.sums = (n.cpus, n.gpus, 1, n.alloc_cpus, idle_cpus, int(st == "IDLE"),
                   int(st == "MIXED"), int(st == "ALLOCATED"), n.alloc_mem << 20,
                   n.real_memory << 20)
        for col, line in zip(self._alloc_cols, ln.alloc, strict=True):
            col[ln.at] = line
        self._dirty.add("alloc")

    def _gpu_part(self, ln: NodeLine, n: Any, entry: Any) -> None:
        held = n.alloc_gpus
        self._gpu_keys[ln.at], self._gpu_held[ln.at] = entry, list(held)
        util = idle = ""
        if entry is not None:
            lab = ln.label
            samples = entry[1]
            if samples:  # this runs for every node at every sample: C loops where it can
                mean = sum(map(_UTIL, samples)) / len(samples)
                util = f"corral_node_gpu_utilization_percent{lab}{_value(mean)}\n"
            count = 0
            if held:  # a plain loop, the rare condition first: 7x a generator's speed
                for g in samples:
                    if g["util"] < IDLE_GPU_UTIL and not g["processes"] and g["index"] in held:
                        count += 1
            idle = f"corral_node_gpus_alloc_idle{lab}{count}\n"
        if ln.gpu != [util, idle]:
            ln.gpu = [util, idle]
            self._gpu_cols[0][ln.at], self._gpu_cols[1][ln.at] = util, idle
            self._dirty.add("gpu")

    def _health_part(self, ln: NodeLine, name: str, fails: tuple[tuple[str, str], ...],
                     drained: bool) -> None:
        failing = "".join(
            f'corral_node_health_failing{{node="{_label(name)}",source="{_label(src)}",'
            f'reason="{_label(why)}"}} 1\n' for src, why in fails)
        ln.health = [failing, f"corral_node_health_drained{ln.label}{int(drained)}\n"]
        ln.failing = bool(fails)
        self._health_cols[0][ln.at], self._health_cols[1][ln.at] = ln.health
        self._dirty.add("health")

    def _lay_out_nodes(self, nodes: dict[str, Any]) -> None:
        """The nodes came or went: their places in name order, every column anew."""
        names = sorted(nodes)
        self._nodes = {k: v for k, v in self._nodes.items() if k in nodes}
        self._walk = [(name, self._nodes.get(name) or NodeLine(name)) for name in names]
        self._nodes = dict(self._walk)
        self._node_set = set(names)
        self._node_set_order = names
        for at, (_name, ln) in enumerate(self._walk):
            ln.at = at
        lines = [ln for _name, ln in self._walk]
        self._alloc_cols = [[ln.alloc[i] if ln.alloc else "" for ln in lines]
                            for i in range(len(NODE_SERIES) - 1)]
        self._free_col = [ln.free for ln in lines]
        self._gpu_cols = [[ln.gpu[i] for ln in lines] for i in range(2)]
        self._health_cols = [[ln.health[i] for ln in lines] for i in range(2)]
        self._alloc_keys = [None] * len(lines)  # every part is rendered at this walk
        self._alloc_held = [None] * len(lines)
        self._free_keys = [-1] * len(lines)
        self._gpu_keys = [self] * len(lines)  # not a sample
        self._gpu_held = [None] * len(lines)
        self._health_count = sum(1 for ln in lines if ln.health_key not in (None, _NO_HEALTH))
        self._health_unknown = True  # the new nodes' health parts: at the next full walk
        self.alloc_generation += 1
        self._dirty.update(("alloc", "free", "gpu", "health"))

    def _refresh_nodes(self, full: bool = True) -> None:
        """Every node's pieces, re-rendering the parts whose figures changed (not `full`:
        the allocation parts only, all the partitions need).  `alloc_generation` grows at a
        change of a node's allocation or state (what the partitions' sums are made of).  Once per render (the nodes are walked once for
        /metrics/nodes and /metrics/partitions)."""
        memo = self._memo
        if memo is not None and (memo.get("walked") or (not full and "walked" in memo)):
            return
        nodes = self.ctl.nodes
        health = getattr(self.ctl, "health", None)
        failing = health.failing if health is not None else {}
        drained = health.drained if health is not None else set()
        if nodes.keys() != self._node_set:
            self._lay_out_nodes(nodes)
        walk = self._walk
        objs = list(map(nodes.__getitem__, self._node_set_order))
        held = list(map(_ALLOC_GPUS, objs))  # compared with the copies kept, not copied
        keys = list(map(_ALLOC_OF, objs))
        changed = set(_changed(keys, self._alloc_keys))
        changed.update(_changed(held, self._alloc_held))
        for at in changed:
            self._alloc_held[at] = list(held[at])
            self._alloc_part(walk[at][1], objs[at])
        if changed:
            self._alloc_keys = keys
            self.alloc_generation += 1
        if full:
            frees = list(map(_FREE_MEM, objs))
            changed_free = _changed(frees, self._free_keys)
            if changed_free:
                col = self._free_col
                for at in changed_free:
                    free = frees[at]
                    ln = walk[at][1]
                    ln.free = "" if free is None else \
                        f"slurm_node_memory_free_bytes{ln.label}{free << 20}\n"
                    col[at] = ln.free
                self._free_keys = frees
                self._dirty.add("free")
            sample_of: Callable[[str], Any] = self.book.gpus.get
            entries = list(map(sample_of, self._node_set_order))
            redo = set(compress(range(len(entries)), map(is_not, entries, self._gpu_keys)))
            redo.update(_changed(held, self._gpu_held))
            for at in redo:
                self._gpu_part(walk[at][1], objs[at], entries[at])
            if failing or drained or self._health_count or self._health_unknown:
                self._health_unknown = False
                for name, ln in walk:
                    f = failing.get(name)
                    hkey = (tuple(sorted(f.items())) if f else (), name in drained)
                    if hkey != ln.health_key:
                        self._health_count += (hkey != _NO_HEALTH) - (
                            ln.health_key not in (None, _NO_HEALTH))
                        ln.health_key = hkey
                        self._health_part(ln, name, *hkey)
        if memo is not None:
            memo["walked"] = full

    # ---- /metrics/nodes ------------------------------------------------------------------
    def nodes_text(self) -> bytes:
        return b"".join(self.nodes_chunks())

    def nodes_chunks(self) -> list[bytes]:
        """The route's text by part; a part is joined anew only when a line of it changed."""
        self._refresh_nodes()
        dirty, kept = self._dirty, self._node_text
        if "alloc" in dirty or "alloc" not in kept:
            out: list[str] = []
            for (name, doc), col in zip(NODE_SERIES, self._alloc_cols, strict=False):
                out.append(_header(name, doc))
                out.append("".join(col))
            kept["alloc"] = "".join(out).encode()
            states: Counter[str] = Counter()
            for (long, busy), count in Counter(
                    [(ln.state, ln.busy) for _name, ln in self._walk]).items():
                states[long.split("+")[0].rstrip("*")] += count
                if "DRAIN" in long:
                    states["drain"] += count
                    states["draining" if busy else "drained"] += count
                if long.endswith("*"):
                    states["noresp"] += count
            kept["states"] = (_scalar("slurm_nodes", "Total number of nodes", len(self._walk))
                              + "".join(_scalar(f"slurm_nodes_{name}", doc, states[key])
                                        for key, name, doc in NODE_STATE_SERIES)).encode()
        if "free" in dirty or "free" not in kept:
            kept["free"] = (_header(*NODE_SERIES[-1]) + "".join(self._free_col)).encode()
        if "gpu" in dirty or "gpu" not in kept:
            kept["gpu"] = "".join(_header(*NODE_SERIES_CORRAL[i]) + "".join(col)
                                  for i, col in enumerate(self._gpu_cols)).encode()
        if "health" in dirty or "health" not in kept:
            kept["health"] = ("".join(_header(*NODE_SERIES_CORRAL[2 + i]) + "".join(col)
                                      for i, col in enumerate(self._health_cols)) + _scalar(
                "corral_nodes_health_failing", "Number of nodes failing a health check now",
                sum(1 for _name, ln in self._walk if ln.failing))).encode()
        dirty.clear()
        return [kept["alloc"], kept["free"], kept["states"], kept["gpu"], kept["health"]]

    # ---- /metrics/gpus (Corral's) ----------------------------------------------------------
    def gpus_text(self) -> bytes:
        """Per GPU and per job: Corral's series, on their own route (they are many), kept
        between scrapes by controller.metrics_gpus."""
        return self.gpu_route.render()

    # ---- /metrics/jobs -------------------------------------------------------------------
    def jobs_text(self) -> bytes:
        ctl = self.ctl
        held = self._held()
        self.counts.reconcile()
        # a pass rewrites the reasons: the passes counted, and the last decision itself (a
        # pass run directly, as the in-process harness runs them, is not counted)
        key = (self.counts.generation, tuple(j.job_id for j in held), ctl.sched_passes,
               len(ctl.pending_reasons), _Same(ctl.last_decision))
        return self._cached("jobs", key, lambda: expose(self.jobs(held)))

    def jobs(self, held: list[Any] | None = None) -> Iterator[Family]:
        yield from job_families("slurm_", None, self.counts.view("", held))
        reasons = Family("corral_jobs_pending_reason", "Pending jobs by their typed reason",
                         ("reason",))
        pending = self.ctl.pending
        # C loops: 10,000 pending jobs are counted at each pass's change
        # by the codes' values: an Enum's hash is a Python call, a str's is not
        codes: Counter[str | None] = Counter(map(_CODE_VALUE, map(
            self.ctl.pending_reasons.get, pending, repeat(_NO_REASON, len(pending)))))
        counts = Counter({"None" if code is None else code: c for code, c in codes.items()})
        reasons.rows = [((r,), c) for r, c in sorted(counts.items())]
        yield reasons

    # ---- /metrics/partitions -------------------------------------------------------------
    PARTITION_SERIES = [
        ("cpus", "Partition total cpus"), ("gpus", "Partition total gpus"),
        ("nodes", "Partition total nodes"),
        ("nodes_cpus_alloc", "Number of allocated cpus"),
        ("nodes_cpus_idle", "Number of idle CPUs on all nodes"),
        ("nodes_idle", "Nodes in Idle state"), ("nodes_mixed", "Nodes in Mixed state"),
        ("nodes_alloc", "Nodes allocated"),
        ("nodes_mem_alloc", "Amount of allocated memory of all nodes"),
        ("nodes_mem_tot", "Total amount of memory of all nodes")]

    def partitions_text(self) -> bytes:
        return b"".join(self.partitions_chunks())

    def partitions_chunks(self) -> list[bytes]:
        self._refresh_nodes(full=False)
        parts = self.ctl.partitions
        counted = self.counts.view("p:", self._held())
        groups = {p: counted.get(p) or JobAgg() for p in parts}
        families, _changed = self._partitions.render(groups)
        layout = tuple((p, tuple(part.nodes)) for p, part in parts.items())
        key = (self.alloc_generation, layout)
        if self._partition_nodes is None or self._partition_nodes[0] != key:
            self._partition_nodes = (key, self._partition_sums().encode())
        head = self._cached("partitions", len(parts), lambda: _scalar(
            "slurm_partitions", "Total number of partitions", len(parts)).encode())
        return [head, *families, self._partition_nodes[1]]

    def _partition_sums(self) -> str:
        """The partitions' node figures: sums of their nodes' (kept by _refresh_nodes)."""
        parts = self.ctl.partitions
        kept = self._nodes
        sums: dict[str, list[int]] = {}
        for p, part in parts.items():
            member = [kept[name].sums for name in part.nodes if name in kept]
            sums[p] = [sum(col) for col in zip(*member, strict=True)] if member \
                else [0] * len(self.PARTITION_SERIES)
        out = []
        for i, (name, doc) in enumerate(self.PARTITION_SERIES):
            out.append(_header(f"slurm_partition_{name}", doc))
            out.extend([f'slurm_partition_{name}{{partition="{_label(p)}"}} {sums[p][i]}\n'
                        for p in parts])
        return "".join(out)

    # ---- /metrics/jobs-users-accts --------------------------------------------------------
    def users_accounts_text(self) -> bytes:
        return b"".join(self.users_accounts_chunks())

    def users_accounts_chunks(self) -> list[bytes]:
        held = self._held()
        users, _user_changed = self._users.render(self.counts.view("u:", held))
        accounts, _acct_changed = self._accounts.render(self.counts.view("a:", held))
        by_user, by_account = self.owner_gpu.render()
        owners = self._cached("owners", (by_user, by_account), lambda: by_user.encode())
        owners_account = self._cached("owners-account", (by_user, by_account),
                                      lambda: by_account.encode())
        reclaim = expose(self.reclaim_families())
        return [*users, owners, *accounts, owners_account, reclaim]

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

    def estimates_text(self) -> str:
        """The start-estimate error (controller.estimates) as a Prometheus summary: quantiles
        of |actual start - first estimate| over the last starts, count and sum since the
        controller started; and the signed median as a gauge."""
        est = self.estimates
        name = "corral_start_estimate_error_seconds"
        out = [f"# HELP {name} Absolute difference between a job's actual start and its first "
               f"estimated start (backfill's plan), over the last {est.errors.maxlen} starts\n"
               f"# TYPE {name} summary\n"]
        for q, v in est.quantiles().items():
            out.append(f'{name}{{quantile="{q}"}} {_value(v)}\n')
        out.append(f"{name}_count {est.count}\n{name}_sum {_value(est.abs_sum)}\n")
        out.append(_scalar("corral_start_estimate_bias_seconds",
                           "Median of actual start minus first estimated start over the last "
                           "starts (positive: jobs start later than estimated)", est.bias()))
        return "".join(out)

    def stages(self) -> Iterator[Family]:
        """Each stage's time in the last pass that decided something (Decision.stage_seconds:
        eligibility, priority, limits, backfill, preemption, decision)."""
        fam = Family("corral_sched_stage_seconds",
                     "Time of each stage of the last scheduling pass", ("stage",))
        last = self.ctl.last_decision
        for stage, secs in (last.stage_seconds.items() if last is not None else ()):
            fam.add((stage,), secs)
        yield fam

    def scheduler_text(self) -> bytes:
        return expose(self.scheduler()) + expose(self.stages()) + self.estimates_text().encode()

    # ---- exposition -----------------------------------------------------------------------
    SECTIONS = ("nodes", "jobs", "partitions", "scheduler", "jobs-users-accts", "gpus")

    def chunks(self, section: str | None = None) -> list[bytes]:
        """One route's text (None: all of them) as the kept pieces it is made of, in order."""
        make: dict[str, Callable[[], list[bytes]]] = {
            "nodes": self.nodes_chunks, "jobs": lambda: [self.jobs_text()],
            "partitions": self.partitions_chunks, "scheduler": lambda: [self.scheduler_text()],
            "jobs-users-accts": self.users_accounts_chunks, "gpus": self.gpu_route.chunks}
        self._memo = {}
        try:
            out: list[bytes] = []
            for s in [section] if section else self.SECTIONS:
                out += make[s]()
            return out
        finally:
            self._memo = None

    def render(self, section: str | None = None) -> bytes:
        """One route's text (the Prometheus text format 0.0.4), or all of them (None): the
        pieces joined once, the bytes of the scrape before when no piece changed."""
        pieces = self.chunks(section)
        kept = self._joined.pop(section, None)
        if kept is not None and kept[0] == pieces:
            self._joined[section] = kept
            return kept[1]
        # the text before is let go first: malloc gives its pages to the new one, where a
        # fresh 3.6 MB would cost a page fault every 4 KiB (~900: 2-3 ms of a slow machine)
        kept = None
        body = b"".join(pieces)
        self._joined[section] = (pieces, body)
        return body


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
