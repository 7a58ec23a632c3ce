"""Job priority: Slurm's priority/multifactor plugin.

priority = Σ weight_i × factor_i − nice, every factor in [0, 1], truncated to an integer and
never below 1 (Slurm keeps 0 for held jobs; holding is the controller's business).
`pass_priorities` is the pipeline's priority stage: age, partition (PriorityJobFactor),
fairshare (sched/fairshare.py, with accounting), QoS priority, job size
(PriorityFavorSmall) and TRES (PriorityWeightTRES, so GPUs weigh) factors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from corral.model.node import Partition


class PriorityJob(Protocol):
    """What the priority stage reads of a pending job (a `Job` record has all of it)."""

    @property
    def job_id(self) -> int: ...
    @property
    def partition(self) -> str: ...
    @property
    def nice(self) -> int: ...
    @property
    def held(self) -> str | None: ...
    @property
    def eligible_time(self) -> float | None: ...


@dataclass(frozen=True, slots=True)
class PriorityWeights:
    """PriorityWeight* from slurm.conf."""

    age: int = 0
    partition: int = 0
    fairshare: int = 0
    qos: int = 0
    job_size: int = 0
    tres: Mapping[str, float] = field(default_factory=dict)  # PriorityWeightTRES
    assoc: int = 0  # PriorityWeightAssoc


def parse_tres_weights(text: str) -> dict[str, float]:
    """PriorityWeightTRES=CPU=1000,Mem=2000,GRES/gpu=3000: TRES names lower-cased
    (cpu, mem, node, gres/gpu).  Raises ValueError on a malformed entry."""
    out: dict[str, float] = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, eq, value = part.partition("=")
        if not eq or not name.strip():
            raise ValueError(f"invalid PriorityWeightTRES entry: {part}")
        out[name.strip().lower()] = float(value)
    return out


Fairshare = Callable[[str, str, str], float]  # (user, account, partition) -> factor


@dataclass(frozen=True, slots=True)
class PriorityFactors:
    """Normalised factors of one job, each in [0, 1]."""

    age: float = 0.0
    partition: float = 0.0
    fairshare: float = 0.0
    qos: float = 0.0
    job_size: float = 0.0


def age_factor(eligible_time: float, now: float, max_age_s: int) -> float:
    """Time waiting, relative to PriorityMaxAge; capped at 1."""
    if max_age_s <= 0:
        return 0.0
    waited = now - eligible_time
    if waited <= 0:
        return 0.0
    return min(1.0, waited / max_age_s)


def partition_factor(job_factor: int, max_job_factor: int) -> float:
    """The partition's PriorityJobFactor relative to the largest one in the cluster."""
    if max_job_factor <= 0:
        return 0.0
    return min(1.0, max(0.0, job_factor / max_job_factor))


def multifactor(weights: PriorityWeights, factors: PriorityFactors, nice: int = 0) -> int:
    total = (
        weights.age * factors.age
        + weights.partition * factors.partition
        + weights.fairshare * factors.fairshare
        + weights.qos * factors.qos
        + weights.job_size * factors.job_size
    )
    # Slurm truncates the weighted sum to an integer before subtracting nice.
    return max(1, int(total) - nice)


def job_priority(
    submit_time: float,
    now: float,
    *,
    partition_job_factor: int,
    max_partition_job_factor: int,
    weight_age: int,
    max_age_s: int,
    weight_partition: int,
    nice: int = 0,
) -> int:
    """Priority from age and partition factors.  Slurm ages a job from its eligible time:
    pass that as `submit_time` when the job waited on a dependency or begin time."""
    factors = PriorityFactors(
        age=age_factor(submit_time, now, max_age_s),
        partition=partition_factor(partition_job_factor, max_partition_job_factor),
    )
    weights = PriorityWeights(age=weight_age, partition=weight_partition)
    return multifactor(weights, factors, nice)


@dataclass(frozen=True, slots=True)
class PriorityParams:
    """What priority/multifactor reads from slurm.conf (PriorityWeight*, PriorityMaxAge)."""

    weights: PriorityWeights = PriorityWeights()
    max_age_s: int = 7 * 86400
    favor_small: bool = False  # PriorityFavorSmall
    # the cluster's totals per TRES (cpu, mem, node, gres/gpu): the job-size and TRES
    # factors are a job's share of them
    totals: Mapping[str, int] = field(default_factory=dict)
    qos_priority: Mapping[str, int] = field(default_factory=dict)  # QoS Priority=


def _job_tres(j: object) -> dict[str, int]:
    g = getattr
    nodes = max(1, int(g(j, "num_nodes", 1) or 1))
    one_per_node = g(j, "overcommit", False) and not g(j, "gpus_per_task", 0)  # -O
    tasks = nodes if one_per_node else max(1, int(g(j, "num_tasks", 1) or 1))
    cpus = max(nodes, tasks * max(1, int(g(j, "cpus_per_task", 1) or 1)))
    gpus = int(g(j, "gpus", 0) or 0) or int(g(j, "gpus_per_node", 0) or 0) * nodes \
        or int(g(j, "gpus_per_task", 0) or 0) * int(g(j, "num_tasks", 1) or 1)
    mem_node, mem_cpu = g(j, "mem_per_node", None), g(j, "mem_per_cpu", None)
    mem = mem_node * nodes if mem_node else (mem_cpu * cpus if mem_cpu else 0)
    return {"cpu": cpus, "node": nodes, "gres/gpu": gpus, "mem": int(mem)}


