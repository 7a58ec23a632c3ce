"""What agents report, a part of the core: registration, contact and silence, ended batch
steps, and the CPUs a job was bound to.

Everything an agent says is untrusted: a report for an unknown job, for a job that does
not run on that agent's nodes, with a state no batch step ends in, or a duplicate, is
refused alone (logged), never raises, and never releases resources twice.  Which nodes
have a live link is told by the shell (`linked`); the links themselves are the shell's."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

from corral.controller.cluster import NOT_RESPONDING_REASON, NodeEventKind
from corral.controller.core.effects import Control
from corral.controller.core.lifecycle import AGENT_END_STATES
from corral.model.job import Job
from corral.model.node import Node

if TYPE_CHECKING:
    from corral.controller.core.core import Core

log = logging.getLogger("corral.controller")


class AgentReports:
    def __init__(self, core: Core) -> None:
        self.core = core
        self.linked: set[str] = set()  # nodes whose agent has a live link (the shell's)
        self.silent_nodes: set[str] = set()  # reported not responding, until re-registered

    def registered(self, node_names: list[str], hw: dict[str, Any], running: list[int],
                   now: float) -> None:
        core = self.core
        for name in node_names:
            n = core.nodes[name]
            was_down = not n.responding
            n.responding = True
            n.registered = True
            n.agent_start_time = hw.get("start_time", now)
            n.boot_time = hw.get("boot_time")
            n.arch = hw.get("arch", "")
            n.os = hw.get("os", "")
            n.hostname = hw.get("hostname", "")
            n.addr = n.addr or hw.get("addr", "")
            n.last_contact = now
            if n.reason == NOT_RESPONDING_REASON:
                if n.admin_state == "down" and core.settings.return_to_service >= 1:
                    n.admin_state = "up"  # ReturnToService: down only for silence, it comes back
                if n.admin_state == "up":
                    n.reason = n.reason_user = None
                    n.reason_uid = n.reason_time = None
                core.out.node(n.name)
            if was_down:
                self.silent_nodes.discard(name)
                core.node_event(n, NodeEventKind.REGISTERED, now)
            self.linked.add(name)
        # a job we think runs on these nodes but the agent does not know: it was lost
        alive = {j for j in running if isinstance(j, int)}
        ending = core.lifecycle.ending
        for job in list(core.running.values()):
            # (one whose batch step already ended, waiting for its srun steps, is not lost)
            if job.batch and job.batch_host in node_names and job.job_id not in alive \
                    and job.job_id not in ending:
                log.warning("job %d unknown to the agent of %s after restart", job.job_id, job.batch_host)
                job.kill_reason = job.kill_reason or "NODE_FAIL"
                core.lifecycle.job_ended(job.job_id, "NODE_FAIL", 0, 0, now, now)
        # and one the agent still runs that we gave up on (node failed, job requeued elsewhere)
        for jid in alive:
            known = core.jobs.get(jid)
            if known is None or not known.state.active or known.batch_host not in node_names:
                log.warning("agent still runs job %d which ended here; killing it", jid)
                if node_names:
                    core.out.emit(Control(jid, node_names[0], {"op": "cancel"}))
        core.out.schedule()

    def job_ended(self, ev: Any, node_names: list[str], now: float) -> Job | None:
        """An agent's `ended` report, validated: applied only for a job that runs on one
        of that agent's nodes, with a state a batch step ends in; anything else is logged
        and refused alone (None), never raised."""
        if not isinstance(ev, dict):
            log.warning("malformed end report from %s refused", node_names)
            return None
        jid, state = ev.get("job_id"), ev.get("state", "FAILED")
        code, sig, end = ev.get("exit_code", 0), ev.get("signal", 0), ev.get("end_time")
        if isinstance(jid, bool) or not isinstance(jid, int) or not isinstance(state, str) \
                or state not in AGENT_END_STATES \
                or isinstance(code, bool) or not isinstance(code, int) or not 0 <= code <= 255 \
                or isinstance(sig, bool) or not isinstance(sig, int) or not 0 <= sig < 128 \
                or (end is not None and (not isinstance(end, int | float) or not math.isfinite(end))):
            log.warning("invalid end report from %s refused: %.200r", node_names, ev)
            return None
        job = self.core.jobs.get(jid)
        if job is None:
            log.warning("end report from %s for unknown job %d refused", node_names, jid)
            return None
        if job.batch_host not in node_names:
            log.warning("end report from %s for job %d refused: it runs on %s", node_names,
                        jid, job.batch_host)
            return None
        if not job.state.active:
            log.info("duplicate end report for job %d (already %s) ignored", jid, job.state.value)
            return None
        return self.core.lifecycle.job_ended(jid, state, code, sig, float(end) if end else now,
                                             now)

    def add_dynamic_node(self, name: str, hw: dict[str, Any], now: float) -> Node:
        """A node that joined (`corral join`) without being in the configuration.

        It gets the hardware its agent detected (memory less 5% for the OS, as `corral up`
        writes it) and joins the default partition. It lives in memory only: after a
        controller restart its agent re-joins when it reconnects.
        """
        core = self.core
        if name in core.nodes:
            return core.nodes[name]
        if not name or len(name) > 64 or not all(c.isalnum() or c in "-_." for c in name) \
                or not name[0].isalnum():
            raise ValueError(f"Invalid node name specified: {name!r}")
        cpus = max(1, int(hw.get("cpus") or 1))
        gpus = hw.get("gpus") or 0
        sockets = max(1, int(hw.get("sockets") or 1))
        threads = max(1, int(hw.get("threads_per_core") or 1))
        node = Node(name=name, cpus=cpus,
                    real_memory=max(1, int(int(hw.get("memory_mb") or 1) * 0.95)),
                    gpus=len(gpus) if isinstance(gpus, list) else int(gpus),
                    gpu_type=hw.get("gpu_type") or None, sockets=sockets,
                    cores_per_socket=max(1, int(hw.get("cores_per_socket")
                                                or cpus // (sockets * threads))),
                    threads_per_core=threads,
                    addr=str(hw.get("addr") or ""), hostname=str(hw.get("hostname") or ""))
        part = core.config.default_partition()
        if part is not None:
            part.nodes.append(name)
            node.partitions.append(part.name)
        core.nodes[name] = node
        # jobs recovered after a controller restart may still hold resources here
        core.cluster.charge_new_node(node, list(core.running.values()))
        core.node_event(node, NodeEventKind.JOINED, now)
        return node

    def contact(self, node_names: list[str], now: float) -> None:
        for name in node_names:
            self.core.nodes[name].last_contact = now

    def lost(self, node_names: list[str]) -> None:
        """The link of these nodes' agent closed (the shell checked it was theirs)."""
        for name in node_names:
            self.linked.discard(name)
            self.core.nodes[name].responding = False

    def check_silence(self, now: float) -> None:
        """Nodes silent for SlurmdTimeout: NOT_RESPONDING, their jobs NODE_FAIL or requeued."""
        core = self.core
        timeout = core.settings.slurmd_timeout
        if timeout <= 0:
            return
        lifecycle = core.lifecycle
        for n in core.nodes.values():
            if not n.registered or n.last_contact is None or now - n.last_contact < timeout:
                continue
            if n.name in self.linked and n.responding:
                continue  # connected and heartbeating
            n.responding = False
            if n.name not in self.silent_nodes:  # once per silence, however it was noticed
                self.silent_nodes.add(n.name)
                core.node_event(n, NodeEventKind.NOT_RESPONDING, now)
            victims = [j for j in core.running.values() if n.name in j.nodes]
            for job in victims:
                if job.job_id in lifecycle.ending:  # over already; its steps there are given up
                    lifecycle.steps_changed(job.job_id, now)
                    continue
                log.warning("node %s not responding for %ds: job %d fails", n.name, timeout, job.job_id)
                if job.batch:
                    job.kill_reason = "NODE_FAIL"
                    lifecycle.job_ended(job.job_id, "NODE_FAIL", 0, 0, now, now)
                else:
                    lifecycle.end_allocation(job, "NODE_FAIL", now)
            if core.settings.return_to_service == 0 and n.admin_state == "up":
                n.admin_state = "down"
                n.reason, n.reason_user, n.reason_uid, n.reason_time = NOT_RESPONDING_REASON, "root", 0, now
                core.node_event(n, NodeEventKind.DOWN, now)
                core.out.node(n.name)

    def bound_cpus(self, job_id: int, node_name: str, cpu_ids: Any) -> bool:
        """The agent of `node_name` bound job `job_id` to these real CPU ids: they replace
        the ledger's indices in the job's allocation (`scontrol -d show job` CPU_IDs=).
        A report for a job not on that node, or with a wrong count, changes nothing."""
        core = self.core
        job = core.jobs.get(job_id)
        if job is None or not job.state.active or not isinstance(cpu_ids, list) \
                or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0
                           for c in cpu_ids):
            return False
        node = core.nodes.get(node_name)
        for a in job.alloc:
            if a.node != node_name or len(cpu_ids) != a.cpus or node is None:
                continue
            for c in a.cpu_ids or ():
                if c in node.used_cpu_ids:
                    node.used_cpu_ids.remove(c)
            a.cpu_ids = sorted(cpu_ids)
            node.used_cpu_ids.extend(a.cpu_ids)
            core.out.job(job)
            return True
        return False
