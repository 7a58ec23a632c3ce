"""Node health on the controller: when to ask the agents to run HealthCheckProgram, and what
a verdict does to a node.

    HealthCheckProgram    run as root on each node (agent.health), with SLURMD_NODENAME
    HealthCheckInterval   seconds between runs (0: only when the agent registers)
    HealthCheckNodeState  ANY, IDLE, ALLOC, MIXED, NONDRAINED_IDLE (comma-separated), and
                          CYCLE: the nodes in turn across the interval rather than all at once
    HealthCheckTimeout    the run's limit, killed past it (default 60 s; a Corral key)
    CorralHealthCheckResume  PASSED (default): `scontrol update state=resume` refuses a node
                          a health check drained until a check passes again; ANY: it does not

Slurm ignores the program's exit code (an NHC program drains through `scontrol` itself, and
still works here unchanged).  Corral also drains on a non-zero exit, with the program's
first line of output as the reason.  GPU verdicts come from every heartbeat: a hardware XID,
uncorrected ECC, failed or pending row remapping, a lost GPU drain the node; an XID that a
user's program causes (13, 31, 43) is logged against the node's jobs and drains nothing."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from corral.controller.cluster import NodeEventKind
from corral.controller.errors import SlurmError
from corral.model import messages
from corral.model.config import ClusterConfig
from corral.model.node import Node
from corral.model.timefmt import TimeFormatError, parse_time_limit

log = logging.getLogger("corral.controller")
events_log = logging.getLogger("corral.controller.events")

NODE_STATES = ("ANY", "IDLE", "ALLOC", "MIXED", "NONDRAINED_IDLE", "CYCLE")


def _seconds(text: str, default: int) -> int:
    text = text.strip()
    if not text:
        return default
    if text.isdigit():
        return int(text)
    try:
        return max(0, parse_time_limit(text))
    except TimeFormatError:
        return default


class HealthChecks:
    def __init__(self, config: ClusterConfig) -> None:
        self.reload(config)
        # when checks were last sent (CYCLE: to the last node): the next are due an
        # interval (CYCLE: its share) later, by the interval in force then, so a
        # reconfigure's shorter one applies at once, as in slurmctld
        self.last_run = float("-inf")
        self.cycle_at = 0  # CYCLE: the next node's place in name order
        # node -> source -> the failing verdict's reason; a passing verdict removes it
        self.failing: dict[str, dict[str, str]] = {}
        self.drained: set[str] = set()  # drained by a verdict, not yet resumed

    def reload(self, config: ClusterConfig) -> None:
        """slurm.conf's HealthCheck* settings (again after `scontrol reconfigure`; the
        verdicts so far are kept)."""
        o = config.options
        self.program = o.get("HealthCheckProgram", "").strip()
        self.interval = _seconds(o.get("HealthCheckInterval", "0"), 0)
        states = {s.strip().upper() for s in o.get("HealthCheckNodeState", "ANY").split(",")
                  if s.strip()}
        self.cycle = "CYCLE" in states
        self.states = (states - {"CYCLE"}) or {"ANY"}
        self.timeout = float(max(1, _seconds(o.get("HealthCheckTimeout", "60"), 60)))
        self.gate = o.get("CorralHealthCheckResume", "PASSED").strip().upper() != "ANY"

    def wanted(self, n: Node) -> bool:
        """Whether HealthCheckNodeState selects `n` now."""
        busy = bool(n.alloc_cpus or n.job_count)
        full = busy and n.alloc_cpus >= n.cpus
        for s in self.states:
            if s == "ANY" or (s == "IDLE" and not busy) or (s == "ALLOC" and full) \
                    or (s == "MIXED" and busy and not full) \
                    or (s == "NONDRAINED_IDLE" and not busy and n.admin_state == "up"):
                return True
        return False

    def due(self, nodes: dict[str, Node], now: float) -> list[str]:
        """The nodes to check at this tick (every HealthCheckInterval; CYCLE: one share)."""
        if not self.program or self.interval <= 0:
            return []
        names = sorted(nodes)
        # CYCLE: one node per interval/len(nodes) seconds, every node once per interval
        gap = self.interval / max(1, len(names)) if self.cycle else self.interval
        if now < self.last_run + gap:
            return []
        self.last_run = now
        if not self.cycle:
            return [n for n in names if self.wanted(nodes[n])]
        if not names:
            return []
        name = names[self.cycle_at % len(names)]
        self.cycle_at += 1
        return [name] if self.wanted(nodes[name]) else []

    def message(self, names: list[str]) -> dict[str, Any]:
        return {"type": "health_check", "nodes": names, "program": self.program,
                "timeout": self.timeout}

    def refuse_resume(self, n: Node) -> None:
        """`scontrol update state=resume` of a node a verdict drained: only once it passes."""
        if not self.gate or n.name not in self.drained:
            return
        why = self.failing.get(n.name)
        if why:
            raise SlurmError(f"Node {n.name} still fails its health check "
                             f"({next(iter(why.values()))}): not resumed", 0)

    def resumed(self, n: Node) -> None:
        self.drained.discard(n.name)


class HealthVerdicts:
    """Applies the agents' verdicts to the controller's nodes (a mixin-free helper: the
    controller passes itself)."""

    def __init__(self, ctl: Any) -> None:
        self.ctl = ctl

    def apply(self, reports: list[messages.HealthReport], agent_nodes: list[str]) -> None:
        ctl = self.ctl
        checks: HealthChecks = ctl.health
        now = ctl.clock()
        for r in reports:
            n = ctl.nodes.get(r.node)
            if n is None or r.node not in agent_nodes:
                continue
            for ev in r.gpu_events:
                if not ev.drains:
                    self._log_user_xid(n, ev)
            failing = checks.failing.setdefault(n.name, {})
            if r.ok:
                failing.pop(r.source, None)
                continue
            first = r.source not in failing
            failing[r.source] = r.reason
            if first:
                events_log.warning("node %s failed its %s health check: %s", n.name,
                                   "GPU" if r.source == "gpu" else "program", r.reason)
            if n.admin_state == "up":
                n.admin_state = "drain"
                n.reason, n.reason_user, n.reason_uid, n.reason_time = \
                    r.reason or "health check failed", "root", 0, now
                checks.drained.add(n.name)
                ctl.node_event(n, NodeEventKind.DRAINED, "health")
                ctl.mark_node(n)
        ctl.request_schedule()

    def _log_user_xid(self, n: Node, ev: messages.GpuHealthEvent) -> None:
        jobs = [j for j in self.ctl.running.values()
                if any(a.node == n.name and (not a.gpus or ev.gpu in a.gpus) for a in j.alloc)]
        if not jobs:
            events_log.info("node %s: %s (no job on it; node not drained)", n.name, ev.text)
        for j in jobs:
            events_log.info("job %s on node %s: %s (node not drained)", j.display_id(),
                            n.name, ev.text)


Send = Callable[[dict[str, Any]], None]


def tick(ctl: Any, now: float) -> None:
    """From the controller's periodic task: ask the agents for the checks that are due."""
    checks: HealthChecks = ctl.health
    names = checks.due(ctl.nodes, now)
    by_sender: dict[int, tuple[Send, list[str]]] = {}
    for name in names:
        send = ctl.agent_senders.get(name)
        if send is not None:
            by_sender.setdefault(id(send), (send, []))[1].append(name)
    for send, group in by_sender.values():
        send(checks.message(group))


def on_registered(ctl: Any, names: list[str], send: Send) -> None:
    """An agent registered: its nodes are checked at once (Slurm: before registering)."""
    checks: HealthChecks = ctl.health
    if checks.program and names:
        send(checks.message(names))
