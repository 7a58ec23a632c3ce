"""What the scheduler's stages see and what they decide.

`Snapshot` is what node selection and backfill (`sched.backfill.schedule()`) work on: the
eligible jobs, already ordered by the earlier stages, and the nodes' free resources; their
answer is a `Placement`.  The whole pipeline (`sched.pipeline`) starts from the controller's
`ClusterSnapshot` (`sched.pipeline`) and ends in a `Decision`.  Nothing here does I/O or
reads a clock: `now` is in the snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from corral.model.job import NodeAlloc
from corral.model.node import Partition
from corral.model.reasons import PendingReason

from .levers import Levers
from .preempt import PreemptPolicy

INFINITE_TIME = float("inf")


@dataclass(slots=True)
class NodeView:
    name: str
    cpus: int
    mem: int  # MB
    gpus: int
    free_cpus: int
    free_mem: int
    free_gpus: list[int]  # indices of idle GPUs
    usable: bool  # up, responding, not drained: may take new jobs
    weight: int = 1
    partitions: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    job_count: int = 0  # jobs running here (an exclusive job needs 0)
    exclusive: bool = False  # held whole by an exclusive job
    gpu_type: str | None = None  # Gres=gpu:TYPE:N
    tmp_disk: int = 0  # MB (TmpDisk=); not consumed by jobs, a per-node minimum (--tmp)


@dataclass(slots=True)
class RunningView:
    job_id: int
    end_time: float  # start + time limit; INFINITE_TIME for no limit
    alloc: list[NodeAlloc]
    exclusive: bool = False
    array_job_id: int | None = None  # counts against the array's % throttle
    # what preemption weighs (sched/preempt.py)
    qos: str = ""
    partition: str = ""
    start_time: float = 0.0
    stopping: bool = False  # already being preempted: its resources are on their way back
    lent: bool = False  # suspended, its resources lent to its preemptor: not a victim


@dataclass(slots=True)
class PendingView:
    """An eligible pending job (not held, dependencies met, begin time passed)."""

    job_id: int
    priority: int
    submit_time: float
    partition: str
    user: str = ""
    num_nodes: int = 1
    max_nodes: int | None = None
    num_tasks: int = 1
    ntasks_per_node: int | None = None
    cpus_per_task: int = 1
    mem_per_node: int | None = None  # MB; 0 = all memory of each node
    mem_per_cpu: int | None = None
    gpus: int = 0  # total over the job (--gpus)
    gpus_per_node: int = 0
    gpus_per_task: int = 0
    exclusive: bool = False
    req_nodes: tuple[str, ...] = ()
    exc_nodes: tuple[str, ...] = ()
    time_limit: int = -1  # seconds; -1 = none (the partition's MaxTime is applied before)
    nodes_fixed: bool = True  # False: -n without -N, as many nodes as the tasks need
    constraint: str | None = None  # --constraint (sched.features)
    min_cpus: int | None = None  # --mincpus
    gpu_type: str | None = None  # --gres=gpu:TYPE:N: only nodes with that type
    min_tmp_disk: int = 0  # --tmp: MB; only nodes with at least that TmpDisk
    reservation: str | None = None  # --reservation: only its nodes, only while active
    qos: str = ""  # preempt/qos: whom it may preempt


@dataclass(slots=True)
class Snapshot:
    now: float
    nodes: dict[str, NodeView]
    partitions: dict[str, Partition]
    running: list[RunningView]
    pending: list[PendingView]
    def_mem_per_cpu: int = 0  # MB per CPU for jobs without --mem; 0 = memory not counted
    backfill: bool = True
    max_backfill_jobs: int = 10_000
    # (node, start, end): windows held whole by advanced reservations (sched/reserved.py)
    blocked: tuple[tuple[str, float, float], ...] = ()
    preempt: PreemptPolicy | None = None  # None or inactive: no preemption
    # [quality] user -> predicted run time (sched/predict.py): a job's planned duration is
    # min(its limit, this); empty: its limit
    predicted_runtime: Mapping[str, float] = field(default_factory=dict)
    levers: Levers = Levers()  # [quality] backfill's order and hold rules (sched/levers.py)
    # [simulator] only the starts are read (not the plans): holds that could hold back no
    # later start are not made, so `Placement.planned` is partial; the starts are the same
    starts_only: bool = False


@dataclass(slots=True)
class Placement:
    """What node selection and backfill decide for the eligible jobs."""

    starts: list[tuple[int, list[NodeAlloc]]] = field(default_factory=list)
    # pending reason for every eligible job that does not start (Resources, Priority, …)
    reasons: dict[int, PendingReason] = field(default_factory=dict)
    # backfill's plan: expected start time and nodes for jobs that wait
    planned: dict[int, tuple[float, list[str]]] = field(default_factory=dict)
    # jobs placed as if running jobs were gone: (job id, where it will run, the victims);
    # it waits (reason Resources) until they have stopped
    preemptions: list[tuple[int, list[NodeAlloc], list[int]]] = field(default_factory=list)
    # seconds spent in preemption checks, by the caller's timer (0 without one)
    preempt_seconds: float = 0.0

    @property
    def reason_texts(self) -> dict[int, str]:
        return {k: r.text() for k, r in self.reasons.items()}
