"""One scheduling pass: the whole policy, pure, in fixed stages.

    ClusterSnapshot ──► eligibility ──► priority ──► limits ──► select + backfill ──► Decision
                        (hold, begin,   (priority/   (QOS and   (select/cons_tres,
                         dependencies,   multifactor, association sched/backfill)
                         partition,      fairshare,   limits, a
                         arrays)         aged every   gate asked
                                         pass)        in priority
                                                      order)

The controller builds a `ClusterSnapshot` (every pending job, the nodes' free resources, the
running jobs, the partitions, and `now`), calls `run_pass`, and applies the `Decision`:
which jobs start with exactly which allocation (for an array record, which task), every
pending job's priority and typed reason, and the expected starts of the jobs backfill
planned.  Nothing here reads a clock, the store or the network, and nothing in the
snapshot is changed, so the controller, the test harness and a trace simulator drive the
same code.  Preemption happens inside backfill, where a job fails to fit: a job that may
preempt is placed as if its victims were gone (sched/preempt.py), and the `Decision`
carries them (`Decision.preemptions`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from corral.model.assoc import AssocIndex
from corral.model.job import NodeAlloc
from corral.model.node import Partition
from corral.model.reasons import PendingReason, ReasonCode, reason
from corral.model.reservation import Reservation

from . import deps as sched_deps
from .backfill import DEFAULT_MAX_PLANNED, BackfillMemo, schedule
from .eligibility import SchedJob, eligibility
from .fairshare import FairshareView
from .levers import Levers
from .limits import LimitGate, PolicySnapshot, limit_gate
from .preempt import PreemptPolicy
from .priority import Fairshare, PriorityParams, pass_priorities
from .reserved import schedule_reserved
from .snapshot import NodeView, RunningView, Snapshot

# Tasks of one array record considered per pass; the rest come in the next passes.
ARRAY_TASKS_PER_PASS = 128


@dataclass(frozen=True, slots=True)
class SchedParams:
    """The slurm.conf settings the pipeline reads."""

    priority: PriorityParams = PriorityParams()
    def_mem_per_cpu: int = 0
    backfill: bool = True
    max_planned: int = DEFAULT_MAX_PLANNED
    array_tasks_per_pass: int = ARRAY_TASKS_PER_PASS
    preempt: PreemptPolicy | None = None  # PreemptType and the QoS/partition settings
    predict_runtime: int = 0  # [quality] corral_predict_runtime=N (sched/predict.py)
    levers: Levers = Levers()  # [quality] corral_bf_... (sched/levers.py)


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything one pass looks at.  The records are read, never written."""

    now: float
    nodes: dict[str, NodeView]
    partitions: dict[str, Partition]
    running: list[RunningView]
    pending: Sequence[SchedJob]  # every pending job, held ones too
    jobs: Sequence[sched_deps.DepJob]  # every job in memory: what dependencies may name
    gone: sched_deps.GoneJobs | None = None  # final states of jobs no longer in memory
    params: SchedParams = SchedParams()
    policy: PolicySnapshot | None = None  # accounts, limits, usage (None: no accounting)
    reservations: tuple[Reservation, ...] = ()  # advanced reservations not yet over
    # [quality] user -> predicted run time (sched/predict.py); backfill plans a job for
    # min(its limit, this) instead of its limit
    predicted_runtime: Mapping[str, float] = field(default_factory=dict)
    # [simulator] only the decision's starts are read: plans that could hold back no
    # later start are left out (sched/backfill.py); the starts are the same
    starts_only: bool = False


@dataclass(slots=True)
class Start:
    job_id: int  # the pending record
    alloc: list[NodeAlloc]
    array_task_id: int | None = None  # for an array record: the task that starts
    partition: str | None = None  # for a job submitted to several: where it starts


@dataclass(slots=True)
class Preemption:
    """A pending job placed as if `victims` were gone: the controller stops them (each in
    its mode, after its QoS's GraceTime); the job waits (reason Resources) and starts in a
    later pass, on the freed resources."""

    job_id: int
    victims: list[int]
    alloc: list[NodeAlloc]


