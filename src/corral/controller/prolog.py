"""Prolog and Epilog: the controller tells each allocated node's agent of a job's start and
end (agent.prolog runs the scripts), and acts on a failure.

    Prolog, Epilog          run as root on every node of the allocation, with Slurm's
                            environment (SLURM_JOB_ID, SLURM_JOB_USER, SLURM_JOB_UID, …)
    PrologFlags             Alloc: the Prolog runs at allocation on every node; without it,
                            before the batch step on its node and before a node's first srun
                            step; Contain is taken as Alloc (no extern step); Serial runs
                            one script at a time per node
    PrologEpilogTimeout     a script running longer is killed (default: no limit)

A failing Prolog drains the node ("Prolog error") and requeues a batch job held (not held
with SchedulerParameters=nohold_on_prolog_fail; an allocation without a script fails); a
failing Epilog drains the node ("Epilog error").  The messages go only when a Prolog or an
Epilog is configured, and after the commit that started the job, so a batch launch follows
its node's job start on the same link."""

from __future__ import annotations

import logging
import os
from typing import Any

from corral.controller.cluster import NodeEventKind
from corral.controller.jobs import JobEvent, JobEventKind
from corral.model import hostlists, messages
from corral.model.config import ClusterConfig
from corral.model.job import Job, JobState

log = logging.getLogger("corral.controller")
events_log = logging.getLogger("corral.controller.events")

PROLOG_ERROR = "Prolog error"
EPILOG_ERROR = "Epilog error"


class PrologSettings:
    def __init__(self, config: ClusterConfig) -> None:
        o = config.options
        self.prolog = o.get("Prolog", "").strip()
        self.epilog = o.get("Epilog", "").strip()
        flags = {f.strip().lower() for f in o.get("PrologFlags", "").split(",") if f.strip()}
        self.alloc = bool(flags & {"alloc", "contain"})
        self.serial = "serial" in flags
        raw = o.get("PrologEpilogTimeout", "").strip()
        # 65534 is Slurm's "wait indefinitely"
        self.timeout: float | None = float(raw) if raw.isdigit() and 0 < int(raw) < 65534 \
            else None
        params = {p.strip().lower() for p in o.get("SchedulerParameters", "").split(",")}
        self.hold_on_fail = "nohold_on_prolog_fail" not in params

    @property
    def active(self) -> bool:
        return bool(self.prolog or self.epilog)


