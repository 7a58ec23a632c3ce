"""What every part of the controller shares: configuration, the clock, the cluster, the
job table and state machine, the dependency memory, and the group-commit writer.

The parts (use cases, scheduling, job lifecycle, launch records, agent links) are mixins
over this base, each in its own module; `controller.state.Controller` puts them together.
All methods run on the controller's event loop thread."""

from __future__ import annotations

import functools
import logging
import os
import pwd
import time
from collections.abc import Callable
from typing import Any

from corral.controller.accounts import Accounts
from corral.controller.cluster import NOT_RESPONDING_REASON, Cluster, NodeEvent, NodeEventKind
from corral.controller.errors import SlurmError, access_denied, invalid_job
from corral.controller.health import HealthChecks, HealthVerdicts
from corral.controller.history import NodeHistory
from corral.controller.jobs import JobEvent, JobEventKind, JobTable
from corral.controller.persist import AccountingThroughWriter, GroupCommitWriter
from corral.controller.prolog import PrologEpilog
from corral.model.config import ClusterConfig, ConfigError
from corral.model.job import Job, JobState
from corral.model.jobspec import DEFAULT_MAX_SCRIPT_SIZE, max_script_size
from corral.model.node import Node, Partition
from corral.model.reasons import PendingReason
from corral.model.timefmt import parse_time_limit
from corral.sched import deps as sched_deps
from corral.sched.backfill import DEFAULT_MAX_PLANNED
from corral.sched.fairshare import FairshareParams, UsageState, parse_billing_weights
from corral.sched.limits_check import parse_enforce
from corral.sched.pipeline import SchedParams
from corral.sched.priority import PriorityParams, PriorityWeights, parse_tres_weights
from corral.store.base import Store

log = logging.getLogger("corral.controller")
events_log = logging.getLogger("corral.controller.events")

Clock = Callable[[], float]


class Identity:
    __slots__ = ("uid", "gid", "user", "operator", "remote")

    def __init__(self, uid: int, gid: int, user: str, operator: bool,
                 remote: bool = False) -> None:
        self.uid, self.gid, self.user, self.operator = uid, gid, user, operator
        # signed by a joined machine: no operator rights, no AdminLevel rights
        self.remote = remote


@functools.lru_cache(maxsize=4096)
def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


@functools.lru_cache(maxsize=4096)
def group_name(gid: int) -> str:
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def sched_params(config: ClusterConfig) -> SchedParams:
    try:
        tres_weights = parse_tres_weights(config.options.get("PriorityWeightTRES", ""))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    totals: dict[str, int] = {"cpu": 0, "mem": 0, "node": 0, "gres/gpu": 0}
    for n in config.nodes:
        totals["cpu"] += n.cpus
        totals["mem"] += n.real_memory
        totals["node"] += 1
        totals["gres/gpu"] += n.gpus
    return SchedParams(
        priority=PriorityParams(
            weights=PriorityWeights(age=config.get_int("PriorityWeightAge"),
                                    partition=config.get_int("PriorityWeightPartition"),
                                    fairshare=config.get_int("PriorityWeightFairshare"),
                                    qos=config.get_int("PriorityWeightQOS"),
                                    job_size=config.get_int("PriorityWeightJobSize"),
                                    tres=tres_weights,
                                    assoc=config.get_int("PriorityWeightAssoc")),
            max_age_s=config.get_seconds("PriorityMaxAge"),
            favor_small=config.options.get("PriorityFavorSmall", "NO").upper() in ("YES", "1"),
            totals=totals),
        def_mem_per_cpu=config.get_int("DefMemPerCPU"),
        # [simcmp] scheduling-policy knobs (corral sim compares them): sched/builtin is
        # strict priority order, no backfill; bf_job_part_count_reserve=N holds resources
        # for the N highest-priority blocked jobs only (1: EASY backfill; 0: Slurm's "all")
        backfill=config.options.get("SchedulerType", "sched/backfill") != "sched/builtin",
        max_planned=_bf_reserve(config.options.get("SchedulerParameters", "")),
    )


