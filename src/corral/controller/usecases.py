"""The use cases users and admins drive, each with its authorization: submit, signal and
cancel, hold and release, requeue, suspend, update a job, and node administration.

A refused request raises `SlurmError` with Slurm's errno and message and changes nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Callable
from typing import Any

from corral.controller.cluster import NOT_RESPONDING_REASON, NodeEventKind
from corral.controller.core import Core
from corral.controller.core.effects import PersistPayload
from corral.controller.core.settings import CoreSettings
from corral.controller.errors import (
    ESLURM_ACCESS_DENIED,
    ESLURM_ALREADY_DONE,
    ESLURM_DEPENDENCY,
    ESLURM_DISABLED,
    ESLURM_INVALID_ACCOUNT,
    ESLURM_INVALID_ARRAY,
    ESLURM_INVALID_FEATURE,
    ESLURM_INVALID_GRES,
    ESLURM_INVALID_NODE_NAME,
    ESLURM_INVALID_NODE_STATE,
    ESLURM_INVALID_PARTITION_NAME,
    ESLURM_INVALID_QOS,
    ESLURM_INVALID_TASK_MEMORY,
    ESLURM_INVALID_TIME_LIMIT,
    ESLURM_JOB_HELD,
    ESLURM_JOB_MISSING_REQUIRED_PARTITION_GROUP,
    ESLURM_JOB_NOT_PENDING,
    ESLURM_JOB_PENDING,
    ESLURM_PARTITION_NOT_AVAIL,
    ESLURM_PATHNAME_TOO_LONG,
    ESLURM_PRIO_RESET_FAIL,
    ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE,
    ESLURM_TRANSITION_STATE_NO_UPDATE,
    SlurmError,
    access_denied,
    invalid_user,
)
from corral.controller.health import HealthChecks
from corral.controller.identity import Authority, Identity, group_name
from corral.controller.logsafe import RateLimit
from corral.controller.shell import Shell
from corral.model.arrays import ArraySpecError, parse_array_spec
from corral.model.config import ConfigError, parse_config
from corral.model.job import Job, JobState, Reason
from corral.model.jobspec import JobSpecError, script_too_large, validate_spec
from corral.model.node import Node, Partition, name_list, partition_access
from corral.sched import deps as sched_deps
from corral.sched.eligibility import view_of
from corral.sched.features import ConstraintError, parse_constraint, satisfiable
from corral.sched.limits_check import (
    SubmitRefusal,
    build_ledger,
    default_time_limit,
    job_request,
    resolve_submit,
)
from corral.sched.select import idle_allocation
from corral.sched.snapshot import NodeView, PendingView
from corral.store.base import JobPayload

log = logging.getLogger("corral.controller")

NOT_AVAILABLE = "Required partition not available (inactive or drain)"
# `scontrol notify` text kept on the job; in the log, 200 characters, 10 lines a minute a user
NOTIFY_MAX = 1024
_NOTIFY_LOGGED = RateLimit(burst=10, window=60.0)
_SUBMIT_COUNT_LIMITS = ("GrpSubmitJobs", "MaxSubmitJobs", "MaxSubmitJobsPerUser")


def _idle_view(n: Node) -> NodeView:
    return NodeView(n.name, n.cpus, n.real_memory, n.gpus, n.cpus, n.real_memory,
                    list(range(n.gpus)), True, n.weight, tuple(n.partitions),
                    tuple(n.features), 0, False, n.gpu_type, n.tmp_disk)


_ACCESS_ERRORS = {
    "ESLURM_ACCESS_DENIED": ("Access/permission denied", ESLURM_ACCESS_DENIED),
    "ESLURM_JOB_MISSING_REQUIRED_PARTITION_GROUP": (
        "User's group not permitted to use this partition",
        ESLURM_JOB_MISSING_REQUIRED_PARTITION_GROUP),
    "ESLURM_INVALID_ACCOUNT": ("Invalid account or account/partition combination specified",
                               ESLURM_INVALID_ACCOUNT),
    "ESLURM_INVALID_QOS": ("Invalid qos specification", ESLURM_INVALID_QOS),
}


def user_groups(user: str, gid: int) -> set[str]:
    """Names of the user's groups, the primary one included (AllowGroups= checks)."""
    try:
        gids = set(os.getgrouplist(user, gid))
    except (KeyError, OSError):
        gids = {gid}
    gids.add(gid)
    return {group_name(g) for g in gids}


# A job's request as node selection sees it: every field of its view but these (node
# selection, sched/select.py, reads none of them: jobs of every user and time limit share)
_SHAPE_FIELDS = tuple(f.name for f in dataclasses.fields(PendingView)
                      if f.name not in ("job_id", "priority", "submit_time", "partition",
                                        "user", "time_limit", "qos", "reservation"))


