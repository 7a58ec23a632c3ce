"""A discrete-event simulator on the production core.

The controller's core (lifecycle, scheduling pipeline, periodic duties) and its submission
use case run in virtual time over an in-memory store; this engine, not the shell, executes
the core's effects (`Controller(..., execute=)`), so nothing is written and there are no
agents:

- a trace job is submitted at its submit time through the submission use case;
- passes run when the production cadence (controller/cadence.py) arms them, on this
  engine's event queue (`SimPasses`); the periodic tick runs the duty list
  (controller/duties.py), so the core decides time limits (TIMEOUT) as in production;
- a `Launch` effect is the runtime model: the job ends at start + run time, COMPLETED, or
  at its time limit, TIMEOUT (the step supervisor's part); no launch record is built;
- a `Control` (cancel, requeue, time limit) stops the job at once (the trace has no
  notion of a job that traps SIGTERM); a preemption victim with a GraceTime is killed by
  the core's tick at the end of it (the conservative model: signals change nothing, so it
  runs to the end of its grace time, unless its own end comes first, and its preemptor
  starts then); a `suspend` control (PreemptMode=SUSPEND) stops its run where it is and
  `resume` continues it, so its end, and its TIMEOUT, come as much later as it was
  suspended;
- every start and end is read from the job events among the effects.

Shortcuts keep month-long traces fast, all off with `exact=True`: a pass or a tick
that nothing could have changed since the last one (no job event since) is skipped (it
could only re-age priorities); a pass after submissions alone is skipped when the free GPUs
and CPUs add up to less than each new job asks (it could start nothing: the last pass
started what the free resources allowed; not with preemption on, where a new job may
start on a victim's resources); a pass after an end is skipped when no pending job fits in
what is free and none would become eligible in it (`_may_use_freed`: a necessary condition
for a start, so the schedule is the same; not with preemption or suspended jobs); the ticks
before the next event or the next end of a GraceTime that nothing changed are jumped over
(`_next_tick`); the agents never fall silent (SlurmdTimeout=0); and a pass plans no job whose hold could hold back no
later start (`ClusterSnapshot.starts_only`: the plans, which nothing reads here, are partial).
A pass takes `pass_cost` seconds of virtual time (0 by default), which is what the
cadence's coalescing sees.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import time
from collections.abc import Callable, Sequence
from copy import copy
from dataclasses import dataclass, field
from typing import Any

from corral.controller.assoc_authz import Caller
from corral.controller.core.effects import Control, Effect, Launch, ReadGoneJobs, ScheduleSoon
from corral.controller.duties import periodic_duties
from corral.controller.errors import SlurmError
from corral.controller.identity import Identity
from corral.controller.jobs import JobEvent, JobEventKind
from corral.controller.state import Controller
from corral.model.config import ClusterConfig, preempt_settings
from corral.model.job import Job, JobState
from corral.sim.trace import TraceJob
from corral.store.base import Store
from corral.store.memory import MemoryStore

EPOCH = 1_700_000_000.0  # virtual time of the trace's 0 (any fixed date)
SCRIPT = "#!/bin/sh\n"

# at the same instant: submissions, then ends (the node reports a job that ran to its limit
# before the controller's tick would), then the pass, then the tick
_SUBMIT, _END, _PASS, _TICK = 0, 1, 2, 3


def run_now(coro: Any) -> Any:
    """Run a use case's coroutine that never waits (the simulator executes the effects itself: nothing is written) to its end,
    without an event loop."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("a use case waited for I/O in the simulator")


@dataclass(slots=True)
class JobRecord:
    """One trace job as the simulation ran it."""

    index: int  # in the trace
    submit: float  # virtual seconds from the trace's start
    gpus: int
    cpus: int
    run_time: float
    job_id: int | None = None  # None: the submission was refused
    start: float | None = None  # of its last run
    end: float | None = None
    state: str = "PENDING"
    refused: str | None = None
    # earlier runs, each ended by a requeue (preemption): (start, end); and the spans it
    # was suspended (its resources lent to a preemptor): (from, to)
    stopped: list[tuple[float, float]] = field(default_factory=list)
    paused: list[tuple[float, float]] = field(default_factory=list)
    suspended_at: float | None = None

    def holding(self, until: float) -> list[tuple[float, float]]:
        """The spans in which the job held its resources: every run (the last one to its
        end, or `until` if it has none), less the spans it was suspended."""
        runs = list(self.stopped)
        if self.start is not None:
            runs.append((self.start, self.end if self.end is not None else until))
        gaps = list(self.paused)
        if self.suspended_at is not None:
            gaps.append((self.suspended_at, until))
        if not gaps:
            return runs
        out = []
        for a, b in runs:
            for g0, g1 in sorted(gaps):
                if g1 <= a or g0 >= b:
                    continue
                if g0 > a:
                    out.append((a, g0))
                a = max(a, g1)
            if b > a:
                out.append((a, b))
        return out


