"""The eligibility stage: which pending jobs may be considered at all this pass.

Tests in Slurm's order (job_independent / job_runnable_test): hold, begin time,
dependencies, partition state, partition limits, array throttle.  A job that fails one gets
the typed reason of the first test it fails and is not seen by the later stages (it still
gets a priority).  Array records that pass are expanded here into one candidate per task
that may start this pass (the array splitting decision); the controller splits each task
off only if it starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from corral.model.job import Job, JobState
from corral.model.node import Partition
from corral.model.reasons import PendingReason, ReasonCode, reason
from corral.model.reservation import Reservation, blocks_partition, job_overlaps

from . import deps as sched_deps
from .snapshot import PendingView

# Virtual ids for the tasks of a pending array record, one candidate each: far below any
# real job id and increasing with the task's position, so ties keep task order.
_VIRTUAL_BASE = -(1 << 62)


class SchedJob(sched_deps.DepJob, Protocol):
    """What the pipeline reads of a pending job (a `Job` record has all of it)."""

    @property
    def partition(self) -> str: ...
    @property
    def held(self) -> str | None: ...
    @property
    def begin_time(self) -> float | None: ...
    @property
    def dependency(self) -> str | None: ...
    @property
    def eligible_time(self) -> float | None: ...
    @property
    def submit_time(self) -> float: ...
    @property
    def nice(self) -> int: ...
    @property
    def user(self) -> str: ...
    @property
    def array_max_running(self) -> int | None: ...
    @property
    def array_job_id(self) -> int | None: ...
    @property
    def num_nodes(self) -> int: ...
    @property
    def max_nodes(self) -> int | None: ...
    @property
    def num_tasks(self) -> int: ...
    @property
    def ntasks_per_node(self) -> int | None: ...
    @property
    def cpus_per_task(self) -> int: ...
    @property
    def mem_per_node(self) -> int | None: ...
    @property
    def mem_per_cpu(self) -> int | None: ...
    @property
    def gpus(self) -> int: ...
    @property
    def gpus_per_node(self) -> int: ...
    @property
    def gpus_per_task(self) -> int: ...
    @property
    def exclusive(self) -> bool: ...
    @property
    def req_nodes(self) -> list[str]: ...
    @property
    def exc_nodes(self) -> list[str]: ...
    @property
    def time_limit(self) -> int: ...


@dataclass(slots=True)
class Eligible:
    """The stage's answer."""

    candidates: list[PendingView] = field(default_factory=list)
    reasons: dict[int, PendingReason] = field(default_factory=dict)
    became_eligible: list[int] = field(default_factory=list)
    # candidate id -> (record's job id, array task id) for expanded array tasks and for
    # the per-partition candidates of a job submitted to several (`-p a,b`: task id None
    # for a plain job)
    tasks: dict[int, tuple[int, int | None]] = field(default_factory=dict)
    # candidate id -> the partition it stands for (jobs submitted to several)
    partition_of: dict[int, str] = field(default_factory=dict)
    # `scontrol show job` Dependency= of every pending job with a dependency: its
    # entries not yet fulfilled with their states ("" once it is satisfied)
    dependency_texts: dict[int, str] = field(default_factory=dict)


def held_reason(job: SchedJob) -> PendingReason:
    return reason(ReasonCode.HELD_ADMIN if job.held == "admin" else ReasonCode.HELD_USER)


def check_job(job: SchedJob, now: float, partitions: Mapping[str, Partition],
              index: sched_deps.DepIndex, running_per_array: Mapping[int, int],
              dependency_texts: dict[int, str] | None = None) -> PendingReason | None:
    """The first test `job` fails, or None when it is eligible.  With `dependency_texts`,
    the job's Dependency= text goes there (when it has a dependency, whatever it fails)."""
    early = None
    if job.held:
        early = held_reason(job)
    elif job.begin_time and job.begin_time > now:
        early = reason(ReasonCode.BEGIN_TIME)
    if job.dependency and (early is None or dependency_texts is not None):
        verdict = _dependency_verdict(job, now, index, dependency_texts)
        if early is None and verdict == sched_deps.WAITING:
            return reason(ReasonCode.DEPENDENCY)
        if early is None and verdict == sched_deps.NEVER:
            return reason(ReasonCode.DEPENDENCY_NEVER)
    if early is not None:
        return early
    if "," in job.partition:  # -p a,b: eligible when any of them may run it
        whys = [partition_reason(job, partitions.get(p), running_per_array)
                for p in job.partition.split(",")]
        return None if any(w is None for w in whys) else whys[0]
    return partition_reason(job, partitions.get(job.partition), running_per_array)