class UseCases:
    """The requests of users and admins, each authorized here, then carried out by the
    core's transitions (whose effects the shell executes)."""

    def __init__(self, core: Core, shell: Shell, auth: Authority, accounts: Any,
                 health: HealthChecks, notify: Callable[[str, Job], None], *,
                 home: str = "", started: float = 0.0) -> None:
        self.core = core
        self.shell = shell
        self.auth = auth
        self.accounts = accounts  # controller/accounts.py (sacctmgr's association database)
        self.health = health
        self.notify = notify
        self.home = home
        self.started = started
        self._idle_views: dict[str, list[NodeView]] = {}  # per partition, for feasibility
        # per partition: the idle views the answers were computed on, and per job shape the
        # number of idle nodes it would run on (0: never fits); a flood of identical
        # submissions runs node selection once, not per job
        self._fits_cache: dict[str, tuple[list[NodeView], dict[tuple[Any, ...], int]]] = {}
        # submissions past the submit limits that are not pending yet (see `submitting`)
        self._submitting: dict[int, Job] = {}
        # set by the composition root (controller/state.py): the modules written against it
        self.check_reservation: Callable[[Identity, Job], None] = lambda who, job: None
        self.partitions_reset: Callable[[], None] = lambda: None

    def forget_idle_views(self, partitions: list[str]) -> None:
        """A node joined these partitions: their feasibility answers are stale."""
        for name in partitions:
            self._idle_views.pop(name, None)

    def check_partition_access(self, who: Identity, part: Partition, account: str,
                               qos: str) -> None:
        """RootOnly, AllowGroups, AllowAccounts/DenyAccounts, AllowQos/DenyQos, refused
        with Slurm's errno and message (slurmctld's _part_access_check)."""
        if part.root_only or name_list(part.allow_groups) is not None:
            groups = user_groups(who.user, who.gid)
        else:
            groups = set()
        why = partition_access(part, uid=who.uid, groups=groups, account=account, qos=qos,
                               super_user=who.uid in self.auth.super_users)
        if why is not None:
            msg, errno = _ACCESS_ERRORS[why]
            raise SlurmError(msg, errno, 403 if errno == ESLURM_ACCESS_DENIED else 400)

    # -------------------------------------------------------------- submit
    def _validate_spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        try:
            return validate_spec(spec)
        except JobSpecError as e:
            raise SlurmError(str(e), ESLURM_PATHNAME_TOO_LONG if e.too_long else 0) from None

    def _submit_partition(self, pname: str | None) -> Partition:
        part: Partition | None
        if pname:
            part = self.core.partitions.get(pname)
            if part is None:
                raise SlurmError("Invalid partition name specified", ESLURM_INVALID_PARTITION_NAME,
                                 user_msg=f"invalid partition specified: {pname}")
        else:
            part = self.core.config.default_partition()
            if part is None:
                raise SlurmError("No partition specified or system default partition",
                                 ESLURM_INVALID_PARTITION_NAME)
        # DRAIN and INACTIVE take no new jobs (DOWN queues them), slurm.conf(5) State=
        if part.state in ("DRAIN", "INACTIVE"):
            raise SlurmError(NOT_AVAILABLE, ESLURM_PARTITION_NOT_AVAIL)
        return part

    def _submit_association(self, who: Identity, job: Job, account_given: bool,
                            qos_given: bool) -> int | None:
        """The account and QoS the job runs under, and its association's id (None when
        it has none).  With AccountingStorageEnforce=associations a user without an
        association, an account they may not use, or a QoS their association does not
        allow is refused with Slurm's message; without it the job keeps what it asked
        for (the user's default account when they have one, else their name)."""
        db = self.accounts.db
        enforced = "associations" in self.core.settings.enforce
        if not enforced and who.user not in db.users:
            job.account = job.account or who.user
            return None
        choice = resolve_submit(db, self.core.settings.cluster_name, who.user,
                                job.account if account_given and job.account else None,
                                job.partition, job.qos if qos_given else None)
        if isinstance(choice, SubmitRefusal):
            if enforced:
                raise SlurmError(choice.message, choice.errno)
            job.account = job.account or who.user
            return None
        job.account = choice.account
        if choice.qos is not None:
            job.qos = choice.qos
        return choice.assoc_id

    def _check_submit_limits(self, job: Job, assoc_id: int) -> None:
        """GrpSubmitJobs, MaxSubmitJobs(PerUser) always; size and time limits only with
        the QoS's DenyOnLimit (else the job pends with the limit's reason).  Only the jobs
        a submit count could include are charged: the user's in this account, every job
        under the highest account with GrpSubmitJobs, the QoS's when it counts them."""
        db = self.accounts.db
        a = db.assocs.get(assoc_id)
        top = None
        for x in db.chain(a) if a is not None else ():
            if x.user is None and x.limits.grp_submit_jobs is not None:
                top = x.account
        accounts = db.subaccounts(self.core.settings.cluster_name, top) if top is not None else set()
        q = db.qos.get(job.qos) if job.qos else None
        qos_all = q is not None and q.limits.grp_submit_jobs is not None
        qos_user = q is not None and q.limits.max_submit_jobs_per_user is not None
        part_qos = self.core.passes.partition_qos()
        # the partition QoS counts every job of the partitions that have it
        pq = db.qos.get(part_qos.get(job.partition, ""))
        pq_parts = {p for p, n in part_qos.items() if pq is not None and n == pq.name}
        pq_all = pq is not None and pq.limits.grp_submit_jobs is not None
        pq_user = pq is not None and pq.limits.max_submit_jobs_per_user is not None

        def counted(j: Job) -> bool:
            if j.account in accounts or (qos_all and j.qos == job.qos) \
                    or (pq_all and j.partition in pq_parts):
                return True
            return j.user == job.user and (j.account == job.account
                                           or (qos_user and j.qos == job.qos)
                                           or (pq_user and j.partition in pq_parts))

        waiting = [*self.core.pending.values(), *self.submitting.values()]
        led = build_ledger(db, self.core.settings.cluster_name, part_qos=part_qos,
                           running=[(job_request(j), None) for j in self.core.running.values()
                                    if counted(j)],
                           pending=[job_request(j) for j in waiting if counted(j)])
        refusal = led.check_submit(job_request(job))
        if refusal is not None:
            hit = refusal.hit
            # sbatch prints the reason on its own line first (slurmctld's err_msg)
            user_msg = hit.code if hit is not None and hit.limit in _SUBMIT_COUNT_LIMITS \
                else None
            raise SlurmError(refusal.message, refusal.errno, user_msg=user_msg)

    @property
    def submitting(self) -> dict[int, Job]:
        """Submissions past the submit limits that are not pending yet (they wait for
        durability): counted as pending, so that concurrent submissions, each checked
        before the others are visible, cannot pass the same limit together."""
        return self._submitting

    def _submitted(self, uid: int, sid: str) -> Job | None:
        """The job an earlier request with this submit id created, if memory holds it."""
        jid = self.core.submit_ids.get((uid, sid))
        if jid is None:
            return None
        job = self.core.jobs.get(jid)
        if job is None:  # an array record whose tasks were all split off: any of them
            job = next((j for j in self.core.jobs.values() if j.array_job_id == jid), None)
        return job

    async def submit(self, who: Identity, spec_in: dict[str, Any], script: str,
                     env: dict[str, str], argv: list[str], array: str | None,
                     open_mode: str = "truncate") -> Job:
        if not isinstance(spec_in, dict):
            raise SlurmError("Invalid job description", 0)
        if not isinstance(script, str) or (not script and spec_in.get("batch", True)):
            raise SlurmError("Batch script is empty!", 0)
        if script_too_large(script, self.core.settings.max_script_size):
            # slurmctld's limit (SchedulerParameters=max_script_size=, 4 MB by default)
            raise SlurmError("Pathname of a file, directory or other parameter too long",
                             ESLURM_PATHNAME_TOO_LONG)
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in env.items()):
            raise SlurmError("Invalid job environment", 0)
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise SlurmError("Invalid script arguments", 0)
        spec = self._validate_spec(spec_in)
        if isinstance(spec.get("account"), str):
            spec["account"] = spec["account"].lower()  # Slurm lower-cases account names
        sid = spec.get("submit_id")
        if sid:
            done = self._submitted(who.uid, sid)
            if done is not None:
                # the same request again (its answer was lost): the job it created
                await self.shell.durable()
                return done
        now = self.shell.clock()
        pname = spec.pop("partition", None)
        # -p a,b: the job may run in any of them (it starts where it can start first)
        names = list(dict.fromkeys(x for x in pname.split(",") if x)) \
            if isinstance(pname, str) and "," in pname else []
        part = self._submit_partition(names[0] if names else pname)
        others = [self._submit_partition(n) for n in names[1:]]
        if spec.get("held") == "admin" and not who.operator:
            spec["held"] = "user"
        if spec.get("nice", 0) < 0 and not who.operator:
            raise access_denied()
        # --priority: operators set it; anyone's 0 holds the job (slurmctld's
        # job_submit checks: a user's other values are ignored)
        prio = spec.pop("priority", None)
        if prio == 0:
            spec["held"] = "admin" if who.operator else "user"
        job = Job(job_id=0, name=spec.pop("name", "sbatch"), user=who.user, uid=who.uid,
                  gid=who.gid, **spec)
        if prio and who.operator:
            job.priority_set = prio
        # no node count given: spread over as many nodes as the tasks need (Slurm's
        # job_desc min_nodes NO_VAL); srun's and older clients' specs always name one
        job.nodes_fixed = "num_nodes" in spec or bool(job.req_nodes)
        job.partition = ",".join(p.name for p in [part, *others])
        if part.oversubscribe.startswith("EXCLUSIVE"):
            job.exclusive = True  # OverSubscribe=EXCLUSIVE: whole nodes for every job
        job.group = group_name(who.gid)
        self._partition_defaults(job, part, spec)
        assoc_id = self._submit_association(who, job, "account" in spec_in, "qos" in spec_in)
        for p in [part, *others]:
            self.check_partition_access(who, p, job.account, job.qos)
        job.submit_time = now
        if "time_limit" not in spec or job.time_limit is None:
            job.time_limit = part.default_time if part.default_time is not None else part.max_time
            if assoc_id is not None and "limits" in self.core.settings.enforce:
                # no --time: the smallest MaxWall that applies (Slurm's default)
                wall = default_time_limit(self.accounts.db, assoc_id, job.qos or None)
                if wall is not None and (job.time_limit < 0 or wall * 60 < job.time_limit):
                    job.time_limit = wall * 60
        if job.num_nodes < 1 or job.num_tasks < 1 or job.cpus_per_task < 1:
            raise SlurmError("Invalid node count or task count", 0)
        if job.max_nodes is not None and job.max_nodes < job.num_nodes:
            raise SlurmError("Invalid node count specification", 0)
        for name in [*job.req_nodes, *job.exc_nodes]:
            if name not in self.core.nodes:
                raise SlurmError("Invalid node name specified", ESLURM_INVALID_NODE_NAME)
        if job.req_nodes and not set(job.req_nodes) <= {n for p in [part, *others]
                                                         for n in p.nodes}:
            raise SlurmError("Requested node configuration is not available",
                             ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE)
        if job.dependency:
            try:
                sched_deps.parse_dependency(job.dependency)
            except sched_deps.DependencyError:
                raise SlurmError("Job dependency problem", ESLURM_DEPENDENCY) from None
        self._check_features(job)
        if job.reservation:  # --reservation: it exists and admits the job
            self.check_reservation(who, job)
        self._check_feasible_anywhere(job, [part, *others])
        if array:
            try:
                ids, throttle = parse_array_spec(array, self.core.settings.max_array_size)
            except ArraySpecError:
                raise SlurmError("Invalid job array specification", ESLURM_INVALID_ARRAY) from None
            job.array_tasks = ids
            job.array_max_running = throttle
            job.array_spec = array
        if assoc_id is not None and "limits" in self.core.settings.enforce:
            # after the array is parsed: each of its tasks counts as a job (Slurm)
            self._check_submit_limits(job, assoc_id)
        # the job holds its place in the submit limits from here (before the first await)
        # until it is pending or refused
        self.submitting[id(job)] = job
        try:
            return await self._submit_accepted(who, job, sid, now, script, env, argv,
                                               open_mode)
        finally:
            self.submitting.pop(id(job), None)

    async def _submit_accepted(self, who: Identity, job: Job, sid: Any, now: float,
                               script: str, env: dict[str, str], argv: list[str],
                               open_mode: str) -> Job:
        unknown = self.core.unknown_dependencies([job])
        if unknown:  # named jobs gone from memory: their final state, read once, off the loop
            found = await asyncio.get_running_loop().run_in_executor(
                None, lambda: self.shell.store.query_jobs(ids=sorted(unknown), array_ids=sorted(unknown)))
            self.core.gone_found(unknown, found)
        job.job_id = self.core.new_job_id()
        if job.array_tasks is not None:
            job.array_job_id = job.job_id
        if sid:
            self.core.submit_ids[(who.uid, sid)] = job.job_id
        job.priority = self.core.passes.priority_now(job, self.shell.clock())
        if job.held:
            job.reason = Reason.HELD_ADMIN if job.held == "admin" else Reason.HELD_USER
        self.core.out.emit(PersistPayload(job.job_id, JobPayload(script, env, argv, open_mode)))
        self.core.out.job(job)
        await self.shell.durable()
        # visible only once durable: a job the client was never told about must not run
        self.core.set_state(job, JobState.PENDING, now)
        if job.mail_type:
            log.info("job %d asked for mail (%s); Corral does not send mail", job.job_id, job.mail_type)
        if not job.held:  # a held job changes nothing the scheduler could act on
            self.core.out.schedule()
        return job

    def _partition_defaults(self, job: Job, part: Partition, spec: dict[str, Any]) -> None:
        """DefMemPerGPU and DefCpuPerGPU of the partition the job is submitted to, for a
        job with GPUs that names no memory (no --mem/--mem-per-cpu) or no CPU count."""
        self._whole_cores(job, part)
        if not (part.def_mem_per_gpu or part.def_cpu_per_gpu):
            return
        nodes = max(1, job.num_nodes)
        gpus = job.gpus or job.gpus_per_node * nodes or job.gpus_per_task * job.num_tasks
        if not gpus:
            return
        if part.def_mem_per_gpu and job.mem_per_node is None and job.mem_per_cpu is None:
            per_node = -(-gpus // nodes)
            if job.gpus and not job.nodes_fixed:
                # a --gpus total that may spread: a node holds at most its own GPUs.  Memory
                # is one amount per node here, so each node gets what its largest share
                # needs (Slurm charges each node for the GPUs it got; a little more here).
                most = max((self.core.nodes[n].gpus for n in part.nodes if n in self.core.nodes),
                           default=per_node)
                per_node = min(per_node, max(most, 1))
            job.mem_per_node = part.def_mem_per_gpu * per_node
        if part.def_cpu_per_gpu and "cpus_per_task" not in spec:
            job.cpus_per_task = max(1, -(-(gpus * part.def_cpu_per_gpu) // job.num_tasks))

    def _whole_cores(self, job: Job, part: Partition) -> None:
        """--hint=nomultithread under SelectTypeParameters=CR_Core*: each CPU asked for is
        a whole core, so a job gets every thread of its cores (-c48 on 2-thread cores
        holds 96 CPUs), as Slurm allocates it."""
        params = self.core.config.options.get("SelectTypeParameters", "CR_Core_Memory").upper()
        if "nomultithread" not in (job.hint or "") or "CR_CORE" not in params:
            return
        job.core_threads = max([self.core.nodes[n].threads_per_core for n in part.nodes
                                if n in self.core.nodes] or [1])

    def _check_features(self, job: Job) -> None:
        """--constraint that does not parse or names features no node has, and a GPU type
        no node has: refused as slurmctld refuses them."""
        if job.constraint is not None:
            try:
                con = parse_constraint(job.constraint)
            except ConstraintError:
                raise SlurmError("Invalid feature specification", ESLURM_INVALID_FEATURE) from None
            if not satisfiable(con, (n.features for n in self.core.nodes.values())):
                raise SlurmError("Invalid feature specification", ESLURM_INVALID_FEATURE)
        if job.gpu_type and not any(n.gpu_type == job.gpu_type and n.gpus
                                    for n in self.core.nodes.values()):
            raise SlurmError("Invalid generic resource (gres) specification", ESLURM_INVALID_GRES)
        if job.min_cpus is not None and job.min_cpus < 0:
            raise SlurmError("Invalid mincpus value", 0)

    def _check_feasible_anywhere(self, job: Job, parts: list[Partition]) -> None:
        """Refused only when no partition it names could ever run it."""
        first: SlurmError | None = None
        for p in parts:
            try:
                self._check_feasible(job, p)
                return
            except SlurmError as e:
                first = first or e
        if first is not None:
            raise first

    def _check_feasible(self, job: Job, part: Partition) -> None:
        nodes = [self.core.nodes[n] for n in part.nodes]
        if not nodes:
            raise SlurmError("Requested node configuration is not available",
                             ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE)
        max_mem = max(n.real_memory for n in nodes)
        per_node_mem = job.mem_per_node or 0
        if job.mem_per_cpu:
            per_node_mem = max(per_node_mem, job.mem_per_cpu * job.cpus_per_task)
        if part.max_mem_per_node is not None and per_node_mem > part.max_mem_per_node:
            # slurmctld's _valid_pn_min_mem: more than the partition's MaxMemPerNode
            raise SlurmError("Memory required by task is not available",
                             ESLURM_INVALID_TASK_MEMORY)
        # -O: one task per node (without --gpus-per-task, as sched.eligibility's view_of)
        tasks = job.num_nodes if job.overcommit and not job.gpus_per_task else job.num_tasks
        if part.max_cpus_per_node is not None and job.num_nodes and -(-(
                tasks * job.cpus_per_task) // job.num_nodes) > part.max_cpus_per_node:
            raise SlurmError("Requested node configuration is not available",
                             ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE)
        if per_node_mem > max_mem:
            raise SlurmError("Requested node configuration is not available",
                             ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE,
                             user_msg="Memory specification can not be satisfied")
        # Fewer nodes than asked is PartitionNodeLimit (pending), as Slurm does; the shape
        # check is made on as many nodes as the job may get.
        if job.num_nodes > len(nodes):
            return
        views = self._idle_views.get(part.name)
        if views is None:
            views = self._idle_views[part.name] = [_idle_view(n) for n in nodes]
        pv = view_of(job)
        pv.partition = part.name
        cached = self._fits_cache.get(part.name)
        if cached is None or cached[0] is not views:  # the node set or a node changed
            cached = self._fits_cache[part.name] = (views, {})
        # everything of the view but the job's identity, priority and submit time
        shape = (*(getattr(pv, f) for f in _SHAPE_FIELDS), self.core.settings.def_mem_per_cpu)
        count = cached[1].get(shape)
        if count is None:
            alloc = idle_allocation(pv, views, self.core.settings.def_mem_per_cpu)
            count = len(alloc) if alloc is not None else 0
            if len(cached[1]) >= 4096:  # bounded: many distinct shapes only cost the work
                cached[1].clear()
            cached[1][shape] = count
        if not count:
            raise SlurmError("Requested node configuration is not available",
                             ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE)
        # what squeue %D shows while it pends (Slurm's node_cnt_wag from the submit test):
        # -n30 on 16-CPU nodes needs 2 even while held
        job.node_cnt_wag = count if not job.nodes_fixed and count > job.num_nodes else None

    # ------------------------------------------------------------- actions
    def signal_jobs(self, who: Identity, jobs: list[Job], signum: int, *, batch_only: bool,
                    cancel: bool, full: bool = False) -> None:
        """scancel: cancel, or deliver a signal (to the batch shell with -b, to every
        process of the batch step with -f; the job's srun steps are signalled by the caller
        through the step manager unless -b)."""
        now = self.shell.clock()
        for job in jobs:
            self.auth.check_job_control(who, job)
        if not cancel:
            # Slurm's job_signal: a signal other than SIGKILL reaches only a running job.
            # For a pending or suspended one it answers "try again later", and scancel
            # retries (a signal sent right after sbatch reaches the job once it runs).
            live = [j for j in jobs if not j.state.finished]
            if live and all(j.state in (JobState.PENDING, JobState.SUSPENDED) for j in live):
                raise SlurmError("Job can not be altered now, try again later",
                                 ESLURM_TRANSITION_STATE_NO_UPDATE)
        for job in jobs:
            if job.state.finished:
                continue
            if job.state == JobState.PENDING:
                if cancel:
                    self.core.lifecycle.finish_pending(job, JobState.CANCELLED, now, by=who.uid)
                continue
            if cancel and not job.batch:
                job.cancelled_by = who.uid
                self.core.lifecycle.end_allocation(job, "CANCELLED", self.shell.clock())
            elif cancel:
                job.cancelled_by = who.uid
                self.core.lifecycle.stop_running(job, "CANCELLED", "cancel", now)
            elif batch_only or full:
                self.core.out.control(job, {"op": "signal", "signal": signum, "batch_only": batch_only})
            self.core.out.job(job)
        self.core.out.schedule()

    def _check_owner_uid(self, who: Identity, job: Job) -> None:
        """hold, release and update of another user's job: Slurm says "Invalid user id"
        (ESLURM_USER_ID_MISSING) unless the caller coordinates the job's account."""
        if not who.operator and who.uid != job.uid and not self.auth.is_coordinator_of(who, job):
            raise invalid_user()

    def hold(self, who: Identity, jobs: list[Job], kind: str) -> None:
        for job in jobs:
            self._check_owner_uid(who, job)
        jobs = self._array_pending(jobs)
        for job in jobs:
            # a coordinator's hold is an admin hold: the job's owner cannot release it
            op = self.auth.as_job_operator(who, job).operator
            job.held = "admin" if (kind == "hold" and op) else "user"
            job.priority = 0
            job.reason = Reason.HELD_ADMIN if job.held == "admin" else Reason.HELD_USER
            self.core.out.job(job)

    @staticmethod
    def _array_pending(jobs: list[Job]) -> list[Job]:
        """The records a hold acts on.  Named as an array (or a range of its tasks), the
        pending tasks are held and the running or finished ones left alone, as Slurm does;
        a plain job, or an array with nothing pending, must be pending."""
        pending = [j for j in jobs if j.state == JobState.PENDING]
        if not pending or any(j.array_job_id is None and j.state != JobState.PENDING
                              for j in jobs):
            raise SlurmError("Job is no longer pending execution", ESLURM_JOB_PENDING)
        return pending

    def release(self, who: Identity, jobs: list[Job]) -> None:
        for job in jobs:
            self._check_owner_uid(who, job)
            if job.held == "admin" and not self.auth.as_job_operator(who, job).operator:
                raise access_denied()
        for job in jobs:
            if job.state == JobState.PENDING and job.held:
                job.held = None
                job.reason = Reason.NONE
                job.priority = self.core.passes.priority_now(job, self.shell.clock())
                self.core.out.job(job)
        self.core.out.schedule()

    def requeue(self, who: Identity, jobs: list[Job], hold: bool) -> None:
        for job in jobs:
            self.auth.check_job_control(who, job)
        if len(jobs) > 1 and any(j.state != JobState.PENDING for j in jobs):
            # an array: its tasks that ran are requeued, the pending ones stay as they are
            jobs = [j for j in jobs if j.state != JobState.PENDING]
        for job in jobs:
            if job.state == JobState.PENDING or (job.state.finished and job.state not in (
                    JobState.COMPLETED, JobState.FAILED, JobState.TIMEOUT, JobState.CANCELLED,
                    JobState.NODE_FAIL, JobState.OUT_OF_MEMORY, JobState.PREEMPTED)):
                raise SlurmError("Job is pending execution" if job.state == JobState.PENDING
                                 else "Requested operation is presently disabled", 0)
        now = self.shell.clock()
        for job in jobs:
            if not job.batch:
                raise SlurmError("Job is not a batch job: it cannot be requeued", 0)
        for job in jobs:
            # Slurm: an operator's requeuehold is an admin hold, the owner's a user hold
            # the owner may release
            kind = ("admin" if self.auth.as_job_operator(who, job).operator else "user") \
                if hold else None
            if job.state.active:
                self.core.lifecycle.stop_running(job, {"admin": "REQUEUE_HOLD", "user": "REQUEUE_UHOLD"}.get(
                    kind or "", "REQUEUE"), "requeue", now)
            elif job.state.finished:
                self.core.lifecycle.requeue_job(job, now, hold, held=kind)
            self.core.out.job(job)
        self.core.out.schedule()

    def suspend(self, who: Identity, jobs: list[Job], resume: bool) -> None:
        if not who.operator:
            raise access_denied()
        now = self.shell.clock()
        for job in jobs:
            if resume and job.state == JobState.SUSPENDED:
                job.suspended_secs += now - (job.suspend_time or now)
                job.suspend_time = None
                self.core.set_state(job, JobState.RUNNING, now)
                self.core.out.control(job, {"op": "resume"})
            elif not resume and job.state == JobState.RUNNING:
                job.suspend_time = now
                self.core.set_state(job, JobState.SUSPENDED, now)
                self.core.out.control(job, {"op": "suspend"})
            else:
                raise SlurmError("Job state is not suitable for this operation"
                                 if not resume else "Job is not suspended", 0)
            self.core.out.job(job)

    def update_job(self, who: Identity, job: Job, changes: dict[str, Any]) -> None:
        self._check_owner_uid(who, job)
        who = self.auth.as_job_operator(who, job)
        if job.state.finished:
            if job.array_job_id is not None and any(
                    j.array_job_id == job.array_job_id and not j.state.finished
                    for j in self.core.jobs.values()):
                return  # an array's finished task: the update is for the others
            raise SlurmError("Job has already finished", ESLURM_ALREADY_DONE)
        pending_only = {"partition", "numnodes", "dependency", "name", "jobname"}
        for key, value in changes.items():
            k = key.lower()
            if k in pending_only and job.state != JobState.PENDING:
                raise SlurmError("Job is no longer pending execution", ESLURM_JOB_PENDING)
            if k == "timelimit":
                from corral.model.timefmt import TimeFormatError, parse_time_limit

                try:
                    limit = parse_time_limit(str(value))
                except TimeFormatError:
                    raise SlurmError("Invalid time limit specification", ESLURM_INVALID_TIME_LIMIT) from None
                # users may only shorten their jobs (Slurm's rule); UNLIMITED is the longest
                longer = (limit < 0 and job.time_limit >= 0) or (0 <= job.time_limit < limit)
                if not who.operator and longer:
                    raise access_denied()
                job.time_limit = limit
                if job.state.active:
                    self.core.out.control(job, {"op": "time_limit", "seconds": limit})
            elif k == "partition":
                part = self.core.partitions.get(str(value))
                if part is None:
                    raise SlurmError("Invalid partition name specified", ESLURM_INVALID_PARTITION_NAME)
                if part.state in ("DRAIN", "INACTIVE"):
                    raise SlurmError(NOT_AVAILABLE, ESLURM_PARTITION_NOT_AVAIL)
                owner = self.auth.identity(job.uid, job.gid)
                self.check_partition_access(owner, part, job.account, job.qos)
                job.partition = part.name
            elif k == "numnodes":
                try:
                    job.num_nodes = int(str(value).split("-")[0])
                except ValueError:
                    raise SlurmError("Invalid node count specification", 0) from None
            elif k == "dependency":
                text = str(value)
                if text:
                    try:
                        sched_deps.parse_dependency(text)
                    except sched_deps.DependencyError:
                        raise SlurmError("Job dependency problem", ESLURM_DEPENDENCY) from None
                job.dependency = text or None
                job.dependency_text = None  # rendered again by the next pass
                # a rare admin action: the store is read here, never in a pass
                self.core.remember_gone(self.core.unknown_dependencies([job]))
            elif k in ("name", "jobname"):
                job.name = str(value)
            elif k == "nice":
                try:
                    nice = int(value)
                except ValueError:
                    raise SlurmError("Invalid nice value", 0) from None
                if nice < 0 and not who.operator:
                    raise access_denied()
                job.nice = nice
                if not job.held:
                    job.priority = self.core.passes.priority_now(job, self.shell.clock())
            elif k == "comment":
                job.comment = str(value)
            elif k == "arraytaskthrottle":
                self._update_throttle(job, value)
            elif k == "priority":
                self._update_priority(who, job, value)
            elif k in ("starttime", "begintime", "eligibletime"):
                if job.state != JobState.PENDING:
                    raise SlurmError("Job is no longer pending execution", ESLURM_JOB_NOT_PENDING)
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise SlurmError("Invalid time specification", 0)
                # a requeued job waits a moment before it may start again; StartTime=now
                # makes it eligible at once, as on Slurm
                job.begin_time = float(value) if value > self.shell.clock() else None
                if job.reason == Reason.BEGIN_TIME:
                    job.reason = Reason.NONE
            else:
                raise SlurmError(f"Update of {key} is not supported", 0)
        self.core.out.job(job)
        self.core.out.schedule()

    def _update_throttle(self, job: Job, value: Any) -> None:
        """ArrayTaskThrottle=N (0: no limit) on every record of the job's array: the tasks
        still in the array record and those split off it."""
        if job.array_job_id is None:
            raise SlurmError("Invalid job array specification", ESLURM_INVALID_ARRAY)
        try:
            limit = int(value)
        except (TypeError, ValueError):
            limit = -1
        if isinstance(value, bool) or not 0 <= limit < 2**31:
            raise SlurmError("Invalid job array specification", ESLURM_INVALID_ARRAY)
        for j in self.core.jobs.values():
            if j.array_job_id == job.array_job_id:
                j.array_max_running = limit or None
                self.core.out.job(j)

    def _update_priority(self, who: Identity, job: Job, value: Any) -> None:
        """Priority=: operators set it (it stays); 0 holds the job; a user may only lower
        their job's priority, which Slurm applies but does not keep (ESLURM_PRIO_RESET_FAIL):
        Corral recomputes priorities every pass, so it refuses that instead."""
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32 - 1:
            raise SlurmError("Invalid priority value", 0)
        if job.state != JobState.PENDING:
            raise SlurmError("Job is no longer pending execution", ESLURM_JOB_NOT_PENDING)
        if value == 0:
            self.hold(who, [job], "hold")
            return
        if job.held:
            raise SlurmError("Job is in held state, pending scheduler release", ESLURM_JOB_HELD)
        if not who.operator:
            if value >= job.priority:
                raise access_denied()
            raise SlurmError("Changes to job priority are not persistent, change nice instead",
                             ESLURM_PRIO_RESET_FAIL)
        job.priority_set = value
        job.priority = value

    def top(self, who: Identity, jobs: list[Job]) -> None:
        """`scontrol top`: these pending jobs ahead of the same user's other pending jobs
        in their partition, by taking the highest priorities among them (slurmctld's
        _set_top: the user's total priority stays the same, so nobody else loses)."""
        params = self.core.config.options.get("SchedulerParameters", "").lower()
        if not who.operator and "disable_user_top" in params:
            raise access_denied()
        for job in jobs:
            if not who.operator and who.uid != job.uid:
                raise access_denied()
        for job in jobs:
            if job.state != JobState.PENDING:
                raise SlurmError("Job is no longer pending execution", ESLURM_JOB_NOT_PENDING)
            if job.held:
                raise SlurmError("Job is in held state, pending scheduler release",
                                 ESLURM_JOB_HELD)
        tops = {j.job_id for j in jobs}
        for part in {j.partition for j in jobs}:
            top_jobs = [j for j in jobs if j.partition == part]
            uids = {j.uid for j in top_jobs}
            others = [j for j in self.core.pending.values()
                      if j.uid in uids and j.partition == part and not j.held
                      and j.job_id not in tops]
            group = sorted([*top_jobs, *others], key=lambda j: -self._prio_of(j))
            prios = [self._prio_of(j) for j in group]
            order = top_jobs + [j for j in group if j.job_id not in tops]
            # hand the same priorities out again, the top jobs first; nice carries the
            # difference so each pass's recomputation keeps the new order
            for j, p in zip(order, prios, strict=True):
                delta = p - self._prio_of(j)
                if delta:
                    if j.priority_set is not None:
                        j.priority_set = p
                    else:
                        j.nice -= delta
                    j.priority = p
                    self.core.out.job(j)
        self.core.out.schedule()

    def _prio_of(self, job: Job) -> int:
        return job.priority if job.priority else self.core.passes.priority_now(job, self.shell.clock())

    def notify_job(self, who: Identity, job: Job, message: str) -> None:
        """`scontrol notify`: a message for the job's user.  Slurm writes it to the job's
        srun/salloc; Corral records it on the job (the controller's log has it too) and
        sends it to the batch step's agent as a control op."""
        if not who.operator and who.uid != job.uid:
            raise invalid_user()
        if not isinstance(message, str) or not message:
            raise SlurmError("No message given", 0)
        if job.state.finished or job.state == JobState.PENDING:
            raise SlurmError("Job is no longer pending execution" if job.state.finished
                             else "Job is pending execution", ESLURM_JOB_NOT_PENDING)
        text = message[:NOTIFY_MAX]
        job.notices = [*job.notices[-9:], text]
        logged, held = _NOTIFY_LOGGED.allow(who.user)
        if logged:  # the line is escaped by the log's formatter (controller/logsafe.py)
            more = f" ({held} more notices not logged)" if held else ""
            log.info("job %d notified by %s: %.200s%s", job.job_id, who.user, text, more)
        self.core.out.control(job, {"op": "notify", "message": text})
        self.notify("notified", job)
        self.core.out.job(job)

    # --------------------------------------------------------- node admin
    def update_nodes(self, who: Identity, names: list[str], state: str, reason: str | None) -> None:
        if not who.operator:
            raise SlurmError("Access/permission denied", ESLURM_ACCESS_DENIED, 403)
        nodes = []
        for name in names:
            n = self.core.nodes.get(name)
            if n is None:
                raise SlurmError("Invalid node name specified", ESLURM_INVALID_NODE_NAME, 404)
            nodes.append(n)
        st = state.lower()
        if st in ("resume", "idle", "undrain"):
            for n in nodes:  # a node a health check drained comes back once it passes
                self.health.refuse_resume(n)
        if st in ("drain", "down", "fail") and not reason:
            raise SlurmError("You must specify a reason when DOWNING or DRAINING a node. Request denied", 0)
        if st not in ("drain", "fail", "down", "resume", "idle", "undrain"):
            raise SlurmError(f"Invalid node state specified: {state}", 0)
        now = self.shell.clock()
        refused = [n for n in nodes if not _node_state_change_valid(n, st)]
        nodes = [n for n in nodes if n not in refused]
        for n in nodes:
            if st in ("drain", "fail"):
                n.admin_state = "drain"
            elif st == "down":
                n.admin_state = "down"
                for job in list(self.core.running.values()):
                    if n.name in job.nodes and not job.batch:
                        self.core.lifecycle.end_allocation(job, "NODE_FAIL", self.shell.clock())
                    elif n.name in job.nodes and job.kill_reason is None:
                        job.kill_reason = "NODE_FAIL"
                        if job.state != JobState.COMPLETING:
                            self.core.set_state(job, JobState.COMPLETING, now)
                        self.core.out.control(job, {"op": "cancel"})
                        self.core.out.job(job)
            else:
                n.admin_state = "up"
            if n.admin_state == "up":
                self.health.resumed(n)
                n.reason = n.reason_user = None
                n.reason_uid = n.reason_time = None
            else:
                n.reason, n.reason_user, n.reason_uid, n.reason_time = reason, who.user, who.uid, now
            self.core.node_event(n, {"drain": NodeEventKind.DRAINED, "down": NodeEventKind.DOWN}
                                 .get(n.admin_state, NodeEventKind.RESUMED), now)
            self.core.out.node(n.name)
        self.core.out.schedule()
        if refused:  # the others changed, as slurmctld's update_node goes on past them
            raise SlurmError("Invalid node state specified", ESLURM_INVALID_NODE_STATE)

    # ---- configuration ------------------------------------------------------------------
    def config_info(self) -> dict[str, Any]:
        """What /v1/config answers (`scontrol show config`): slurm.conf's options and the
        values Slurm computes (NEXT_JOB_ID, MaxNodeCount)."""
        return {"cluster_name": self.core.settings.cluster_name, "options": dict(self.core.config.options),
                "config_path": self.shell.config_path, "started": self.started, "home": self.home,
                "next_job_id": self.core.next_id, "node_count": len(self.core.nodes)}

    def ping_info(self) -> dict[str, Any]:
        """What /v1/ping answers (`scontrol ping` prints the controller's host)."""
        return {"ok": True, "cluster": self.core.settings.cluster_name, "host": os.uname().nodename.split(".")[0],
                "now": self.shell.clock(), "started": self.started}

    def reconfigure(self, who: Identity, text: str | None = None) -> list[str]:
        """`scontrol reconfigure`: read slurm.conf again (or `text`) and apply it without a
        restart: global limits and scheduling parameters, node sizes, features and
        weights, new nodes, partitions and their limits and access lists.  A node that
        is gone from the file while jobs run on it is refused (Slurm needs a restart to
        remove nodes).  Operators only.  Returns what changed, one line each."""
        if not who.operator:
            raise access_denied()
        if text is None:
            if not self.shell.config_path:
                raise SlurmError("No configuration file to read", ESLURM_DISABLED)
            try:
                with open(self.shell.config_path, encoding="utf-8") as f:
                    text = f.read()
            except OSError as e:
                raise SlurmError(f"Cannot read {self.shell.config_path}: {e.strerror}", 0) from None
        try:
            new = parse_config(text)
        except ConfigError as e:
            raise SlurmError(f"Invalid configuration: {e}", 0) from None
        new_nodes = {n.name: n for n in new.nodes}
        for name, n in self.core.nodes.items():
            if name not in new_nodes and n.job_count and name not in self._dynamic_nodes():
                raise SlurmError(f"Node {name} is gone from the configuration but runs jobs; "
                                 "restart the controller to remove it", 0)
        changes: list[str] = []
        try:
            settings = CoreSettings.from_config(new)
        except ConfigError as e:
            raise SlurmError(f"Invalid configuration: {e}", 0) from None
        self.core.config.options = new.options
        self.core.config.unknown = new.unknown
        # the cluster's name is kept until a restart, as in Slurm
        settings.cluster_name = self.core.settings.cluster_name
        self.core.settings = settings
        self.auth.reload(new)
        dynamic = self._dynamic_nodes()
        for name in list(self.core.nodes):
            if name not in new_nodes and name not in dynamic:
                del self.core.nodes[name]
                self.shell.agent_senders.pop(name, None)
                changes.append(f"node {name} removed")
        for name, fresh in new_nodes.items():
            cur = self.core.nodes.get(name)
            if cur is None:
                fresh.reason, fresh.reason_user, fresh.reason_uid, fresh.reason_time = \
                    NOT_RESPONDING_REASON, "root", 0, self.shell.clock()
                fresh.partitions = []
                self.core.nodes[name] = fresh
                changes.append(f"node {name} added")
                continue
            before = (cur.cpus, cur.real_memory, cur.gpus, cur.gpu_type, cur.weight,
                      list(cur.features), cur.tmp_disk)
            cur.cpus, cur.real_memory, cur.gpus, cur.gpu_type = \
                fresh.cpus, fresh.real_memory, fresh.gpus, fresh.gpu_type
            cur.sockets, cur.cores_per_socket, cur.threads_per_core = \
                fresh.sockets, fresh.cores_per_socket, fresh.threads_per_core
            cur.weight, cur.features = fresh.weight, list(fresh.features)
            cur.tmp_disk = fresh.tmp_disk
            cur.addr = fresh.addr or cur.addr
            if before != (cur.cpus, cur.real_memory, cur.gpus, cur.gpu_type, cur.weight,
                          cur.features, cur.tmp_disk):
                changes.append(f"node {name} changed")
        for n in self.core.nodes.values():
            n.partitions = []
        old_parts = set(self.core.partitions)
        self.core.partitions.clear()
        for p in new.partitions:
            p.nodes = [x for x in p.nodes if x in self.core.nodes]
            self.core.partitions[p.name] = p
            for x in p.nodes:
                self.core.nodes[x].partitions.append(p.name)
        default = new.default_partition()
        for name in dynamic:  # joined nodes stay in the default partition
            if default is not None and name in self.core.nodes and name not in default.nodes:
                default.nodes.append(name)
                self.core.nodes[name].partitions.append(default.name)
        self.core.config.nodes = [self.core.nodes[n] for n in new_nodes if n in self.core.nodes]
        self.core.config.partitions = list(self.core.partitions.values())
        changes += [f"partition {p} removed" for p in sorted(old_parts - set(self.core.partitions))]
        changes += [f"partition {p} added" for p in sorted(set(self.core.partitions) - old_parts)]
        self._idle_views.clear()
        for n in self.core.nodes.values():
            self.core.out.node(n.name)
        self.partitions_reset()  # slurm.conf's partitions win over runtime changes
        log.info("reconfigured by %s: %s", who.user, "; ".join(changes) or "no node or "
                 "partition added or removed")
        self.core.out.schedule()
        return changes

    def _dynamic_nodes(self) -> set[str]:
        configured = {n.name for n in self.core.config.nodes}
        return {name for name in self.core.nodes if name not in configured}


def _node_state_change_valid(n: Node, state: str) -> bool:
    """slurmctld's _valid_node_state_change: RESUME only brings back a drained, failed or
    down node, IDLE only a down or idle one; DRAIN, DOWN, FAIL and UNDRAIN always apply."""
    down = n.admin_state == "down" or (not n.registered and not n.responding)
    if state == "resume":
        return down or n.admin_state != "up"
    if state == "idle":
        return down or (n.job_count == 0 and n.alloc_cpus == 0)
    return True
