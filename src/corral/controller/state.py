"""The controller: one composition root over its parts, for the API layer, the step manager
and the controller's other modules.

    core/       the core: job table and state machine, cluster ledger, usage, lifecycle,
                passes, agent reports — memory and decisions, no I/O; emits typed effects
    shell.py    executes the effects: the group-commit writer, agent links, pass cadence,
                the wall clock; the only part that talks to the store
    identity.py who the caller is, who is an operator or a coordinator
    usecases.py submit, signal, hold, release, requeue, suspend, update, node admin, with
                their authorization, carried out by the core
    accounts.py the association database (sacctmgr)

`Controller` holds these, wires them (the pass reads the reservations, an accounting
change asks for a pass), and names what the modules written against it read and call;
it holds no state of its own and decides nothing.  All methods run on the event loop."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from corral.controller.accounts import Accounts
from corral.controller.cluster import NOT_RESPONDING_REASON, Cluster, NodeEventKind
from corral.controller.core import Core, Effect
from corral.controller.core.lifecycle import StepTable
from corral.controller.core.passes import node_view
from corral.controller.core.settings import CoreSettings, sched_params
from corral.controller.ctld_scripts import CtldScripts
from corral.controller.errors import (
    ESLURM_ACCESS_DENIED,
    ESLURM_ALREADY_DONE,
    ESLURM_DEPENDENCY,
    ESLURM_INVALID_ARRAY,
    ESLURM_INVALID_JOB_ID,
    ESLURM_INVALID_NODE_NAME,
    ESLURM_INVALID_PARTITION_NAME,
    ESLURM_INVALID_TIME_LIMIT,
    ESLURM_JOB_PENDING,
    ESLURM_PARTITION_NOT_AVAIL,
    ESLURM_PATHNAME_TOO_LONG,
    ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE,
    ESLURM_TRANSITION_STATE_NO_UPDATE,
    SlurmError,
)
from corral.controller.errors import invalid_job as _invalid_job
from corral.controller.estimates import StartEstimates
from corral.controller.health import HealthChecks, HealthVerdicts
from corral.controller.history import NodeHistory
from corral.controller.identity import Authority, Identity, group_name, user_name
from corral.controller.jobs import JobEvent, JobEventKind, JobTable
from corral.controller.launch import parse_signal_spec
from corral.controller.persist import AccountingThroughWriter, GroupCommitWriter
from corral.controller.prolog import PrologEpilog
from corral.controller.shell import Clock, PassDriver, Send, Shell
from corral.controller.usecases import UseCases
from corral.model.config import ClusterConfig
from corral.model.job import Job, JobState, NodeAlloc
from corral.model.jobspec import FIELD_NAMES as SPEC_FIELDS
from corral.model.node import Node, Partition
from corral.model.reasons import PendingReason
from corral.sched import deps as sched_deps
from corral.sched.fairshare import FairshareParams, UsageState
from corral.sched.limits import PolicySnapshot
from corral.sched.pipeline import Decision, SchedParams
from corral.sched.snapshot import NodeView
from corral.store.base import Store

log = logging.getLogger("corral.controller")
events_log = logging.getLogger("corral.controller.events")


class Controller:
    def __init__(self, config: ClusterConfig, store: Store, *, config_path: str = "",
                 home: str = "", clock: Clock | None = None,
                 pass_driver: PassDriver | None = None,
                 execute: Callable[[Effect], None] | None = None) -> None:
        """`pass_driver`: when passes run (the event loop by default; the harness's hand,
        the simulator's queue); `execute`: who carries out the core's effects (the shell
        by default; the simulator's runtime model)."""
        self.config = config
        self.config_path = config_path
        self.home = home
        self.core = Core(config, usage=UsageState.from_dict(store.load_usage_state()),
                         reservations=self._reservations)
        self.shell = Shell(self.core, store, config_path=config_path, clock=clock,
                           pass_driver=pass_driver)
        if execute is not None:
            self.core.out.sink = execute
        self.started = self.shell.clock()
        # sacctmgr's association database, its rows committed through the one writer
        self.accounts = Accounts(AccountingThroughWriter(store, self.shell.writer),
                                 self.core.settings.cluster_name,
                                 active_jobs=self.core.active_pairs)
        self.core.accounts = self.accounts
        self.accounts.on_change = lambda _db: self.shell.schedule_from_any_thread()
        self.auth = Authority(config, self.accounts, self.core.settings.cluster_name)
        # callbacks(event, job) with the event's kind as a string: "started", "ending",
        # "ended", … (the step manager listens); typed subscribers use table.subscribe
        self.listeners: list[Callable[[str, Job], None]] = []
        self.core.table.subscribe(self._to_listeners)
        self.core.table.subscribe(_log_event)
        self.core.cluster.subscribers.append(_log_node_event)
        self.health = HealthChecks(config)  # controller.health: when, and the verdicts
        self.health_verdicts = HealthVerdicts(self)
        self.prolog = PrologEpilog(self, config)  # controller.prolog: job start/end to nodes
        self.ctld_scripts = CtldScripts(self)  # PrologSlurmctld, EpilogSlurmctld
        # each job's first estimated start against its real one (metrics, dashboard)
        self.estimates = StartEstimates()
        self.core.passes.on_planned = self.estimates.planned
        self.core.table.subscribe(self.estimates.on_job)
        if self.ctld_scripts.prolog:
            self.shell.launch_gate = self.ctld_scripts.gate_launch
        self.history = NodeHistory(self.core.cluster, self.shell.writer.node_history,
                                   self.core.settings.cluster_name, store)
        self.usecases = UseCases(self.core, self.shell, self.auth, self.accounts, self.health,
                                 self.notify, home=home, started=self.started)
        self.usecases.check_reservation = self._check_reservation
        self.usecases.partitions_reset = self._partitions_reset

    # ---- wiring -------------------------------------------------------------------
    def _reservations(self, now: float) -> tuple[Any, ...]:
        from corral.controller.reservations import scheduling_reservations
        return scheduling_reservations(self, now)

    def _check_reservation(self, who: Identity, job: Job) -> None:
        from corral.controller.reservations import check_job_reservation
        check_job_reservation(self, who, job)

    def _partitions_reset(self) -> None:
        from corral.controller import partitions
        partitions.forget(self)  # slurm.conf's partitions win over runtime changes

    def notify(self, event: str, job: Job) -> None:
        """Tell the (event, job) listeners of something that is not a state change."""
        for cb in list(self.listeners):
            try:
                cb(event, job)
            except Exception:
                log.exception("listener failed on %s of job %d", event, job.job_id)

    def _to_listeners(self, ev: JobEvent) -> None:
        self.notify(ev.kind.value, ev.job)

    # ---- what the modules read: the core's memory ------------------------------------
    @property
    def jobs(self) -> dict[int, Job]:
        return self.core.jobs

    @property
    def pending(self) -> dict[int, Job]:
        return self.core.pending

    @property
    def running(self) -> dict[int, Job]:
        return self.core.running

    @property
    def table(self) -> JobTable:
        return self.core.table

    @property
    def nodes(self) -> dict[str, Node]:
        return self.core.nodes

    @property
    def partitions(self) -> dict[str, Partition]:
        return self.core.partitions

    @property
    def cluster(self) -> Cluster:
        return self.core.cluster

    @property
    def gone(self) -> sched_deps.GoneJobs:
        return self.core.gone

    @property
    def pending_reasons(self) -> dict[int, PendingReason]:
        return self.core.pending_reasons

    @property
    def stats(self) -> dict[str, int]:
        return self.core.stats

    @property
    def next_id(self) -> int:
        return self.core.next_id

    @next_id.setter
    def next_id(self, value: int) -> None:
        self.core.next_id = value

    @property
    def usage(self) -> UsageState:
        return self.core.usage.state

    @property
    def settings(self) -> CoreSettings:
        return self.core.settings

    @property
    def cluster_name(self) -> str:
        return self.core.settings.cluster_name

    @property
    def kill_wait(self) -> int:
        return self.core.settings.kill_wait

    @property
    def max_array_size(self) -> int:
        return self.core.settings.max_array_size

    @property
    def sched_params(self) -> SchedParams:
        return self.core.settings.sched_params

    @property
    def fair_params(self) -> FairshareParams:
        return self.core.settings.fair_params

    @property
    def enforce(self) -> frozenset[str]:
        return self.core.settings.enforce

    @property
    def ending(self) -> dict[int, Any]:
        return self.core.lifecycle.ending

    @property
    def preempt_deadlines(self) -> dict[int, float]:
        return self.core.lifecycle.preempt_deadlines

    @property
    def silent_nodes(self) -> set[str]:
        return self.core.reports.silent_nodes

    @property
    def step_table(self) -> StepTable:
        return self.core.step_table

    @step_table.setter
    def step_table(self, table: StepTable) -> None:
        self.core.step_table = table

    # ---- the shell's side -----------------------------------------------------------
    @property
    def store(self) -> Store:
        return self.shell.store

    @property
    def writer(self) -> GroupCommitWriter:
        return self.shell.writer

    @property
    def agent_senders(self) -> dict[str, Send]:
        return self.shell.agent_senders

    @property
    def clock(self) -> Clock:
        return self.shell.clock

    @property
    def cadence(self) -> Any:
        return self.shell.cadence

    @property
    def pass_driver(self) -> PassDriver:
        return self.shell.pass_driver

    @pass_driver.setter
    def pass_driver(self, driver: PassDriver) -> None:
        self.shell.pass_driver = driver

    @property
    def changes(self) -> int:
        return self.shell.changes

    @changes.setter
    def changes(self, value: int) -> None:
        self.shell.changes = value

    @property
    def sched_passes(self) -> int:
        return self.shell.sched_passes

    @property
    def last_sched_duration(self) -> float:
        return self.shell.last_sched_duration

    @property
    def last_decision(self) -> Decision | None:
        return self.shell.last_decision

    @property
    def own_uid(self) -> int:
        return self.auth.own_uid

    @property
    def submitting(self) -> dict[int, Job]:
        return self.usecases.submitting

    @property
    def _idle_views(self) -> dict[str, list[NodeView]]:
        return self.usecases._idle_views

    @property
    def _fits_cache(self) -> dict[str, Any]:
        return self.usecases._fits_cache

    async def durable(self) -> None:
        await self.shell.durable()

    def request_schedule(self, delay: float = 0.0) -> None:
        self.shell.request_schedule(delay)

    def schedule_from_any_thread(self) -> None:
        self.shell.schedule_from_any_thread()

    def schedule_pass(self, now: float) -> Decision | None:
        return self.shell.schedule_pass(now)

    def recover(self) -> None:
        self.shell.recover()

    def launch_message(self, job: Job) -> dict[str, Any]:
        return self.shell.launch_message(job)

    # ---- marking and sending, for the modules above the core ---------------------------
    def mark(self, job: Job) -> None:
        self.core.out.job(job)

    def mark_node(self, node: Node) -> None:
        self.core.out.node(node.name)

    def _send_control(self, job: Job, op: dict[str, Any]) -> None:
        self.core.out.control(job, op)

    def set_state(self, job: Job, state: JobState, now: float,
                  kind: JobEventKind | None = None) -> JobEvent:
        return self.core.set_state(job, state, now, kind)

    def node_event(self, node: Node, kind: NodeEventKind, source: str = "") -> None:
        self.core.node_event(node, kind, self.shell.clock(), source)

    def explain_pending(self, job_id: int) -> str | None:
        return self.core.explain_pending(job_id)

    def find_jobs(self, spec: str, *, split: bool = False) -> list[Job]:
        return self.core.find_jobs(spec, self.shell.clock(), split=split)

    def split_array_task(self, meta: Job, now: float, task_id: int | None = None) -> Job:
        return self.core.split_array_task(meta, now, task_id)

    def drop_pending_tasks(self, who: Identity, spec: str) -> bool:
        return self.core.drop_pending_tasks(spec, lambda j: self.auth.check_job_control(who, j))

    # ---- identity ----------------------------------------------------------------------
    def identity(self, uid: int, gid: int) -> Identity:
        return self.auth.identity(uid, gid)

    def check_owner(self, who: Identity, job: Job) -> None:
        self.auth.check_owner(who, job)

    def check_job_control(self, who: Identity, job: Job) -> None:
        self.auth.check_job_control(who, job)

    def is_coordinator_of(self, who: Identity, job: Job) -> bool:
        return self.auth.is_coordinator_of(who, job)

    def as_job_operator(self, who: Identity, job: Job) -> Identity:
        return self.auth.as_job_operator(who, job)

    def _super_user_uids(self) -> set[int]:
        return set(self.auth.super_users)

    # ---- the lifecycle, on the wall clock ------------------------------------------------
    def job_ended(self, job_id: int, state: str, exit_code: int, signal: int, end_time: float,
                  note: str | None = None) -> Job | None:
        return self.core.lifecycle.job_ended(job_id, state, exit_code, signal, end_time,
                                             self.shell.clock(), note)

    def end_allocation(self, job: Job, state: str, exit_code: int = 0, signal: int = 0) -> None:
        self.core.lifecycle.end_allocation(job, state, self.shell.clock(), exit_code, signal)

    def finish_pending(self, job: Job, state: JobState, now: float, by: int | None = None) -> None:
        self.core.lifecycle.finish_pending(job, state, now, by)

    def stop_running(self, job: Job, kill_reason: str, op: str, now: float) -> None:
        self.core.lifecycle.stop_running(job, kill_reason, op, now)

    def requeue_job(self, job: Job, now: float, hold: bool, held: str | None = "admin",
                    keep_age: bool = False) -> None:
        self.core.lifecycle.requeue_job(job, now, hold, held, keep_age)

    def steps_changed(self, job_id: int) -> None:
        self.core.lifecycle.steps_changed(job_id, self.shell.clock())

    def check_time_limits(self, now: float) -> None:
        self.core.lifecycle.check_time_limits(now)

    def expire_finished(self, now: float) -> None:
        self.core.lifecycle.expire_finished(now)

    def start_job(self, job: Job, alloc: list[NodeAlloc], now: float) -> None:
        self.core.lifecycle.start_job(job, alloc, now)

    def flush_usage(self, now: float, force: bool = False) -> None:
        self.core.usage.flush(now, force)

    def pass_params(self) -> SchedParams:
        return self.core.passes.params()

    def policy_snapshot_light(self) -> PolicySnapshot | None:
        return self.core.passes.policy_snapshot_light()

    def priority_now(self, job: Job) -> int:
        return self.core.passes.priority_now(job, self.shell.clock())

    # ---- agents ------------------------------------------------------------------------
    def agent_registered(self, node_names: list[str], send: Send, hw: dict[str, Any],
                         running: list[int]) -> None:
        self.shell.agent_registered(node_names, send, hw, running)

    def agent_lost(self, node_names: list[str], send: Send) -> None:
        self.shell.agent_lost(node_names, send)

    def agent_contact(self, node_names: list[str]) -> None:
        self.core.reports.contact(node_names, self.shell.clock())

    def agent_job_ended(self, ev: Any, node_names: list[str]) -> Job | None:
        return self.core.reports.job_ended(ev, node_names, self.shell.clock())

    def agent_bound_cpus(self, job_id: int, node_name: str, cpu_ids: Any) -> bool:
        return self.core.reports.bound_cpus(job_id, node_name, cpu_ids)

    def add_dynamic_node(self, name: str, hw: dict[str, Any]) -> Node:
        node = self.core.reports.add_dynamic_node(name, hw, self.shell.clock())
        self.usecases.forget_idle_views(node.partitions)
        return node

    def check_node_health(self, now: float) -> None:
        self.core.reports.check_silence(now)

    def heartbeat_interval(self) -> float:
        return max(0.5, min(10.0, self.core.settings.slurmd_timeout / 3))

    # ---- the use cases -----------------------------------------------------------------
    async def submit(self, who: Identity, spec_in: dict[str, Any], script: str,
                     env: dict[str, str], argv: list[str], array: str | None,
                     open_mode: str = "truncate") -> Job:
        return await self.usecases.submit(who, spec_in, script, env, argv, array, open_mode)

    def signal_jobs(self, who: Identity, jobs: list[Job], signum: int, *, batch_only: bool,
                    **kw: Any) -> None:
        self.usecases.signal_jobs(who, jobs, signum, batch_only=batch_only, **kw)

    def hold(self, who: Identity, jobs: list[Job], kind: str) -> None:
        self.usecases.hold(who, jobs, kind)

    def release(self, who: Identity, jobs: list[Job]) -> None:
        self.usecases.release(who, jobs)

    def requeue(self, who: Identity, jobs: list[Job], hold: bool) -> None:
        self.usecases.requeue(who, jobs, hold)

    def suspend(self, who: Identity, jobs: list[Job], resume: bool) -> None:
        self.usecases.suspend(who, jobs, resume)

    def update_job(self, who: Identity, job: Job, changes: dict[str, Any]) -> None:
        self.usecases.update_job(who, job, changes)

    def top(self, who: Identity, jobs: list[Job]) -> None:
        self.usecases.top(who, jobs)

    def notify_job(self, who: Identity, job: Job, message: str) -> None:
        self.usecases.notify_job(who, job, message)

    def update_nodes(self, who: Identity, names: list[str], state: str,
                     reason: str | None) -> None:
        self.usecases.update_nodes(who, names, state, reason)

    def check_partition_access(self, who: Identity, part: Partition, account: str,
                               qos: str) -> None:
        self.usecases.check_partition_access(who, part, account, qos)

    def config_info(self) -> dict[str, Any]:
        return self.usecases.config_info()

    def ping_info(self) -> dict[str, Any]:
        return self.usecases.ping_info()

    def reconfigure(self, who: Identity, text: str | None = None) -> list[str]:
        changes = self.usecases.reconfigure(who, text)
        self._reread_settings()
        return changes

    def _reread_settings(self) -> None:
        """After `scontrol reconfigure`: the settings read once at start — the pass cadence,
        health checks, Prolog/Epilog and PrologSlurmctld/EpilogSlurmctld — from the new
        slurm.conf (the core's own settings are re-read by the use case)."""
        from corral.controller.cadence import CadenceParams

        config = self.core.config
        self.shell.cadence.params = CadenceParams.from_config(config)
        self.health.reload(config)
        self.prolog.reload(config)
        self.ctld_scripts.reload()
        self.shell.launch_gate = self.ctld_scripts.gate_launch if self.ctld_scripts.prolog \
            else None


def _log_event(ev: JobEvent) -> None:
    """One line per job event in the controller's log (slurmctld logs the same)."""
    j = ev.job
    kind = ev.kind
    if kind is JobEventKind.SUBMITTED:
        events_log.info("job %d submitted by %s (uid %d) to partition %s", j.job_id, j.user,
                        j.uid, j.partition)
    elif kind is JobEventKind.STARTED:
        events_log.info("job %s started on %s", j.display_id(), ",".join(j.nodes))
    elif kind is JobEventKind.ENDED:
        events_log.info("job %s ended %s exit %d:%d", j.display_id(), j.state.value,
                        j.exit_code, j.term_signal)
    else:
        events_log.info("job %s %s (%s)", j.display_id(), kind.value, j.state.value)


def _log_node_event(ev: Any) -> None:
    events_log.info("node %s %s%s", ev.node.name, ev.kind.value,
                    f": {ev.reason}" if ev.reason and ev.kind is not NodeEventKind.RESUMED else "")


__all__ = [
    "Controller", "Identity", "SlurmError", "_invalid_job", "parse_signal_spec", "user_name",
    "group_name", "NOT_RESPONDING_REASON", "SPEC_FIELDS", "sched_params", "node_view",
    "ESLURM_ACCESS_DENIED", "ESLURM_ALREADY_DONE", "ESLURM_DEPENDENCY", "ESLURM_INVALID_ARRAY",
    "ESLURM_INVALID_JOB_ID", "ESLURM_INVALID_NODE_NAME", "ESLURM_INVALID_PARTITION_NAME",
    "ESLURM_INVALID_TIME_LIMIT", "ESLURM_JOB_PENDING", "ESLURM_PARTITION_NOT_AVAIL",
    "ESLURM_PATHNAME_TOO_LONG", "ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE",
    "ESLURM_TRANSITION_STATE_NO_UPDATE",
]
