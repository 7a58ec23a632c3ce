"""Node history: every drain, down, resume and health verdict of a node, kept in the store
(`node_events`) through the group-commit writer, so `sacctmgr list event` and sreport's
down time still count a period after the node is back in service.

A node out of service has one open event (its state, reason, who and since when); a change
of state closes it and opens the next, and a resume (or a node that comes back by itself)
closes it.  Events are written in the order they happen, in the writer's next commit."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from corral.controller.cluster import NOT_RESPONDING_REASON, Cluster, NodeEvent, NodeEventKind
from corral.model.node import Node
from corral.store.base import NodeHistoryEnd, NodeHistoryEntry

log = logging.getLogger("corral.controller")

KILL_TASK_FAILED = "Kill task failed"  # controller/core/lifecycle.py's drain reason
_OPENS = (NodeEventKind.DRAINED, NodeEventKind.DOWN, NodeEventKind.NOT_RESPONDING)


def compact_state(n: Node) -> str:
    """Slurm's node_state_string_compact for a node out of service."""
    if n.admin_state == "down" or (not n.registered and not n.responding):
        s = "DOWN"
    elif n.admin_state == "drain":
        s = "DRNG" if n.alloc_cpus or n.job_count else "DRAIN"
    else:
        s = "IDLE" if not (n.alloc_cpus or n.job_count) else "MIXED"
    return s + ("*" if not n.responding else "")


def _source(ev: NodeEvent) -> str:
    """What made a change that names none: the controller's own (silence, an unkillable
    step), else an operator (scontrol update)."""
    if ev.kind is NodeEventKind.NOT_RESPONDING or ev.reason in (NOT_RESPONDING_REASON,
                                                                 KILL_TASK_FAILED):
        return "controller"
    return "admin"


def in_service(n: Node) -> bool:
    return n.admin_state == "up" and n.responding


class NodeHistory:
    def __init__(self, cluster: Cluster, write: Callable[[NodeHistoryEntry | NodeHistoryEnd], None],
                 cluster_name: str, store: Any) -> None:
        self.cluster_name = cluster_name
        self._write = write
        # node -> start of its open event (read back after a restart)
        self.open: dict[str, float] = {}
        try:
            for e in store.query_events(cluster=cluster_name, start=float("inf")):
                if e.end is None:
                    self.open[e.node] = e.start
        except Exception:  # a store without history: the live state stands in (api_accounts)
            log.debug("no node history in the store", exc_info=True)
        cluster.subscribers.append(self.on_event)

    def on_event(self, ev: NodeEvent) -> None:
        n = ev.node
        if ev.kind in _OPENS:
            if ev.kind is NodeEventKind.NOT_RESPONDING and n.admin_state != "up" \
                    and n.name in self.open:
                return  # drained or down already: its open event goes on
            self._close(n.name, ev.time)
            self._open(n, ev.time, ev.source or _source(ev))
        elif ev.kind in (NodeEventKind.RESUMED, NodeEventKind.REGISTERED) and in_service(n):
            self._close(n.name, ev.time)

    def _open(self, n: Node, now: float, source: str) -> None:
        reason = n.reason or ("Not responding" if not n.responding else "")
        self.open[n.name] = now
        self._write(NodeHistoryEntry(self.cluster_name, n.name, now, compact_state(n), reason,
                                n.reason_uid, None, n.reason_user, source))

    def _close(self, node: str, now: float) -> None:
        if self.open.pop(node, None) is not None:
            self._write(NodeHistoryEnd(self.cluster_name, node, now))