def pass_priorities(jobs: Iterable[PriorityJob], now: float, params: PriorityParams,
                    partitions: Mapping[str, Partition],
                    fairshare: Fairshare | None = None,
                    assoc: Fairshare | None = None) -> dict[int, int]:
    """The priority/multifactor stage: every pending job's priority at `now`.

    Recomputed on every pass (Slurm recomputes every PriorityCalcPeriod; a pass runs at
    least every SchedulerInterval), so the age factor grows until PriorityMaxAge.  A job
    ages from the time it became eligible (Slurm: from its begin time once eligible); one
    not yet eligible has age 0.  Held jobs have priority 0, as in Slurm.  `fairshare`
    gives a job's fairshare factor (None: no accounting, factor 0); `assoc` its
    association's priority factor (PriorityWeightAssoc)."""
    max_factor = max((p.priority_job_factor for p in partitions.values()), default=1) or 1
    part_factor = {name: partition_factor(p.priority_job_factor, max_factor)
                   for name, p in partitions.items()}
    w = params.weights
    totals = params.totals
    max_qos = max(params.qos_priority.values(), default=0)
    sized = bool(w.job_size or w.tres)
    fs_cache: dict[tuple[str, str, str], float] = {}
    out: dict[int, int] = {}
    # (the weights and age_factor's arithmetic in locals: 10,000 jobs a pass)
    weight_age, weight_partition, weight_fairshare = w.age, w.partition, w.fairshare
    max_age_s = params.max_age_s
    if not weight_fairshare:
        fairshare = None
    weight_assoc = w.assoc if assoc is not None else 0
    weight_qos = w.qos if max_qos > 0 else 0
    qos_priority = params.qos_priority
    part_of = part_factor.get
    fs_of = fs_cache.get
    for j in jobs:
        if j.held:
            out[j.job_id] = 0
            continue
        fixed = getattr(j, "priority_set", None)
        if fixed:  # set by an operator (Slurm's direct_set_prio): not recomputed
            out[j.job_id] = fixed
            continue
        age = 0.0
        eligible_time = j.eligible_time
        if eligible_time is not None and max_age_s > 0:  # (age_factor)
            waited = now - eligible_time
            if waited > 0:
                age = min(1.0, waited / max_age_s)
        total = weight_age * age + weight_partition * part_of(j.partition, 0.0)
        if fairshare is not None or weight_assoc:
            key = (getattr(j, "user", ""), getattr(j, "account", ""), j.partition)
            if fairshare is not None:
                f = fs_of(key)
                if f is None:
                    f = fs_cache[key] = fairshare(*key)
                total += weight_fairshare * f
            if weight_assoc:
                total += weight_assoc * assoc(*key)  # type: ignore[misc]
        if weight_qos:
            total += weight_qos * qos_priority.get(getattr(j, "qos", "") or "", 0) / max_qos
        if sized:
            tres = _job_tres(j)
            if w.job_size and totals.get("cpu"):
                size = min(1.0, tres["cpu"] / totals["cpu"])
                total += w.job_size * ((1.0 - size) if params.favor_small else size)
            for name, weight in w.tres.items():
                if totals.get(name):
                    total += weight * min(1.0, tres.get(name, 0) / totals[name])
        out[j.job_id] = max(1, int(total) - j.nice)
    return out


@dataclass(frozen=True, slots=True)
class Components:
    """One job's priority factors as sprio shows them: each factor normalised to [0, 1]
    (`sprio -n`) and its weighted value; `tres` per TRES name."""

    priority: int
    age: float = 0.0
    fairshare: float = 0.0
    job_size: float = 0.0
    partition: float = 0.0
    qos: float = 0.0
    nice: int = 0
    tres: Mapping[str, float] = field(default_factory=dict)
    assoc: float = 0.0


def components(j: PriorityJob, now: float, params: PriorityParams,
               partitions: Mapping[str, Partition],
               fairshare: Fairshare | None = None,
               assoc: Fairshare | None = None) -> Components:
    """The factors behind `pass_priorities` for one job (the same arithmetic)."""
    max_factor = max((p.priority_job_factor for p in partitions.values()), default=1) or 1
    part = partitions.get(j.partition)
    pf = partition_factor(part.priority_job_factor, max_factor) if part else 0.0
    age = age_factor(j.eligible_time, now, params.max_age_s) \
        if j.eligible_time is not None else 0.0
    f = fairshare(getattr(j, "user", ""), getattr(j, "account", ""), j.partition) \
        if fairshare is not None and params.weights.fairshare else 0.0
    max_qos = max(params.qos_priority.values(), default=0)
    q = params.qos_priority.get(getattr(j, "qos", "") or "", 0) / max_qos if max_qos else 0.0
    tres = _job_tres(j)
    totals = params.totals
    size = 0.0
    if totals.get("cpu"):
        size = min(1.0, tres["cpu"] / totals["cpu"])
        size = 1.0 - size if params.favor_small else size
    per_tres = {name: min(1.0, tres.get(name, 0) / totals[name])
                for name in params.weights.tres if totals.get(name)}
    a = assoc(getattr(j, "user", ""), getattr(j, "account", ""), j.partition) \
        if assoc is not None and params.weights.assoc else 0.0
    prio = pass_priorities([j], now, params, partitions, fairshare, assoc)[j.job_id]
    return Components(prio, age, f, size, pf, q, j.nice, per_tres, a)
