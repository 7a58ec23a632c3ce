"""Cluster state: nodes, partitions, and the ledger of what each job holds on them.

A job's allocation is charged to its nodes once when it starts (or is recovered) and
released once when it ends; the ledger remembers which jobs are charged, so a duplicate or
forged end report can never release twice, and a node's free CPUs, memory and GPUs never go
negative.

Preemption by suspension lends: a suspended victim's GPUs and CPUs stay charged to it, and
the preemptor that runs on them is charged only for the rest (`lend`, `loans`).  When the
preemptor ends, what it borrowed is the victim's again, which resumes; if the victim ends
first, what it lent becomes the preemptor's.  No third job ever sees lent resources free."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

from corral.model.job import Job, NodeAlloc
from corral.model.node import Node, Partition
from corral.store.base import NodeRecord

log = logging.getLogger("corral.controller")

NOT_RESPONDING_REASON = "Not responding"


class NodeEventKind(StrEnum):
    REGISTERED = "registered"  # its agent connected
    JOINED = "joined"  # a node not in the configuration joined (corral join)
    NOT_RESPONDING = "not responding"
    DRAINED = "drained"
    DOWN = "down"
    RESUMED = "resumed"
    HEALTH = "health"  # the agent's health check changed its verdict (reason: what it saw)


@dataclass(frozen=True, slots=True)
class NodeEvent:
    kind: NodeEventKind
    node: Node
    reason: str | None
    time: float
    source: str = ""  # what made the change when not an operator: "health", "prolog", …


class Cluster:
    def __init__(self, nodes: list[Node], partitions: list[Partition]) -> None:
        self.nodes: dict[str, Node] = {n.name: n for n in nodes}
        self.partitions: dict[str, Partition] = {p.name: p for p in partitions}
        self.charged: set[int] = set()  # jobs whose allocation is held on the nodes
        # preemptor -> suspended victim -> what it borrows of the victim's allocation
        self.loans: dict[int, dict[int, list[NodeAlloc]]] = {}
        self.subscribers: list[Callable[[NodeEvent], None]] = []

    def emit(self, kind: NodeEventKind, node: Node, now: float, source: str = "") -> None:
        """Tell every subscriber about a change of a node's availability."""
        ev = NodeEvent(kind, node, node.reason, now, source)
        for cb in list(self.subscribers):
            try:
                cb(ev)
            except Exception:
                log.exception("subscriber failed on %s of node %s", kind, node.name)

    def node_record(self, name: str) -> NodeRecord:
        n = self.nodes[name]
        return NodeRecord(n.name, n.admin_state, n.reason, n.reason_user, n.reason_uid, n.reason_time)

    def lend(self, victim: Job, preemptor_id: int, alloc: list[NodeAlloc]) -> None:
        """The suspended `victim` lends what the preemptor's `alloc` needs of its own
        allocation (before the preemptor is charged, or again after a restart)."""
        borrowed = self.loans.setdefault(preemptor_id, {})
        borrowed[victim.job_id] = lent_parts(alloc, victim.alloc, borrowed.values())

    def lenders(self, preemptor_id: int) -> list[int]:
        """The suspended victims whose resources `preemptor_id` runs on."""
        return list(self.loans.get(preemptor_id, ()))

    def charge(self, job: Job) -> None:
        if job.job_id in self.charged:
            log.error("job %d is already charged to its nodes; not charged twice", job.job_id)
            return
        self.charged.add(job.job_id)
        borrowed = self.loans.get(job.job_id)
        for a in job.alloc:
            n = self.nodes.get(a.node)
            if n is None:
                continue
            lent = [p for parts in (borrowed or {}).values() for p in parts if p.node == a.node]
            if not lent:
                self._take(n, job, a.cpus, a.mem_mb, a.gpus, a)
                continue
            own = alloc_without(a, lent)  # only what is not borrowed is taken from the node
            self._take(n, job, own.cpus, own.mem_mb, own.gpus, own)
            if a.cpu_ids is None:
                a.cpu_ids = [c for p in lent for c in p.cpu_ids or ()] + (own.cpu_ids or [])

    @staticmethod
    def _take(n: Node, job: Job, cpus: int, mem: int, gpus: list[int],
              a: NodeAlloc | None = None) -> None:
        if a is not None:
            # CPU indices: the lowest free ones, unless the record names them (recovery,
            # or ids the agent bound); `scontrol -d show job` prints them as CPU_IDs=
            used = set(n.used_cpu_ids)
            if a.cpu_ids is None:
                free = [i for i in range(max(n.cpus, cpus)) if i not in used]
                a.cpu_ids = free[:cpus]
            n.used_cpu_ids.extend(a.cpu_ids)
        n.alloc_cpus += cpus
        n.alloc_mem += mem
        n.alloc_gpus.extend(gpus)
        n.job_count += 1
        if job.exclusive:
            n.exclusive_job = job.job_id

    def charge_new_node(self, node: Node, running: list[Job]) -> None:
        """Jobs recovered after a restart may hold resources on a node that joins later."""
        for job in running:
            for a in job.alloc:
                if a.node == node.name:
                    self._take(node, job, a.cpus, a.mem_mb, a.gpus, a)

    def release(self, job: Job, now: float) -> bool:
        """Give back what `job` holds; False (and nothing changes) if it holds nothing."""
        if job.job_id not in self.charged:
            return False
        self.charged.discard(job.job_id)
        # what it borrowed goes back to its victims; what it lent becomes its preemptor's
        kept = [p for parts in self.loans.pop(job.job_id, {}).values() for p in parts]
        for borrowed in self.loans.values():
            kept.extend(borrowed.pop(job.job_id, ()))
        for whole in job.alloc:
            n = self.nodes.get(whole.node)
            if n is None:
                continue
            here = [p for p in kept if p.node == whole.node]
            a = alloc_without(whole, here) if here else whole
            n.alloc_cpus -= a.cpus
            n.alloc_mem -= a.mem_mb
            for c in a.cpu_ids or ():
                if c in n.used_cpu_ids:
                    n.used_cpu_ids.remove(c)
            for g in a.gpus:
                if g in n.alloc_gpus:
                    n.alloc_gpus.remove(g)
            n.job_count -= 1
            if n.exclusive_job == job.job_id:
                n.exclusive_job = None
            n.last_busy = now
            if n.alloc_cpus < 0 or n.alloc_mem < 0 or n.job_count < 0:
                # cannot happen with the ledger; never show negative free resources anyway
                log.error("node %s accounting went negative releasing job %d; reset",
                          n.name, job.job_id)
                n.alloc_cpus = max(0, n.alloc_cpus)
                n.alloc_mem = max(0, n.alloc_mem)
                n.job_count = max(0, n.job_count)
        return True


