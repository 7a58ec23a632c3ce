"""What the scheduler sees and what it decides.

The controller builds a `Snapshot` from its state; `sched.backfill.schedule()` turns it
into a `Decision`.  Nothing here does I/O or reads a clock: `now` is in the snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from corral.model.job import NodeAlloc
from corral.model.node import Partition

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


@dataclass(slots=True)
class RunningView:
    job_id: int
    end_time: float  # start + time limit; INFINITE_TIME for no limit
    alloc: list[NodeAlloc]
    exclusive: bool = False


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


@dataclass(slots=True)
class Snapshot:
    now: float
    nodes: dict[str, NodeView]
    partitions: dict[str, Partition]
    running: list[RunningView]
    pending: list[PendingView]
    def_mem_per_cpu: int = 0  # MB; 0 = a job without --mem gets all of each node's memory? no: see select
    backfill: bool = True
    max_backfill_jobs: int = 10_000


@dataclass(slots=True)
class Decision:
    starts: list[tuple[int, list[NodeAlloc]]] = field(default_factory=list)
    # pending reason for every pending job that does not start (Resources, Priority, …)
    reasons: dict[int, str] = field(default_factory=dict)
    # backfill's plan: expected start time and nodes for jobs that wait
    planned: dict[int, tuple[float, list[str]]] = field(default_factory=dict)