@dataclass(slots=True)
class Decision:
    starts: list[Start] = field(default_factory=list)
    priorities: dict[int, int] = field(default_factory=dict)  # every pending job
    reasons: dict[int, PendingReason] = field(default_factory=dict)  # every job that waits
    planned: dict[int, tuple[float, list[str]]] = field(default_factory=dict)
    became_eligible: list[int] = field(default_factory=list)  # eligible from `now` on
    # `scontrol show job` Dependency= of every pending job with a dependency ("" once
    # satisfied), with each entry's state as this pass sees it
    dependency_texts: dict[int, str] = field(default_factory=dict)
    preemptions: list[Preemption] = field(default_factory=list)
    # seconds each stage took, by the timer the caller gave run_pass (empty without one):
    # eligibility, priority, limits, backfill (select/cons_tres and backfill, the limit
    # gate's checks included), preemption (inside backfill, not in its figure), decision
    stage_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def reason_texts(self) -> dict[int, str]:
        return {k: r.text() for k, r in self.reasons.items()}


def fairshare_of(policy: PolicySnapshot | None, params: SchedParams,
                 index: AssocIndex | None = None) -> Fairshare | None:
    """The pass's fairshare factor of (user, account, partition); None without
    accounting or without PriorityWeightFairshare.  `index`: the pass's over policy.db."""
    if policy is None or policy.usage is None or not params.priority.weights.fairshare:
        return None
    return FairshareView(policy.db, policy.cluster, policy.usage, policy.fair_tree,
                         index).factor


class _Siblings:
    """The gate that lets one of a job's per-partition candidates start (`-p a,b`: the
    first partition that can start it wins), in front of the limits gate."""

    def __init__(self, tasks: Mapping[int, tuple[int, int | None]],
                 inner: LimitGate | None) -> None:
        self.tasks = tasks
        self.inner = inner
        self.done: set[tuple[int, int | None]] = set()

    def check(self, cid: int) -> PendingReason | None:
        key = self.tasks.get(cid)
        if key is not None and key in self.done:
            return reason(ReasonCode.PRIORITY)  # dropped: the job started elsewhere
        return self.inner.check(cid) if self.inner is not None else None

    def started(self, cid: int) -> None:
        key = self.tasks.get(cid)
        if key is not None:
            self.done.add(key)
        if self.inner is not None:
            self.inner.started(cid)


def assoc_factor_of(policy: PolicySnapshot | None, params: SchedParams,
                    index: AssocIndex | None = None) -> Fairshare | None:
    """The association priority factor of (user, account, partition): the Priority= of
    the association or the nearest parent that sets one, over the largest in the tree."""
    if policy is None or not params.priority.weights.assoc:
        return None
    index = index if index is not None else AssocIndex(policy.db)
    top = max((a.priority or 0 for a in policy.db.assocs.values()), default=0)
    if top <= 0:
        return None

    def factor(user: str, account: str, partition: str) -> float:
        a = index.job_assoc(policy.cluster, user, account, partition)
        if a is None:
            return 0.0
        for x in index.chain(a):
            if x.priority is not None:
                return x.priority / top
        return 0.0
    return factor


class _Stages:
    """Per-stage seconds by the caller's timer (a clock stays outside the pipeline)."""

    __slots__ = ("timer", "seconds", "last")

    def __init__(self, timer: Callable[[], float], seconds: dict[str, float]) -> None:
        self.timer = timer
        self.seconds = seconds
        self.last = timer()

    def done(self, stage: str) -> None:
        t = self.timer()
        self.seconds[stage] = self.seconds.get(stage, 0.0) + (t - self.last)
        self.last = t


def run_pass(snap: ClusterSnapshot, timer: Callable[[], float] | None = None,
             memo: BackfillMemo | None = None) -> Decision:
    """One pass over `snap`.  `timer` (e.g. time.perf_counter), if given, measures each
    stage into `Decision.stage_seconds`; the decision does not depend on it, nor on
    `memo` (what backfill keeps between the caller's passes: less work, same decision)."""
    dec = Decision()
    stages = _Stages(timer, dec.stage_seconds) if timer is not None else None
    dec = _run_pass(snap, dec, stages, memo)
    if stages is not None:
        stages.done("decision")
    return dec


