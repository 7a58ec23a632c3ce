"""Cluster state: nodes, partitions, and the ledger of what each job holds on them.

A job's allocation is charged to its nodes once when it starts (or is recovered) and
released once when it ends; the ledger remembers which jobs are charged, so a duplicate or
forged end report can never release twice, and a node's free CPUs, memory and GPUs never go
negative."""

from __future__ import annotations

import logging
from collections.abc import Callable
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

    def charge(self, job: Job) -> None:
        if job.job_id in self.charged:
            log.error("job %d is already charged to its nodes; not charged twice", job.job_id)
            return
        self.charged.add(job.job_id)
        for a in job.alloc:
            n = self.nodes.get(a.node)
            if n is not None:
                self._take(n, job, a.cpus, a.mem_mb, a.gpus, a)

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
        for a in job.alloc:
            n = self.nodes.get(a.node)
            if n is None:
                continue
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