def lent_parts(alloc: list[NodeAlloc], victim_alloc: list[NodeAlloc],
               earlier: Iterable[list[NodeAlloc]] = ()) -> list[NodeAlloc]:
    """What a preemptor's `alloc` borrows of one victim's allocation, node by node: the
    victim's GPUs it uses, and CPUs up to what it needs beyond what `earlier` victims
    already lend there (their CPU ids: the preemptor is bound to them).  Memory is not
    lent: the suspended job's processes still hold it, the preemptor's is its own."""
    taken: dict[str, list[NodeAlloc]] = {}
    for parts in earlier:
        for p in parts:
            taken.setdefault(p.node, []).append(p)
    out: list[NodeAlloc] = []
    for v in victim_alloc:
        a = next((x for x in alloc if x.node == v.node), None)
        if a is None:
            continue
        need = alloc_without(a, taken.get(v.node, []))
        cpus = min(need.cpus, v.cpus)
        gpus = [g for g in need.gpus if g in v.gpus]
        ids: list[int] | None = None
        if v.cpu_ids is not None:  # the victim's, or (recovered) those the preemptor has of it
            ids = (v.cpu_ids if a.cpu_ids is None
                   else [c for c in a.cpu_ids if c in v.cpu_ids])[:cpus]
        if cpus or gpus:  # never memory: the frozen processes keep theirs (as in Slurm)
            out.append(NodeAlloc(v.node, cpus, 0, gpus, ids))
    return out


def alloc_without(a: NodeAlloc, parts: list[NodeAlloc]) -> NodeAlloc:
    """`a` without `parts` (on the same node)."""
    gone_gpus = {g for p in parts for g in p.gpus}
    gone_ids = {c for p in parts for c in p.cpu_ids or ()}
    return NodeAlloc(a.node, max(0, a.cpus - sum(p.cpus for p in parts)),
                     max(0, a.mem_mb - sum(p.mem_mb for p in parts)),
                     [g for g in a.gpus if g not in gone_gpus],
                     None if a.cpu_ids is None else [c for c in a.cpu_ids if c not in gone_ids])