def _run_pass(snap: ClusterSnapshot, dec: Decision, stages: _Stages | None,
              memo: BackfillMemo | None) -> Decision:
    now = snap.now
    params = snap.params
    running_per_array: dict[int, int] = {}
    for r in snap.running:
        if r.array_job_id is not None:
            running_per_array[r.array_job_id] = running_per_array.get(r.array_job_id, 0) + 1

    # 1. eligibility (the dependency index is built once for the whole pass)
    index = sched_deps.DepIndex(snap.jobs, snap.gone)
    elig = eligibility(snap.pending, now, snap.partitions, index, running_per_array,
                       params.array_tasks_per_pass,
                       {r.name: r for r in snap.reservations})
    dec.reasons.update(elig.reasons)
    dec.became_eligible = elig.became_eligible
    dec.dependency_texts = elig.dependency_texts
    if stages is not None:
        stages.done("eligibility")

    # 2. priority/multifactor, recomputed for every pending job
    # one index over the accounting tree for fairshare, association priority and limits
    assocs = AssocIndex(snap.policy.db) if snap.policy is not None else None
    dec.priorities = pass_priorities(snap.pending, now, params.priority, snap.partitions,
                                     fairshare=fairshare_of(snap.policy, params, assocs),
                                     assoc=assoc_factor_of(snap.policy, params, assocs))
    order = dict(dec.priorities)
    for vid, (meta, _) in elig.tasks.items():
        order[vid] = dec.priorities.get(meta, 1)
    if stages is not None:
        stages.done("priority")

    # 3. limits: a gate backfill asks in priority order, so starts made earlier in this
    # pass count (sched/limits.py)
    candidates = elig.candidates
    if not candidates:
        return dec
    gate: LimitGate | _Siblings | None = limit_gate(
        snap.policy, {vid: meta for vid, (meta, _) in elig.tasks.items()}, index=assocs)
    if elig.partition_of:
        gate = _Siblings(elig.tasks, gate if isinstance(gate, LimitGate) else None)
    if stages is not None:
        stages.done("limits")

    # 4+5. select/cons_tres and sched/backfill (around advanced reservations, if any)
    view = Snapshot(now=now, nodes=snap.nodes, partitions=snap.partitions,
                    running=snap.running, pending=candidates,
                    def_mem_per_cpu=params.def_mem_per_cpu, backfill=params.backfill,
                    preempt=params.preempt,
                    # [quality] never around reservations: a job must end before one by its limit
                    predicted_runtime={} if snap.reservations else snap.predicted_runtime,
                    levers=params.levers, starts_only=snap.starts_only)
    preempt_timer = None if stages is None else stages.timer
    if snap.reservations:
        placed = schedule_reserved(view, snap.reservations, max_planned=params.max_planned,
                                   priorities=order, gate=gate, timer=preempt_timer,
                                   memo=memo)
    else:
        placed = schedule(view, max_planned=params.max_planned, priorities=order, gate=gate,
                          timer=preempt_timer, memo=memo)
    if stages is not None:
        stages.done("backfill")
        if placed.preempt_seconds:
            stages.seconds["preemption"] = placed.preempt_seconds
            stages.seconds["backfill"] -= placed.preempt_seconds
    tasks = elig.tasks
    started_tasks: dict[int, int] = {}
    started_keys: set[tuple[int, int | None] | None] = set()
    for cid, alloc in placed.starts:
        task = tasks.get(cid)
        if task is None:
            dec.starts.append(Start(cid, alloc))
        else:
            dec.starts.append(Start(task[0], alloc, task[1], elig.partition_of.get(cid)))
            started_keys.add(task)
            if task[1] is not None:
                started_tasks[task[0]] = started_tasks.get(task[0], 0) + 1
    for cid, alloc, victims in placed.preemptions:
        task = tasks.get(cid)
        dec.preemptions.append(Preemption(cid if task is None else task[0], victims, alloc))
    # An array record waits with the reason of its first task that did not start (a
    # job that started in one of its partitions has no reason from the others).
    for cid in sorted(placed.reasons):
        task = tasks.get(cid)
        if task in started_keys:
            continue
        job_id = cid if task is None else task[0]
        if job_id not in dec.reasons:
            dec.reasons[job_id] = placed.reasons[cid]
    for cid in sorted(placed.planned):
        task = tasks.get(cid)
        if task in started_keys:
            continue
        dec.planned.setdefault(cid if task is None else task[0], placed.planned[cid])
    # an array whose every candidate started but which hit its % throttle waits on it
    by_id = {j.job_id: j for j in snap.pending if j.job_id in started_tasks} \
        if started_tasks else {}
    for meta_id, n in started_tasks.items():
        record = by_id[meta_id]
        limit = record.array_max_running
        left = len(record.array_tasks or ()) - n
        if meta_id not in dec.reasons and left > 0 and limit \
                and running_per_array.get(meta_id, 0) + n >= limit:
            dec.reasons[meta_id] = reason(ReasonCode.ARRAY_LIMIT,
                                          requested=(("tasks", limit),),
                                          used=(("tasks", running_per_array.get(meta_id, 0) + n),),
                                          per_node=False)
    return dec