def _bf_reserve(params: str) -> int:
    """SchedulerParameters=bf_job_part_count_reserve=N as the pass's planning budget (the
    first blocked job is always planned, so N-1 more)."""
    for item in params.split(","):
        key, _, value = item.strip().partition("=")
        if key == "bf_job_part_count_reserve" and value.strip().isdigit() and int(value) > 0:
            return int(value) - 1
    return DEFAULT_MAX_PLANNED


def fairshare_params(config: ClusterConfig) -> FairshareParams:
    """PriorityDecayHalfLife, PriorityUsageResetPeriod, TRESBillingWeights, PriorityFlags."""
    o = config.options
    flags = {f.strip().upper() for f in o.get("PriorityFlags", "").split(",") if f.strip()}
    try:
        weights = parse_billing_weights(o.get("TRESBillingWeights", ""))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    half = o.get("PriorityDecayHalfLife", "7-0")
    return FairshareParams(half_life_s=float(max(0, parse_time_limit(half))),
                           reset_period=o.get("PriorityUsageResetPeriod", "NONE"),
                           billing_weights=weights, max_tres="MAX_TRES" in flags,
                           fair_tree="NO_FAIR_TREE" not in flags)


class ControllerBase:
    def __init__(self, config: ClusterConfig, store: Store, *, config_path: str = "",
                 home: str = "", clock: Clock | None = None) -> None:
        self.clock: Clock = clock or time.time
        self.config = config
        self.config_path = config_path
        self.home = home
        self.store = store
        self.started = self.clock()
        self.cluster_name = config.cluster_name
        self.kill_wait = config.get_int("KillWait")
        self.min_job_age = config.get_int("MinJobAge")
        self.def_mem_per_cpu = config.get_int("DefMemPerCPU")
        self.max_array_size = config.get_int("MaxArraySize")
        self.max_script_size = max_script_size(config.options.get("SchedulerParameters", "")) \
            or DEFAULT_MAX_SCRIPT_SIZE
        self.sched_params = sched_params(config)
        # accounting policy: the association tree (sacctmgr), what is enforced, usage
        try:
            self.enforce = parse_enforce(config.options.get("AccountingStorageEnforce"))
        except ValueError as e:
            raise ConfigError(str(e)) from None
        self.fair_params = fairshare_params(config)
        calc = config.options.get("PriorityCalcPeriod", "5")
        self.calc_period_s = max(60, parse_time_limit(calc))
        # the one write path: jobs, nodes, usage, accounting rows, the token/key registry
        self.writer = GroupCommitWriter(store, lambda name: self.cluster.node_record(name),
                                        lambda: self.next_id)
        self.accounts = Accounts(AccountingThroughWriter(store, self.writer), self.cluster_name,
                                 active_jobs=self._active_pairs)
        self.usage = UsageState.from_dict(store.load_usage_state())
        self.cluster = Cluster(config.nodes, config.partitions)
        self.nodes: dict[str, Node] = self.cluster.nodes
        self.partitions: dict[str, Partition] = self.cluster.partitions
        self.table = JobTable()
        self.jobs: dict[int, Job] = self.table.jobs
        self.pending: dict[int, Job] = self.table.pending
        self.running: dict[int, Job] = self.table.running
        # final states of jobs gone from memory that pending dependencies still name
        self.gone = sched_deps.GoneJobs()
        # the typed reason behind each pending job's reason text (for explanations)
        self.pending_reasons: dict[int, PendingReason] = {}
        self.next_id = 1
        # (uid, submit_id) -> job id: a submission resent after a lost answer is not run twice
        self.submit_ids: dict[tuple[int, str], int] = {}
        self.own_uid = os.geteuid()
        self.operators = self._operator_uids()
        self.super_users = self._super_user_uids()
        # agent links: node name -> callable sending one message to its agent
        self.agent_senders: dict[str, Callable[[dict[str, Any]], None]] = {}
        # callbacks(event, job) with the event's kind as a string: "started", "ending",
        # "ended", … (the step manager listens); typed subscribers use table.subscribe
        self.listeners: list[Callable[[str, Job], None]] = []
        self.table.subscribe(self._to_listeners)
        self.table.subscribe(self._log_event)
        self.cluster.subscribers.append(self._log_node_event)
        self.health = HealthChecks(config)  # controller.health: when, and the verdicts
        self.health_verdicts = HealthVerdicts(self)
        self.prolog = PrologEpilog(self, config)  # controller.prolog: job start/end to nodes
        self.history = NodeHistory(self.cluster, self.writer.node_history, self.cluster_name,
                                   store)
        self.stats = {"submitted": 0, "started": 0, "completed": 0, "failed": 0,
                      "cancelled": 0, "timeout": 0}

    # ---- to be provided by the scheduling part --------------------------------
    def request_schedule(self, delay: float = 0.0) -> None:
        raise NotImplementedError

    # ---- identity ----------------------------------------------------------------
    def _operator_uids(self) -> set[int]:
        uids = {0, self.own_uid}
        for name in [self.config.options.get("SlurmUser", "root"),
                     *self.config.options.get("AdminUsers", "").split(",")]:
            name = name.strip()
            if not name:
                continue
            try:
                uids.add(pwd.getpwnam(name).pw_uid)
            except KeyError:
                if name.isdigit():
                    uids.add(int(name))
        return uids

    def _super_user_uids(self) -> set[int]:
        """root and SlurmUser (Slurm's validate_slurm_user): RootOnly and AllowGroups let
        them through; the controller's own uid counts as SlurmUser."""
        uids = {0, self.own_uid}
        name = self.config.options.get("SlurmUser", "root").strip()
        try:
            uids.add(pwd.getpwnam(name).pw_uid)
        except KeyError:
            if name.isdigit():
                uids.add(int(name))
        return uids

    def identity(self, uid: int, gid: int) -> Identity:
        return Identity(uid, gid, user_name(uid), uid in self.operators)

    def check_owner(self, who: Identity, job: Job) -> None:
        if not who.operator and who.uid != job.uid:
            raise access_denied()

    def is_coordinator_of(self, who: Identity, job: Job) -> bool:
        """`who` coordinates the job's account (or an account above it) and the job is
        someone else's: Slurm lets an account's coordinators hold, release, cancel,
        requeue and update the jobs of its users as an operator would."""
        return (who.uid != job.uid and bool(job.account)
                and self.accounts.db.is_coordinator(who.user, job.account, self.cluster_name))

    def as_job_operator(self, who: Identity, job: Job) -> Identity:
        """The caller as it acts on `job`: an operator when it coordinates the job's
        account (slurmctld's update_job sets `operator = true` for a coordinator)."""
        if who.operator or not self.is_coordinator_of(who, job):
            return who
        return Identity(who.uid, who.gid, who.user, True)

    def check_job_control(self, who: Identity, job: Job) -> None:
        """cancel, signal and requeue: the owner, an operator or the account's coordinator."""
        if not who.operator and who.uid != job.uid and not self.is_coordinator_of(who, job):
            raise access_denied()

    # ---- events ------------------------------------------------------------------
    def set_state(self, job: Job, state: JobState, now: float,
                  kind: JobEventKind | None = None) -> JobEvent:
        return self.table.transition(job, state, now, kind)

    def notify(self, event: str, job: Job) -> None:
        """Tell the (event, job) listeners of something that is not a state change."""
        for cb in list(self.listeners):
            try:
                cb(event, job)
            except Exception:
                log.exception("listener failed on %s of job %d", event, job.job_id)

    def _to_listeners(self, ev: JobEvent) -> None:
        self.notify(ev.kind.value, ev.job)

    @staticmethod
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

    def node_event(self, node: Node, kind: NodeEventKind, source: str = "") -> None:
        self.cluster.emit(kind, node, self.clock(), source)

    @staticmethod
    def _log_node_event(ev: NodeEvent) -> None:
        events_log.info("node %s %s%s", ev.node.name, ev.kind.value,
                        f": {ev.reason}" if ev.reason and ev.kind is not NodeEventKind.RESUMED else "")

    def explain_pending(self, job_id: int) -> str | None:
        """Why a pending job waits, in words with the numbers behind it (not Slurm text)."""
        why = self.pending_reasons.get(job_id)
        return why.explain() if why is not None else None

    # ---- persistence -------------------------------------------------------------
    # Counts every change that reaches the store or comes through the API (answers.py).
    changes = 0

    def mark(self, job: Job) -> None:
        self.changes += 1
        self.writer.job(job)

    def mark_node(self, node: Node) -> None:
        self.changes += 1
        self.writer.node(node.name)

    async def durable(self) -> None:
        """Return once every change made so far is committed to the store."""
        await self.writer.durable()

    def _new_job_id(self) -> int:
        jid = self.next_id
        self.next_id += 1
        self.writer.next_job_id()
        return jid

    def _send_control(self, job: Job, op: dict[str, Any]) -> None:
        if job.batch_host is None:
            return
        send = self.agent_senders.get(job.batch_host)
        if send is not None:
            # Acted on once the decision is durable, and after the caller has its answer:
            # `scontrol requeue $SLURM_JOB_ID` inside the job must not be killed mid-request.
            self.writer.after_commit(send, {"type": "control", "job_id": job.job_id, "control": op})

    def _active_pairs(self) -> list[tuple[str, str, int]]:
        """(user, account, job id) of every pending or running job: sacctmgr refuses to
        delete an association that has some."""
        return [(j.user, j.account, j.job_id) for j in self.jobs.values()
                if not j.state.finished]

    # ---- recovery ----------------------------------------------------------------
    def recover(self) -> None:
        """Load what the store holds after a restart."""
        for rec in self.store.load_nodes():
            n = self.nodes.get(rec.name)
            if n is None:
                continue
            n.admin_state, n.reason = rec.admin_state, rec.reason
            n.reason_user, n.reason_uid, n.reason_time = rec.reason_user, rec.reason_uid, rec.reason_time
        for job in self.store.load_active_jobs():
            self.table.load(job)
            if job.state.active:
                self.cluster.charge(job)
        for job in self.store.load_recent_finished(self.clock() - self.min_job_age):
            self.table.load(job)
        for n in self.nodes.values():
            if n.reason is None and not n.registered:
                # configured, no agent yet: down, and sinfo -R says why
                n.reason, n.reason_user, n.reason_uid, n.reason_time = \
                    NOT_RESPONDING_REASON, "root", 0, self.started
        self.next_id = self.store.next_job_id()
        for job in self.jobs.values():
            if job.submit_id:
                self.submit_ids[(job.uid, job.submit_id)] = job.array_job_id or job.job_id
        self.remember_gone(self.unknown_dependencies(self.pending.values()))
        log.info("recovered %d pending and %d running jobs; next job id %d",
                 len(self.pending), len(self.running), self.next_id)

    # ---- dependencies on jobs gone from memory -------------------------------------
    def unknown_dependencies(self, jobs: Any) -> set[int]:
        """Ids that dependencies of `jobs` name and that neither memory nor `gone` knows."""
        out: set[int] = set()
        for job in jobs:
            if not job.dependency:
                continue
            try:
                dep = sched_deps.parse_cached(job.dependency)
            except sched_deps.DependencyError:
                continue
            for jid in dep.job_ids():
                if jid not in self.jobs and not self.gone.knows(jid):
                    out.add(jid)
        return out

    def remember_gone(self, ids: set[int]) -> None:
        """Read the final state of jobs no longer in memory once, so no pass reads the store.

        The read runs in the store's thread; until it answers, the ids count as pending
        jobs, so a pass keeps their dependants waiting instead of lifting the dependency."""
        if not ids:
            return

        def read() -> list[Job]:
            return self.store.query_jobs(ids=sorted(ids), array_ids=sorted(ids))

        if not self.writer.reads_off_loop():
            self.gone_records(ids, read())
            return
        for jid in ids:
            self.gone.add(sched_deps.GoneRecord(jid, None, None, JobState.PENDING.value, 0, None))

        def found(jobs: list[Job] | Exception) -> None:
            for jid in ids:  # the placeholders
                self.gone.by_id.pop(jid, None)
            if isinstance(jobs, Exception):
                log.error("reading jobs %s from the store failed: %s", sorted(ids), jobs)
                jobs = []
            self.gone_records(ids, jobs)
            self.request_schedule()

        self.writer.read(read, found)

    def gone_records(self, ids: set[int], found: list[Job]) -> None:
        seen: set[int] = set()
        for job in found:
            if job.job_id in self.jobs:
                continue
            self.gone.add(sched_deps.GoneRecord.of(job))
            seen.add(job.job_id)
            if job.array_job_id is not None:
                seen.add(job.array_job_id)
        for jid in ids - seen:
            self.gone.missing.add(jid)

    # ---- lookups -----------------------------------------------------------------
    def find_jobs(self, spec: str, *, split: bool = False) -> list[Job]:
        """Jobs named by "12", "7" (a whole array), "7_2", "7_[1-3]"; [] if unknown.

        A task range is checked against MaxArraySize before anything is enumerated.
        With `split`, tasks named one by one that are still part of a pending array record
        are split off into records of their own, so an action touches only them.
        """
        spec = spec.strip()
        if "_" in spec:
            head, _, tail = spec.partition("_")
            if not head.isdigit():
                raise invalid_job()
            arr = int(head)
            ranges = task_ranges(tail.strip("[]"), max(self.max_array_size, 1))

            def wanted(t: int | None) -> bool:
                return t is not None and any(lo <= t <= hi and (t - lo) % step == 0
                                             for lo, hi, step in ranges)

            out = []
            now = self.clock()
            for j in list(self.jobs.values()):
                if j.array_job_id != arr:
                    continue
                if j.array_tasks is not None:
                    named = [t for t in j.array_tasks if wanted(t)]
                    if not named:
                        continue
                    if split and j.state == JobState.PENDING:
                        if len(named) == len(j.array_tasks):
                            out.append(j)  # every task left: act on the array record itself
                        else:
                            out.extend(self.split_array_task(j, now, t) for t in named)
                    else:
                        out.append(j)
                elif wanted(j.array_task_id):
                    out.append(j)
            return out
        if not spec.isdigit():
            raise invalid_job()
        jid = int(spec)
        job = self.jobs.get(jid)
        out = [job] if job is not None else []
        out.extend(j for j in self.jobs.values() if j.array_job_id == jid and j.job_id != jid)
        return out

    def split_array_task(self, meta: Job, now: float, task_id: int | None = None) -> Job:
        """Take a task (the next one by default) off a pending array record.

        The last task keeps the array record's own job id, as in Slurm."""
        assert meta.array_tasks
        if task_id is None:
            task_id = meta.array_tasks.pop(0)
        else:
            meta.array_tasks.remove(task_id)
        if not meta.array_tasks:
            meta.array_tasks = None
            meta.array_task_id = task_id
            return meta
        d = meta.to_dict()
        d.update(job_id=self._new_job_id(), array_tasks=None, array_task_id=task_id,
                 array_max_running=None)
        task = Job.from_dict(d)
        task.array_max_running = meta.array_max_running
        self.table.load(task)  # a record split off, not a new submission: no event
        self.mark(meta)
        return task


def task_ranges(text: str, max_size: int) -> list[tuple[int, int, int]]:
    """"1-5,7,10-20:2" as (first, last, step) ranges, every task below MaxArraySize, checked
    before anything is enumerated (a range up to 2^31 costs nothing); else invalid_job()."""
    out: list[tuple[int, int, int]] = []
    if not text or len(text) > 4096:
        raise invalid_job()
    for part in text.split(","):
        lo_s, dash, rest = part.strip().partition("-")
        hi_s, colon, step_s = rest.partition(":")
        if not lo_s.isdigit() or (dash and not hi_s.isdigit()) or (colon and not step_s.isdigit()):
            raise invalid_job()
        lo = int(lo_s)
        hi = int(hi_s) if rest else lo
        step = int(step_s) if step_s else 1
        if hi < lo or step < 1 or hi >= max_size:
            raise invalid_job()
        out.append((lo, hi, step))
    return out


__all__ = ["ControllerBase", "Identity", "SlurmError", "user_name", "group_name"]