def _dependency_verdict(job: SchedJob, now: float, index: sched_deps.DepIndex,
                        texts: dict[int, str] | None) -> str:
    """satisfied / waiting / never for the job's dependency; its text into `texts`."""
    text = job.dependency or ""
    singleton = "singleton" in text and index.singleton_blocked(job)
    try:
        dep = sched_deps.parse_cached(text)
    except sched_deps.DependencyError:
        if texts is not None:
            texts[job.job_id] = text
        return sched_deps.NEVER
    states = index.item_states(dep, now, singleton)
    verdict = sched_deps.combine(dep, states)
    if texts is not None:
        texts[job.job_id] = "" if verdict == sched_deps.SATISFIED \
            else index.dependency_text(text, dep, states)
    return verdict


def partition_reason(job: SchedJob, part: Partition | None,
                     running_per_array: Mapping[int, int]) -> PendingReason | None:
    """Why `part` cannot run `job` now (state, MaxTime, node counts, array throttle)."""
    # DRAIN: queued jobs still run (only new submissions are refused); INACTIVE and DOWN
    # start nothing (slurm.conf(5) State=).
    if part is None or part.state == "DOWN":
        return reason(ReasonCode.PARTITION_DOWN)
    if part.state == "INACTIVE":
        return reason(ReasonCode.PARTITION_INACTIVE)
    if part.max_time >= 0 and (job.time_limit < 0 or job.time_limit > part.max_time):
        return reason(ReasonCode.PARTITION_TIME_LIMIT, requested=(("seconds", job.time_limit),),
                      available=(("seconds", part.max_time),), per_node=False)
    if job.num_nodes > len(part.nodes) or (part.max_nodes and job.num_nodes > part.max_nodes):
        most = len(part.nodes) if not part.max_nodes else min(len(part.nodes), part.max_nodes)
        return reason(ReasonCode.PARTITION_NODE_LIMIT, requested=(("nodes", job.num_nodes),),
                      available=(("nodes", most),), per_node=False)
    if part.min_nodes and job.num_nodes < part.min_nodes:  # MinNodes=
        return reason(ReasonCode.PARTITION_NODE_LIMIT, requested=(("nodes", job.num_nodes),),
                      available=(("nodes", part.min_nodes),), per_node=False)
    if job.array_max_running and (job.array_tasks is not None or job.array_job_id is not None):
        # every running task counts, whether it started from the array record or from a
        # task split off it (held and released, requeued)
        running = running_per_array.get(job.array_job_id or job.job_id, 0)
        if running >= job.array_max_running:
            return reason(ReasonCode.ARRAY_LIMIT, requested=(("tasks", job.array_max_running),),
                          used=(("tasks", running),), per_node=False)
    return None


def _throttled(job: SchedJob, running_per_array: Mapping[int, int],
               offered: Mapping[int, int]) -> PendingReason:
    aid = job.array_job_id or job.job_id
    return reason(ReasonCode.ARRAY_LIMIT, requested=(("tasks", job.array_max_running or 0),),
                  used=(("tasks", running_per_array.get(aid, 0) + offered.get(aid, 0)),),
                  per_node=False)


def view_of(job: SchedJob, job_id: int | None = None) -> PendingView:
    """The candidate node selection and backfill work on."""
    qos: str | None
    if type(job) is Job:  # (a job record has every field: read at once, 10,000 a pass)
        threads = job.core_threads or 1
        min_cpus = job.min_cpus
        overcommit = job.overcommit
        fixed, constraint, gpu_type = job.nodes_fixed, job.constraint, job.gpu_type
        tmp, resv, qos = job.min_tmp_disk, job.reservation, job.qos
    else:
        threads = getattr(job, "core_threads", 1) or 1  # whole cores: --hint=nomultithread
        min_cpus = getattr(job, "min_cpus", None)
        overcommit = getattr(job, "overcommit", False)
        fixed = getattr(job, "nodes_fixed", True)
        constraint = getattr(job, "constraint", None)
        gpu_type = getattr(job, "gpu_type", None)
        tmp = getattr(job, "min_tmp_disk", None)
        resv = getattr(job, "reservation", None)
        qos = getattr(job, "qos", None)
    tasks, per_node = job.num_tasks, job.ntasks_per_node
    if overcommit and not job.gpus_per_task:
        # -O: allocated as if one task per node were asked (slurmctld sets min_cpus to the
        # node count; cons_tres gives each node one task's CPUs); its tasks share them.
        # Not with --gpus-per-task: cons_tres lays such a job's tasks out as usual
        tasks, per_node = max(job.num_nodes, 1), None
    return PendingView(
        job.job_id if job_id is None else job_id, 0, job.submit_time, job.partition, job.user,
        job.num_nodes, job.max_nodes, tasks, per_node,
        job.cpus_per_task * threads,
        job.mem_per_node, job.mem_per_cpu, job.gpus, job.gpus_per_node, job.gpus_per_task,
        job.exclusive, tuple(job.req_nodes), tuple(job.exc_nodes), job.time_limit,
        fixed, constraint, min_cpus * threads if min_cpus else min_cpus, gpu_type,
        tmp or 0, resv, qos or "")