@dataclass(slots=True)
class SimResult:
    records: list[JobRecord]
    total_gpus: int
    total_cpus: int
    passes: int
    wall_seconds: float
    starts: list[int] = field(default_factory=list)  # trace indexes in start order


class SimPasses:
    """The cadence's driver on the engine's event queue, in virtual time."""

    def __init__(self, engine: Simulator) -> None:
        self.engine = engine

    def now(self) -> float:
        return self.engine.now

    def arm(self, at: float, run: Callable[[], None]) -> None:
        self.engine.push(at, _PASS, run)

    def pass_seconds(self, measured: float) -> float:
        return self.engine.pass_cost


def sim_config(config: ClusterConfig, exact: bool) -> ClusterConfig:
    out = copy(config)
    out.options = dict(config.options)
    if not exact:
        out.options["SlurmdTimeout"] = "0"  # simulated agents never fall silent
    return out


class Simulator:
    def __init__(self, config: ClusterConfig, jobs: Sequence[TraceJob], *,
                 pass_cost: float = 0.0, exact: bool = False,
                 store: Store | None = None, accounts: str | None = None) -> None:
        self.now = EPOCH
        self.pass_cost = pass_cost
        self.exact = exact
        self.trace = jobs
        self.queue: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        # the effects the simulation acts on, by type (effects are final dataclasses)
        self._handlers: dict[type, Callable[[Any], None]] = {
            JobEvent: self._event, Launch: self._launch, ScheduleSoon: self._schedule_soon,
            Control: self._control, ReadGoneJobs: self._gone}
        self.ctl = Controller(sim_config(config, exact), store or MemoryStore(),
                              clock=lambda: self.now, pass_driver=SimPasses(self),
                              execute=self._execute)
        self.records = [JobRecord(i, (EPOCH + j.submit) - EPOCH, j.gpus, j.cpus, j.run_time)
                        for i, j in enumerate(jobs)]
        self.by_job: dict[int, JobRecord] = {}
        self.starts: list[int] = []
        self.changed = True  # a job event since the last pass
        self.freed = True  # resources freed (a job ended or was requeued) since the last pass
        self.arrived: list[JobRecord] = []  # submitted since the last pass
        self.ticked = True  # a job event since the last tick
        self._who: dict[str, Identity] = {}
        # the pending end of each job's run: (its event's token, when, its state); and the
        # suspended runs: (seconds left to that end, its state)
        self._due: dict[int, tuple[int, float, str]] = {}
        self._end_tokens = itertools.count()
        self._paused: dict[int, tuple[float, str]] = {}
        self._gpus_per_node = max((n.gpus for n in self.ctl.nodes.values()), default=0)
        self._cpus_per_node = max((n.cpus for n in self.ctl.nodes.values()), default=1)
        kind, mode, _ = preempt_settings(config.options)
        self._preempts = kind != "preempt/none" and mode != "off"
        # only the starts are read: no plan that could hold back no start is made
        self.ctl.core.passes.starts_only = not exact
        names = list(self.ctl.nodes)
        self.ctl.agent_registered(names, lambda msg: None, {"start_time": self.now}, [])
        # trace jobs whose QoS the cluster does not define: submitted with the default one
        self.unknown_qos = 0
        if accounts is not None:
            self.load_accounts(accounts)

    def load_accounts(self, text: str) -> None:
        """A `sacctmgr dump` flat file (Slurm's or Corral's) as the simulated cluster's
        accounting: its QoS (priorities, Preempt, PreemptMode, GraceTime), accounts, users,
        fairshare and limits.  Its `Cluster -` line may name another cluster (the one it
        was dumped from): it is read as this one's.  A bad file raises SlurmError."""
        cluster = self.ctl.accounts.cluster
        lines = []
        for line in text.splitlines():
            head, sep, rest = line.partition(" - ")
            if sep and head.strip().lower() == "cluster":
                _, colon, opts = rest.partition(":")
                line = f"Cluster - '{cluster}'" + (colon + opts if colon else "")
            lines.append(line)
        self.ctl.accounts.load(Caller("root", operator=True), "\n".join(lines) + "\n")

    # ---- the event queue ----------------------------------------------------------------
    def push(self, at: float, kind: int, what: Any) -> None:
        self._seq += 1
        heapq.heappush(self.queue, (at, kind, self._seq, what))

    def run(self) -> SimResult:
        # one log line per job event is the controller's, not the simulation's
        events_log = logging.getLogger("corral.controller.events")
        was = events_log.disabled
        events_log.disabled = True
        try:
            return self._run()
        finally:
            events_log.disabled = was

    def _run(self) -> SimResult:
        t0 = time.perf_counter()
        for i, j in enumerate(self.trace):
            self.push(EPOCH + j.submit, _SUBMIT, i)
        if self.trace:
            self.push(EPOCH + self.trace[0].submit, _TICK, None)
        queue = self.queue
        while queue:
            at, kind, _, what = heapq.heappop(queue)
            self.now = at
            if kind == _SUBMIT:
                self._submit(what)
            elif kind == _END:
                self._end(*what)
            elif kind == _PASS:
                self._pass(what)
            elif queue:  # (running jobs have their ends queued: nothing else can change)
                self._tick()
        nodes = self.ctl.nodes.values()
        return SimResult(self.records, sum(n.gpus for n in nodes), sum(n.cpus for n in nodes),
                         self.ctl.sched_passes, time.perf_counter() - t0, self.starts)

    def _pass(self, run: Callable[[], None]) -> None:
        if self.exact or (self.changed and (self._may_use_freed() if self.freed
                                            else self._may_start(self.arrived))):
            run()
            # the pass's own starts change nothing a pass would decide again
            self.changed = self.freed = False
            self.arrived = []
            return
        cadence = self.ctl.cadence  # nothing to decide: the pass is skipped
        cadence.started(self.now)
        cadence.finished(self.now, 0.0)

    def _may_start(self, arrived: list[JobRecord]) -> bool:
        """Whether a pass could start anything when only submissions happened since the last
        one: the last pass started what the free resources allowed, so only a new job can
        start, and only if the free GPUs and CPUs add up to what it asks (a necessary
        condition: a pass it fails would start nothing)."""
        if not arrived:
            return False
        if self._preempts:  # [quality] a new job may start on a victim's resources
            return True
        gpus = cpus = 0
        for n in self.ctl.nodes.values():
            if n.usable:
                gpus += n.gpus - len(n.alloc_gpus)
                cpus += n.cpus - n.alloc_cpus
        return any(r.gpus <= gpus and r.cpus <= cpus for r in arrived)

    def _may_use_freed(self) -> bool:
        """Whether a pass could change anything after resources were freed: not when no
        pending job fits in what is free now (a necessary condition, whatever happened
        before: a start needs free resources, without preemption or lent resources), and
        every pending job's eligible time is already set (the pass would set it)."""
        core = self.ctl.core
        pending = core.pending
        if not pending:
            return False
        if self._preempts or core.cluster.loans:  # a job may start on a victim's resources
            return True
        free = self._free_resources()
        return any(job.eligible_time is None or self._fits(job, *free)
                   for job in pending.values())

    def _free_resources(self) -> tuple[int, int, list[int]]:
        """Free GPUs and CPUs of the usable nodes, and how many nodes have at least g free
        GPUs, for each g."""
        gpus = cpus = 0
        at_least = [0] * (self._gpus_per_node + 1)
        for n in self.ctl.nodes.values():
            if n.usable:
                g = n.gpus - len(n.alloc_gpus)
                c = n.cpus - n.alloc_cpus
                gpus += g
                cpus += c
                if c > 0:
                    at_least[max(0, min(g, self._gpus_per_node))] += 1
        for g in range(len(at_least) - 2, -1, -1):
            at_least[g] += at_least[g + 1]
        return gpus, cpus, at_least

    @staticmethod
    def _fits(job: Job, gpus: int, cpus: int, at_least: list[int]) -> bool:
        """A necessary condition for `job` to start on free resources: its GPUs and CPUs
        fit in the free totals, and enough nodes have the GPUs it asks per node."""
        if job.num_tasks * job.cpus_per_task > cpus or max(
                job.gpus, job.gpus_per_node * job.num_nodes,
                job.gpus_per_task * job.num_tasks) > gpus:
            return False
        per_node = job.gpus_per_node
        if per_node <= 0:
            return True
        return per_node < len(at_least) and at_least[per_node] >= job.num_nodes

    def _tick(self) -> None:
        if self.ticked or self.exact or self._grace_over():
            self.ticked = False
            if self.exact:  # the agents heartbeat
                self.ctl.agent_contact(list(self.ctl.agent_senders))
            periodic_duties(self.ctl, self.now)
        self.push(self._next_tick(), _TICK, None)

    def _next_tick(self) -> float:
        """When the next tick that can do anything runs: ticks before the next event would
        find nothing changed and do nothing, so the first one at or after it (the same
        times, added up tick by tick)."""
        next_tick = self.ctl.cadence.next_tick
        at = next_tick(self.now)
        if not self.ticked and not self.exact and self.queue:
            upto = self.queue[0][0]
            deadlines = self.ctl.core.lifecycle.preempt_deadlines
            if deadlines:  # the tick that kills a preempted job at the end of its grace
                upto = min(upto, min(deadlines.values()))
            while at < upto:
                at = next_tick(at)
        return at

    def _grace_over(self) -> bool:
        """Whether a preempted job's GraceTime is over: the tick's duties kill it."""
        return any(at <= self.now for at in self.ctl.core.lifecycle.preempt_deadlines.values())

    # ---- the workload -------------------------------------------------------------------
    def who(self, user: str) -> Identity:
        who = self._who.get(user)
        if who is None:
            uid = 10_000 + len(self._who)
            who = self._who[user] = Identity(uid, uid, user, False)
        return who

    def spec(self, j: TraceJob) -> dict[str, Any]:
        spec: dict[str, Any] = {"work_dir": "/", "time_limit": max(1, math.ceil(j.time_limit)),
                                "name": "sim"}
        per_node = self._gpus_per_node
        if j.gpus and per_node and j.gpus > per_node:
            nodes = -(-j.gpus // per_node)
            spec.update(num_nodes=nodes, num_tasks=nodes, gpus_per_node=per_node,
                        cpus_per_task=max(1, -(-j.cpus // nodes)))
            if j.mem_mb:
                spec["mem_per_node"] = max(1, -(-j.mem_mb // nodes))
        elif j.gpus:
            spec.update(num_nodes=1, num_tasks=1, gpus_per_node=j.gpus, cpus_per_task=j.cpus)
            if j.mem_mb:
                spec["mem_per_node"] = j.mem_mb
        else:  # CPU jobs (SWF): one task per processor, spread as Slurm spreads them
            spec.update(num_tasks=j.cpus, cpus_per_task=1)
            if j.mem_mb:
                spec["mem_per_cpu"] = max(1, -(-j.mem_mb // j.cpus))
        if j.account:
            spec["account"] = j.account
        if j.partition and j.partition in self.ctl.partitions:
            spec["partition"] = j.partition
        if j.qos:  # [quality] preemption in virtual time
            if j.qos in self.ctl.accounts.db.qos:
                spec["qos"] = j.qos
            else:  # (a trace's own classes, e.g. gpu_trace_sample.csv's LS/BE)
                self.unknown_qos += 1
        return spec

    def _submit(self, index: int) -> None:
        j = self.trace[index]
        rec = self.records[index]
        try:
            job = run_now(self.ctl.submit(self.who(j.user), self.spec(j), SCRIPT, {}, [], None))
        except SlurmError as e:
            rec.refused = e.message
            rec.state = "REFUSED"
            return
        rec.job_id = job.job_id
        self.by_job[job.job_id] = rec
        self.arrived.append(rec)

    # ---- the core's effects, in virtual time -------------------------------------------
    def _execute(self, effect: Effect) -> None:
        """What the shell does in production, as the simulation models it: a launch is the
        runtime model, a control stops, suspends or resumes the job, a pass request goes to
        the cadence; nothing is written (the simulation keeps its state in memory)."""
        handle = self._handlers.get(type(effect))
        if handle is not None:  # (the others are writes: nothing to do)
            handle(effect)

    def _launch(self, effect: Launch) -> None:
        self._started(effect.job)

    def _schedule_soon(self, effect: ScheduleSoon) -> None:
        self.ctl.shell.request_schedule(effect.delay)

    def _gone(self, effect: ReadGoneJobs) -> None:  # a trace names no job gone from memory
        self.ctl.core.gone_found(effect.ids, [])

    def _started(self, job: Job) -> None:
        """The runtime model in place of a launch: the job ends after its run time, or at
        its time limit as TIMEOUT (the step supervisor's part)."""
        rec = self.by_job.get(job.job_id)
        if rec is None:
            return
        run = rec.run_time
        limit = job.time_limit
        if 0 < limit < run:
            self._end_at(job, self.now + limit, "TIMEOUT")
        else:
            self._end_at(job, self.now + run, "COMPLETED")

    def _end_at(self, job: Job, at: float, state: str) -> None:
        """The run's own end (COMPLETED or TIMEOUT), until a suspension moves it."""
        token = next(self._end_tokens)
        self.push(at, _END, (job.job_id, job.restart_count, state, token))
        self._due[job.job_id] = (token, at, state)

    def _control(self, c: Control) -> None:
        """The node's side of a control: killed at once for a cancel, a requeue or a time
        limit the core reached first (a preemption's GraceTime is the core's: it sends the
        kill when it is over); signals change nothing (no job traps SIGTERM, so a victim
        runs to the end of its grace time); a suspension stops the run's clock and a resume
        starts it again (one control per node of the job: the first one acts)."""
        op = c.control.get("op")
        job = self.ctl.jobs.get(c.job_id)
        if job is None:
            return
        if op in ("cancel", "requeue", "time_limit"):
            self.push(self.now, _END, (job.job_id, job.restart_count, "CANCELLED", None))
        elif op == "suspend":
            due = self._due.pop(job.job_id, None)
            if due is not None:
                _, at, state = due
                self._paused[job.job_id] = (at - self.now, state)
        elif op == "resume":
            paused = self._paused.pop(job.job_id, None)
            if paused is not None:
                left, state = paused
                self._end_at(job, self.now + left, state)

    def _end(self, job_id: int, run: int, state: str, token: int | None) -> None:
        job = self.ctl.jobs.get(job_id)
        if job is None or job.restart_count != run or not job.state.active:
            return  # an earlier run's end (the job was requeued), or already over
        if token is not None:  # the run's own end: not if a suspension moved it
            due = self._due.get(job_id)
            if due is None or due[0] != token:
                return
            del self._due[job_id]
        self.ctl.job_ended(job_id, state, 0, 15 if state != "COMPLETED" else 0, self.now)

    @staticmethod
    def _resumed(rec: JobRecord, t: float) -> None:
        if rec.suspended_at is not None:
            rec.paused.append((rec.suspended_at, t))
            rec.suspended_at = None

    def _event(self, ev: JobEvent) -> None:
        self.changed = self.ticked = True
        if ev.kind in (JobEventKind.ENDED, JobEventKind.REQUEUED):
            self.freed = True
            self._due.pop(ev.job.job_id, None)  # (a run stopped before its own end)
            self._paused.pop(ev.job.job_id, None)
        rec = self.by_job.get(ev.job.job_id)
        if rec is None:
            return
        t = ev.time - EPOCH
        if ev.kind is JobEventKind.STARTED:
            rec.start = t
            rec.state = JobState.RUNNING.value
            self.starts.append(rec.index)
        elif ev.kind is JobEventKind.ENDED:
            rec.end = t
            rec.state = ev.new.value
            self._resumed(rec, t)
        elif ev.kind is JobEventKind.SUSPENDED:
            rec.suspended_at = t
        elif ev.kind is JobEventKind.RESUMED:
            self._resumed(rec, t)
        elif ev.kind is JobEventKind.REQUEUED and rec.start is not None:
            self._resumed(rec, t)
            rec.stopped.append((rec.start, t))  # (its resources are free again)
            rec.start = None
            rec.state = JobState.PENDING.value