class PrologEpilog:
    """Subscribed to the job table; `ctl` is the controller (its base's attributes)."""

    def __init__(self, ctl: Any, config: ClusterConfig) -> None:
        self.ctl = ctl
        self.settings = PrologSettings(config)
        self.nodes_of: dict[int, list[str]] = {}  # a started run's nodes, until its end
        self.subscribed = False
        self.reload(config)

    def reload(self, config: ClusterConfig) -> None:
        """slurm.conf's Prolog settings, again after `scontrol reconfigure`."""
        self.settings = PrologSettings(config)
        if self.settings.active and not self.subscribed:
            self.ctl.table.subscribe(self.on_job_event)
            self.subscribed = True

    def on_job_event(self, ev: JobEvent) -> None:
        job = ev.job
        if not self.settings.active and ev.kind is JobEventKind.STARTED:
            return  # a reconfigure removed them; runs started before still get their end
        if ev.kind is JobEventKind.STARTED and job.alloc:
            self.nodes_of[job.job_id] = list(job.nodes)
            self._send_start(job)
        elif ev.kind in (JobEventKind.ENDED, JobEventKind.REQUEUED):
            nodes = self.nodes_of.pop(job.job_id, None)
            if nodes is None and ev.kind is JobEventKind.ENDED and ev.old is not None \
                    and ev.old.active:
                nodes = list(job.nodes)  # started before a controller restart
            if nodes:
                self._send_end(job, nodes)
        elif ev.kind is JobEventKind.UNSTARTED:  # its job_start was never sent
            self.nodes_of.pop(job.job_id, None)

    def environment(self, job: Job, nodes: list[str]) -> dict[str, str]:
        """Slurm's Prolog/Epilog environment (the node's own names are set on the agent)."""
        from corral.controller.identity import group_name

        ctl = self.ctl
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
               "SLURM_JOB_ID": str(job.job_id), "SLURM_JOBID": str(job.job_id),
               "SLURM_JOB_USER": job.user, "SLURM_JOB_UID": str(job.uid),
               "SLURM_JOB_GID": str(job.gid), "SLURM_JOB_GROUP": group_name(job.gid),
               "SLURM_JOB_NODELIST": hostlists.compress(nodes),
               "SLURM_JOB_PARTITION": job.partition, "SLURM_JOB_ACCOUNT": job.account,
               "SLURM_JOB_NAME": job.name, "SLURM_CLUSTER_NAME": ctl.cluster_name,
               "SLURM_UID": str(job.uid)}
        if job.constraint:
            env["SLURM_JOB_CONSTRAINTS"] = job.constraint
        if job.array_job_id is not None and job.array_task_id is not None:
            env["SLURM_ARRAY_JOB_ID"] = str(job.array_job_id)
            env["SLURM_ARRAY_TASK_ID"] = str(job.array_task_id)
        if ctl.config_path:
            env["SLURM_CONF"] = ctl.config_path
        if ctl.home:
            env["CORRAL_HOME"] = ctl.home  # the commands a script runs find this cluster
        return env

    def _by_agent(self, nodes: list[str]) -> list[tuple[Any, list[str]]]:
        groups: dict[int, tuple[Any, list[str]]] = {}
        for name in nodes:
            send = self.ctl.agent_senders.get(name)
            if send is not None:
                groups.setdefault(id(send), (send, []))[1].append(name)
        return list(groups.values())

    def _send_start(self, job: Job) -> None:
        s = self.settings
        env = self.environment(job, job.nodes)
        gpus = {a.node: ",".join(str(g) for g in a.gpus) for a in job.alloc if a.gpus}
        for send, names in self._by_agent(job.nodes):
            msg = messages.JobStart(
                job_id=job.job_id, nodes=names, batch_host=job.batch_host or "",
                prolog=s.prolog, epilog=s.epilog, timeout=s.timeout, alloc=s.alloc,
                serial=s.serial, env=env, gpus={n: gpus[n] for n in names if n in gpus})
            # after the commit that started the job, before its launch on the same link
            self.ctl.writer.after_commit(send, msg.to_dict())

    def _send_end(self, job: Job, nodes: list[str]) -> None:
        status = (job.exit_code << 8) | (job.term_signal & 0x7F)
        env = {"SLURM_JOB_EXIT_CODE": str(status),
               "SLURM_JOB_EXIT_CODE2": f"{job.exit_code}:{job.term_signal}"}
        for send, names in self._by_agent(nodes):
            self.ctl.writer.after_commit(
                send, messages.JobEnd(job_id=job.job_id, nodes=names, env=env).to_dict())

    # ---- a failure on a node ------------------------------------------------------
    def failed(self, msg: messages.PrologResult) -> None:
        ctl = self.ctl
        now = ctl.clock()
        n = ctl.nodes.get(msg.node)
        if n is None:
            return
        reason = PROLOG_ERROR if msg.kind == "prolog" else EPILOG_ERROR
        events_log.warning("job %d: %s on node %s: %s", msg.job_id, reason, n.name, msg.reason)
        if n.admin_state != "down":
            n.admin_state = "drain"
            n.reason, n.reason_user, n.reason_uid, n.reason_time = reason, "root", 0, now
            ctl.node_event(n, NodeEventKind.DRAINED, msg.kind)
            ctl.mark_node(n)
        job = ctl.jobs.get(msg.job_id)
        if msg.kind == "prolog" and job is not None and job.state == JobState.RUNNING \
                and n.name in job.nodes:
            self._requeue(job, n.name, now)
        ctl.request_schedule()

    def _requeue(self, job: Job, node: str, now: float) -> None:
        """Slurm requeues a job whose Prolog failed, held unless nohold_on_prolog_fail."""
        ctl = self.ctl
        if not job.batch:
            ctl.end_allocation(job, "NODE_FAIL")
            return
        job.kill_reason = "REQUEUE_HOLD" if self.settings.hold_on_fail else "REQUEUE"
        if node == job.batch_host:
            # its batch step never started: no supervisor will report an end
            ctl.job_ended(job.job_id, "FAILED", 1, 0, now, note=PROLOG_ERROR)
        else:
            ctl.set_state(job, JobState.COMPLETING, now)
            ctl._send_control(job, {"op": "cancel"})
            ctl.mark(job)