def reservation_reason(job: SchedJob, now: float, reservations: Mapping[str, Reservation],
                       partitions: Mapping[str, Partition]) -> PendingReason | None:
    """Advanced reservations as an eligibility rule: a job that names one runs only while
    it is active ("Reservation" before; "ReservationDeleted" once it is gone); any other
    job whose run would overlap a reservation holding all of its partition's nodes (every
    node, or MAINT over the partition) waits with "ReqNodeNotAvail, Reserved for
    maintenance" (slurmctld's job_test_resv)."""
    name = getattr(job, "reservation", None)
    if name:
        resv = reservations.get(name)
        if resv is None:
            return reason(ReasonCode.RESERVATION_DELETED)
        return None if resv.active(now) else reason(ReasonCode.RESERVATION)
    for resv in reservations.values():
        if not job_overlaps(resv, now, job.time_limit):
            continue
        parts = [partitions.get(p) for p in job.partition.split(",")]
        if all(p is not None and blocks_partition(resv, p.nodes) for p in parts):
            return reason(ReasonCode.RESERVED_FOR_MAINT)
    return None


def eligibility(pending: Iterable[SchedJob], now: float, partitions: Mapping[str, Partition],
                index: sched_deps.DepIndex, running_per_array: Mapping[int, int],
                tasks_per_pass: int,
                reservations: Mapping[str, Reservation] | None = None) -> Eligible:
    out = Eligible()
    # tasks of each throttled array offered this pass: with those running, never more
    # than its % limit, however many records its pending tasks are spread over
    offered: dict[int, int] = {}

    def throttle_room(job: SchedJob) -> int | None:
        if not job.array_max_running:
            return None
        aid = job.array_job_id or job.job_id
        return job.array_max_running - running_per_array.get(aid, 0) - offered.get(aid, 0)

    for job in pending:
        if job.state is not JobState.PENDING:
            continue
        why = check_job(job, now, partitions, index, running_per_array, out.dependency_texts)
        if why is None and (reservations or getattr(job, "reservation", None)):
            why = reservation_reason(job, now, reservations or {}, partitions)
        if why is None and job.array_tasks is None and job.array_job_id is not None:
            room = throttle_room(job)  # a task split off its array record
            if room is not None:
                if room <= 0:
                    why = _throttled(job, running_per_array, offered)
                else:
                    offered[job.array_job_id] = offered.get(job.array_job_id, 0) + 1
        if why is not None:
            out.reasons[job.job_id] = why
            continue
        if job.eligible_time is None:
            out.became_eligible.append(job.job_id)
        tasks = job.array_tasks
        multi = "," in job.partition
        parts = [p for p in job.partition.split(",")
                 if partition_reason(job, partitions.get(p), running_per_array) is None] \
            if multi else []
        if tasks is None:
            if not multi:
                out.candidates.append(view_of(job))
                continue
            for p in parts:  # one candidate per partition; the first to start wins
                vid = _VIRTUAL_BASE + len(out.tasks)
                out.tasks[vid] = (job.job_id, None)
                out.partition_of[vid] = p
                view = view_of(job, vid)
                view.partition = p
                out.candidates.append(view)
            continue
        # an array record: one candidate per task that may start now, in task order
        room = len(tasks)
        left = throttle_room(job)
        if left is not None and left <= 0:  # tasks split off this pass took the room
            out.reasons[job.job_id] = _throttled(job, running_per_array, offered)
            continue
        if left is not None:
            room = min(room, left)
            aid = job.array_job_id or job.job_id
            offered[aid] = offered.get(aid, 0) + min(room, tasks_per_pass)
        choices: list[str | None] = list(parts) or [None]
        for task_id in tasks[:min(room, tasks_per_pass)]:
            for choice in choices:
                vid = _VIRTUAL_BASE + len(out.tasks)
                out.tasks[vid] = (job.job_id, task_id)
                view = view_of(job, vid)
                if choice is not None:
                    out.partition_of[vid] = choice
                    view.partition = choice
                out.candidates.append(view)
    return out
