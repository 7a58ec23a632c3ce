"""Preemption: which running jobs a pending job may stop, and which of them to stop.

Who may preempt whom (Slurm's `PreemptType`):
- `preempt/qos`: a job may stop running jobs whose QoS its own QoS lists in `Preempt=`.
- `preempt/partition_prio`: a job may stop running jobs of partitions with a lower
  `PriorityTier` (on the nodes the partitions share).
A victim's mode is its QoS's `PreemptMode` when set, else its partition's, else the
cluster's; a victim whose mode is OFF is never stopped, and one that has run less than its
QoS's `PreemptExemptTime` (else the cluster's) is not stopped yet.

Which victims (the pass's choice, `choose_on_node`): stopping a job loses the work it did
since it started (a requeued job starts over unless it checkpoints), so a victim costs its
elapsed GPU-seconds (GPUs held x seconds run), then its elapsed CPU-seconds to break ties
between CPU-only jobs.  Per node, the victims are the cheapest set whose resources, with
what is free, cover the preemptor's demand there: found exactly (every subset) when the
node runs at most `EXACT_VICTIMS` preemptable jobs (a branch-and-bound search), else greedily (cheapest first, then the
most expensive ones not needed dropped).  A multi-node preemptor takes the nodes whose sets
cost least.  Jobs already being preempted cost nothing: a preemptor that waits for its
victims to stop picks the same ones again.

Pure: no clock (the pass's `now`), no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

PREEMPT_TYPES = ("preempt/none", "preempt/qos", "preempt/partition_prio")
# modes acted on (SUSPEND: the victim is suspended and lends its resources to its
# preemptor until it ends, controller/core/passes.py)
PREEMPT_MODES = ("off", "cancel", "requeue", "suspend")
EXACT_VICTIMS = 10  # per node: up to this many candidates, every subset is tried


@dataclass(frozen=True, slots=True)
class QosPreempt:
    """A QoS's preemption settings (sacctmgr's Preempt=, PreemptMode=, GraceTime=,
    PreemptExemptTime=)."""

    preempt: frozenset[str] = frozenset()
    mode: str = "cluster"  # "cluster": the partition's or the cluster's
    grace_time: int = 0  # seconds between SIGTERM and the kill
    exempt_time: int | None = None  # seconds a job runs before it may be preempted


@dataclass(frozen=True, slots=True)
class PreemptPolicy:
    kind: str = "preempt/none"
    mode: str = "off"  # slurm.conf PreemptMode, lower case, without ",gang"
    exempt_time: int = 0  # slurm.conf PreemptExemptTime
    qos: Mapping[str, QosPreempt] = field(default_factory=dict)
    partition_modes: Mapping[str, str] = field(default_factory=dict)  # "" = the cluster's
    partition_tiers: Mapping[str, int] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.kind in ("preempt/qos", "preempt/partition_prio") and self.mode != "off"

    def mode_of(self, qos: str, partition: str) -> str:
        q = self.qos.get(qos or "normal")
        if q is not None and q.mode not in ("cluster", ""):
            return q.mode
        return self.partition_modes.get(partition) or self.mode

    def keeps_memory(self, qos: str, partition: str) -> bool:
        """A SUSPEND victim's processes stay in memory: its memory is not freed for the
        preemptor (Slurm's rule), only its CPUs and GPUs are lent."""
        return self.mode_of(qos, partition) == "suspend"

    def grace_of(self, qos: str) -> int:
        q = self.qos.get(qos or "normal")
        return q.grace_time if q is not None else 0

    def may_preempt(self, qos: str, partition: str, victim: Victim, now: float) -> bool:
        """May a job of (`qos`, `partition`) stop `victim` now?"""
        if self.mode_of(victim.qos, victim.partition) not in ("cancel", "requeue", "suspend") \
                or victim.lent:
            return False
        if self.kind == "preempt/qos":
            q = self.qos.get(qos or "normal")
            if q is None or (victim.qos or "normal") not in q.preempt:
                return False
        elif self.kind == "preempt/partition_prio":
            if self.partition_tiers.get(victim.partition, 1) \
                    >= self.partition_tiers.get(partition, 1):
                return False
        else:
            return False
        if victim.stopping:
            return True
        vq = self.qos.get(victim.qos or "normal")
        exempt = vq.exempt_time if vq is not None and vq.exempt_time is not None \
            else self.exempt_time
        return now - victim.start_time >= exempt

    def preempts_anyone(self, qos: str, partition: str) -> bool:
        """Whether a job of (`qos`, `partition`) could preempt at all (a cheap filter)."""
        if not self.active:
            return False
        if self.kind == "preempt/qos":
            q = self.qos.get(qos or "normal")
            return q is not None and bool(q.preempt)
        tier = self.partition_tiers.get(partition, 1)
        return any(t < tier for t in self.partition_tiers.values())


@dataclass(frozen=True, slots=True)
class Victim:
    """A running job as preemption sees it."""

    job_id: int
    qos: str
    partition: str
    start_time: float
    gpus: int  # over the whole job
    cpus: int
    stopping: bool = False  # already being preempted
    lent: bool = False  # suspended for a preemptor that uses its resources: never a victim

    def cost(self, now: float) -> tuple[float, float]:
        """Work lost by stopping it: (GPU-seconds, CPU-seconds) since it started."""
        if self.stopping:
            return (0.0, 0.0)
        run = max(0.0, now - self.start_time)
        return (run * self.gpus, run * self.cpus)


# one candidate on one node: (cost, cpus, mem, gpus it frees there, job id)
Candidate = tuple[tuple[float, float], int, int, int, int]


def _covers(free: tuple[int, int, int], need: tuple[int, int, int],
            chosen: Sequence[Candidate]) -> bool:
    c, m, g = free
    for _, dc, dm, dg, _ in chosen:
        c, m, g = c + dc, m + dm, g + dg
    return c >= need[0] and m >= need[1] and g >= need[2]


def _total(chosen: Sequence[Candidate]) -> tuple[float, float]:
    return (sum(x[0][0] for x in chosen), sum(x[0][1] for x in chosen))


def choose_on_node(free: tuple[int, int, int], need: tuple[int, int, int],
                   candidates: Sequence[Candidate], forced: Sequence[Candidate] = (),
                   exact_limit: int = EXACT_VICTIMS
                   ) -> tuple[tuple[float, float], list[int]] | None:
    """The cheapest set of `candidates` (plus all of `forced`) whose freed resources with
    `free` cover `need` (cpus, mem, gpus), as (cost, job ids); None if even all of them
    do not.  Exact up to `exact_limit` candidates, greedy beyond (module docstring)."""
    base = list(forced)
    if not _covers(free, need, base + list(candidates)):
        return None
    if _covers(free, need, base):
        return _total(base), [x[4] for x in base]
    pool = sorted(candidates, key=lambda x: (x[0], x[4]))
    if len(pool) <= exact_limit:
        got = _cheapest_cover(free, need, base, pool)
        assert got is not None  # every candidate together covers the need
        best = got
    else:
        chosen: list[Candidate] = []
        for x in pool:
            chosen.append(x)
            if _covers(free, need, base + chosen):
                break
        for x in sorted(chosen, key=lambda x: x[0], reverse=True):  # drop what is not needed
            rest = [y for y in chosen if y is not x]
            if _covers(free, need, base + rest):
                chosen = rest
        best = chosen
    picked = base + best
    return _total(picked), [x[4] for x in picked]


def _cheapest_cover(free: tuple[int, int, int], need: tuple[int, int, int],
                    base: Sequence[Candidate], pool: Sequence[Candidate]
                    ) -> list[Candidate] | None:
    """The exact search: include or skip each candidate (cheapest first), pruning a branch
    that already costs as much as the best set found or that cannot cover the need even
    with everything left (costs are never negative, so neither can improve)."""
    c0, m0, g0 = free
    for _, dc, dm, dg, _ in base:
        c0, m0, g0 = c0 + dc, m0 + dm, g0 + dg
    n = len(pool)
    left = [(0, 0, 0)] * (n + 1)  # resources of pool[i:]
    for i in range(n - 1, -1, -1):
        x = pool[i]
        nxt = left[i + 1]
        left[i] = (nxt[0] + x[1], nxt[1] + x[2], nxt[2] + x[3])
    best: list[Candidate] | None = None
    best_cost: tuple[float, float] | None = None
    chosen: list[Candidate] = []

    def search(i: int, c: int, m: int, g: int, cost: tuple[float, float]) -> None:
        nonlocal best, best_cost
        if c >= need[0] and m >= need[1] and g >= need[2]:
            if best_cost is None or cost < best_cost:
                best, best_cost = list(chosen), cost
            return
        if i == n or c + left[i][0] < need[0] or m + left[i][1] < need[1] \
                or g + left[i][2] < need[2]:
            return
        x = pool[i]
        with_x = (cost[0] + x[0][0], cost[1] + x[0][1])
        if best_cost is None or with_x < best_cost:
            chosen.append(x)
            search(i + 1, c + x[1], m + x[2], g + x[3], with_x)
            chosen.pop()
        search(i + 1, c, m, g, cost)

    search(0, c0, m0, g0, (0.0, 0.0))
    return best
