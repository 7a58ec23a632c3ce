"""The controller's cluster state and every transition of it.

All methods run on the controller's event loop thread.  A change is made in
memory, marked dirty, and made durable by the group-commit writer before the
caller answers the client (`await self.durable()`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import pwd
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from corral.model import hostlists
from corral.model.arrays import ArraySpecError, parse_array_spec
from corral.model.config import ClusterConfig
from corral.model.job import Job, JobState, NodeAlloc, Reason, Step
from corral.model.jobenv import array_environment, batch_environment
from corral.model.node import Node, Partition
from corral.model.patterns import expand_pattern
from corral.model.timefmt import TimeFormatError, parse_time_limit
from corral.sched import deps as sched_deps
from corral.sched.backfill import schedule
from corral.sched.priority import job_priority
from corral.sched.select import fits_ever
from corral.sched.snapshot import INFINITE_TIME, NodeView, PendingView, RunningView, Snapshot
from corral.store.base import JobPayload, NodeRecord, Store, WriteBatch

log = logging.getLogger("corral.controller")

# Slurm errno values for the messages clients see
ESLURM_INVALID_PARTITION_NAME = 2000
ESLURM_INVALID_JOB_ID = 2017
ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE = 2014
ESLURM_ACCESS_DENIED = 2002
ESLURM_DEPENDENCY = 2018
ESLURM_INVALID_ARRAY = 2079
ESLURM_ALREADY_DONE = 2021
ESLURM_JOB_PENDING = 2020
ESLURM_INVALID_TIME_LIMIT = 2051
ESLURM_INVALID_NODE_NAME = 2009
ESLURM_TRANSITION_STATE_NO_UPDATE = 2023


NOT_RESPONDING_REASON = "Not responding"


class SlurmError(Exception):
    """A request the controller refuses, with Slurm's wording."""

    def __init__(self, message: str, errno: int = 0, status: int = 400,
                 user_msg: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.errno = errno
        self.status = status
        self.user_msg = user_msg


def _invalid_job() -> SlurmError:
    return SlurmError("Invalid job id specified", ESLURM_INVALID_JOB_ID, 404)


# Fields a submitter may set in `spec`; everything else is the controller's.
SPEC_FIELDS = {
    "name", "partition", "num_nodes", "max_nodes", "num_tasks", "ntasks_per_node",
    "cpus_per_task", "mem_per_node", "mem_per_cpu", "gpus", "gpus_per_node", "gpus_per_task",
    "gpu_type", "time_limit", "time_min", "req_nodes", "exc_nodes", "exclusive", "requeue",
    "dependency", "begin_time", "signal", "hint", "constraint", "mail_type", "mail_user", "comment",
    "work_dir", "stdout", "stderr", "stdin", "command", "submit_line", "submit_host",
    "account", "qos", "nice", "held", "batch",
}
_INT_FIELDS = {"num_nodes", "num_tasks", "cpus_per_task", "gpus", "gpus_per_node", "gpus_per_task",
               "nice"}
_OPT_INT_FIELDS = {"max_nodes", "ntasks_per_node", "mem_per_node", "mem_per_cpu", "time_limit",
                   "time_min"}


class Identity:
    __slots__ = ("uid", "gid", "user", "operator")

    def __init__(self, uid: int, gid: int, user: str, operator: bool) -> None:
        self.uid, self.gid, self.user, self.operator = uid, gid, user, operator


@functools.lru_cache(maxsize=4096)
def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


class Controller:
    def __init__(self, config: ClusterConfig, store: Store, *, config_path: str = "",
                 home: str = "") -> None:
        self.config = config
        self.config_path = config_path
        self.home = home
        self.store = store
        self.started = time.time()
        self.cluster_name = config.cluster_name
        self.kill_wait = config.get_int("KillWait")
        self.min_job_age = config.get_int("MinJobAge")
        self.def_mem_per_cpu = config.get_int("DefMemPerCPU")
        self.max_array_size = config.get_int("MaxArraySize")
        self.nodes: dict[str, Node] = {n.name: n for n in config.nodes}
        self.partitions: dict[str, Partition] = {p.name: p for p in config.partitions}
        self.jobs: dict[int, Job] = {}
        self.pending: dict[int, Job] = {}  # subset of jobs: PENDING
        self.running: dict[int, Job] = {}  # subset: holding resources
        self.next_id = 1
        self.own_uid = os.geteuid()
        self.operators = self._operator_uids()
        # agent links: node name -> callable sending one message to its agent
        self.agent_senders: dict[str, Callable[[dict[str, Any]], None]] = {}
        # group commit
        self._dirty_jobs: dict[int, Job] = {}
        self._dirty_nodes: set[str] = set()
        self._payloads: list[tuple[int, JobPayload]] = []
        self._after_commit: list[tuple[Callable[[dict[str, Any]], None], dict[str, Any]]] = []
        self._next_id_dirty = False
        self._flush_waiter: asyncio.Future[None] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store")
        # scheduling
        self._sched_handle: asyncio.Handle | None = None
        self._sched_running = False
        self._sched_again = False
        self.last_sched_duration = 0.0
        self._idle_views: dict[str, list[NodeView]] = {}  # per partition, for feasibility checks
        self.sched_passes = 0
        # callbacks(event, job) for "started" and "ended" (steps and allocations listen)
        self.listeners: list[Callable[[str, Job], None]] = []
        self.stats = {"submitted": 0, "started": 0, "completed": 0, "failed": 0,
                      "cancelled": 0, "timeout": 0}

    # ------------------------------------------------------------------ set-up
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

    def identity(self, uid: int, gid: int) -> Identity:
        return Identity(uid, gid, user_name(uid), uid in self.operators)

    def recover(self) -> None:
        """Load what the store holds after a restart."""
        for rec in self.store.load_nodes():
            n = self.nodes.get(rec.name)
            if n is None:
                continue
            n.admin_state, n.reason = rec.admin_state, rec.reason
            n.reason_user, n.reason_uid, n.reason_time = rec.reason_user, rec.reason_uid, rec.reason_time
        for job in self.store.load_active_jobs():
            self.jobs[job.job_id] = job
            if job.state == JobState.PENDING:
                self.pending[job.job_id] = job
            elif job.state.active:
                self.running[job.job_id] = job
                self._charge(job)
        for job in self.store.load_recent_finished(time.time() - self.min_job_age):
            self.jobs[job.job_id] = job
        for n in self.nodes.values():
            if n.reason is None and not n.registered:
                # configured, no agent yet: down, and sinfo -R says why
                n.reason, n.reason_user, n.reason_uid, n.reason_time = \
                    NOT_RESPONDING_REASON, "root", 0, self.started
        self.next_id = self.store.next_job_id()
        log.info("recovered %d pending and %d running jobs; next job id %d",
                 len(self.pending), len(self.running), self.next_id)

    def notify(self, event: str, job: Job) -> None:
        for cb in list(self.listeners):
            try:
                cb(event, job)
            except Exception:
                log.exception("listener failed on %s of job %d", event, job.job_id)

    # ----------------------------------------------------------- persistence
    def mark(self, job: Job) -> None:
        self._dirty_jobs[job.job_id] = job
        self._kick_writer()

    def mark_node(self, node: Node) -> None:
        self._dirty_nodes.add(node.name)
        self._kick_writer()

    def _kick_writer(self) -> None:
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_loop())

    async def durable(self) -> None:
        """Return once every change made so far is committed to the store."""
        if not (self._dirty_jobs or self._dirty_nodes or self._payloads or self._next_id_dirty):
            if self._writer is None or self._writer.done():
                return
        if self._flush_waiter is None:
            self._flush_waiter = asyncio.get_running_loop().create_future()
        fut = self._flush_waiter
        self._kick_writer()
        await asyncio.shield(fut)

    async def _write_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while self._dirty_jobs or self._dirty_nodes or self._payloads or self._next_id_dirty \
                or self._flush_waiter is not None or self._after_commit:
            batch = WriteBatch(
                jobs=[j.to_dict() for j in self._dirty_jobs.values()],
                payloads=self._payloads,
                nodes=[self._node_record(self.nodes[n]) for n in self._dirty_nodes],
                next_job_id=self.next_id if self._next_id_dirty else None,
            )
            self._dirty_jobs = {}
            self._dirty_nodes = set()
            self._payloads = []
            self._next_id_dirty = False
            waiter, self._flush_waiter = self._flush_waiter, None
            after, self._after_commit = self._after_commit, []
            try:
                if batch:
                    prepared = self.store.prepare(batch)
                    await loop.run_in_executor(self._executor, self.store.commit, prepared)
            except Exception as e:  # the store failed: nobody may be told "done"
                log.exception("store write failed")
                if waiter is not None and not waiter.done():
                    waiter.set_exception(SlurmError(f"state store write failed: {e}", 0, 500))
                for send, msg in after:  # the cluster must still act on what memory holds
                    send(msg)
                continue
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
            if after:
                # let the answers that waited on this commit go out first
                await asyncio.sleep(0)
                for send, msg in after:
                    send(msg)

    @staticmethod
    def _node_record(n: Node) -> NodeRecord:
        return NodeRecord(n.name, n.admin_state, n.reason, n.reason_user, n.reason_uid, n.reason_time)

    # ------------------------------------------------------------- lookups
    def find_jobs(self, spec: str, *, split: bool = False) -> list[Job]:
        """Jobs named by "12", "7" (a whole array), "7_2", "7_[1-3]"; [] if unknown.

        With `split`, tasks named one by one that are still part of a pending array record
        are split off into records of their own, so an action touches only them.
        """
        spec = spec.strip()
        if "_" in spec:
            head, _, tail = spec.partition("_")
            if not head.isdigit():
                raise _invalid_job()
            arr = int(head)
            tail = tail.strip("[]")
            try:
                wanted = set(parse_array_spec(tail, 1 << 31)[0])
            except ArraySpecError:
                raise _invalid_job() from None
            out = []
            for j in list(self.jobs.values()):
                if j.array_job_id != arr:
                    continue
                if j.array_tasks is not None:
                    named = wanted.intersection(j.array_tasks)
                    if not named:
                        continue
                    if split and j.state == JobState.PENDING:
                        if named == set(j.array_tasks):
                            out.append(j)  # every task left: act on the array record itself
                        else:
                            out.extend(self._split_array_task(j, time.time(), t) for t in sorted(named))
                    else:
                        out.append(j)
                elif j.array_task_id in wanted:
                    out.append(j)
            return out
        if not spec.isdigit():
            raise _invalid_job()
        jid = int(spec)
        job = self.jobs.get(jid)
        out = [job] if job is not None else []
        out.extend(j for j in self.jobs.values() if j.array_job_id == jid and j.job_id != jid)
        return out

    def check_owner(self, who: Identity, job: Job) -> None:
        if not who.operator and who.uid != job.uid:
            raise SlurmError("Access/permission denied", ESLURM_ACCESS_DENIED, 403)

    # -------------------------------------------------------------- submit
    def _validate_spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in spec.items():
            if k not in SPEC_FIELDS:
                raise SlurmError(f"Unknown job field {k!r}", 0)
            if v is None:
                continue
            if k in _INT_FIELDS or k in _OPT_INT_FIELDS:
                if isinstance(v, bool) or not isinstance(v, int | float):
                    raise SlurmError(f"Invalid value for {k}: {v!r}", 0)
                v = int(v)
                if v < 0 and not (k == "time_limit" and v == -1) and k != "nice":
                    raise SlurmError(f"Invalid value for {k}: {v}", 0)
            elif k in ("req_nodes", "exc_nodes"):
                if isinstance(v, str):
                    v = hostlists.expand(v)
                if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                    raise SlurmError(f"Invalid node list for {k}", 0)
            elif k in ("exclusive", "requeue", "batch"):
                v = bool(v)
            elif k == "begin_time":
                v = float(v)
            elif k == "held":
                if v not in ("user", "admin"):
                    raise SlurmError("Invalid hold value", 0)
            elif not isinstance(v, str):
                raise SlurmError(f"Invalid value for {k}: {v!r}", 0)
            out[k] = v
        return out

    async def submit(self, who: Identity, spec_in: dict[str, Any], script: str,
                     env: dict[str, str], argv: list[str], array: str | None,
                     open_mode: str = "truncate") -> Job:
        if not isinstance(spec_in, dict):
            raise SlurmError("Invalid job description", 0)
        if not isinstance(script, str) or (not script and spec_in.get("batch", True)):
            raise SlurmError("Batch script is empty!", 0)
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in env.items()):
            raise SlurmError("Invalid job environment", 0)
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise SlurmError("Invalid script arguments", 0)
        spec = self._validate_spec(spec_in)
        now = time.time()
        pname = spec.pop("partition", None)
        part: Partition | None
        if pname:
            part = self.partitions.get(pname)
            if part is None:
                raise SlurmError("Invalid partition name specified", ESLURM_INVALID_PARTITION_NAME,
                                 user_msg=f"invalid partition specified: {pname}")
        else:
            part = self.config.default_partition()
            if part is None:
                raise SlurmError("No partition specified or system default partition",
                                 ESLURM_INVALID_PARTITION_NAME)
        if spec.get("held") == "admin" and not who.operator:
            spec["held"] = "user"
        if spec.get("nice", 0) < 0 and not who.operator:
            raise SlurmError("Access/permission denied", ESLURM_ACCESS_DENIED, 403)
        job = Job(job_id=0, name=spec.pop("name", "sbatch"), user=who.user, uid=who.uid,
                  gid=who.gid, **spec)
        job.partition = part.name
        job.group = _group_name(who.gid)
        job.account = job.account or who.user
        job.submit_time = now
        if "time_limit" not in spec or job.time_limit is None:
            job.time_limit = part.default_time if part.default_time is not None else part.max_time
        if job.num_nodes < 1 or job.num_tasks < 1 or job.cpus_per_task < 1:
            raise SlurmError("Invalid node count or task count", 0)
        if job.max_nodes is not None and job.max_nodes < job.num_nodes:
            raise SlurmError("Invalid node count specification", 0)
        for name in [*job.req_nodes, *job.exc_nodes]:
            if name not in self.nodes:
                raise SlurmError("Invalid node name specified", ESLURM_INVALID_NODE_NAME)
        if job.req_nodes and not set(job.req_nodes) <= set(part.nodes):
            raise SlurmError("Requested node configuration is not available",
                             ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE)
        if job.dependency:
            try:
                sched_deps.parse_dependency(job.dependency)
            except sched_deps.DependencyError:
                raise SlurmError("Job dependency problem", ESLURM_DEPENDENCY) from None
        self._check_feasible(job, part)
        if array:
            try:
                ids, throttle = parse_array_spec(array, self.max_array_size)
            except ArraySpecError:
                raise SlurmError("Invalid job array specification", ESLURM_INVALID_ARRAY) from None
            job.array_tasks = ids
            job.array_max_running = throttle
            job.array_spec = array
        job.job_id = self.next_id
        self.next_id += 1
        self._next_id_dirty = True
        if job.array_tasks is not None:
            job.array_job_id = job.job_id
        job.priority = self._priority(job, now)
        if job.held:
            job.reason = Reason.HELD_ADMIN if job.held == "admin" else Reason.HELD_USER
            job.priority = 0
        self._payloads.append((job.job_id, JobPayload(script, env, argv, open_mode)))
        self.mark(job)
        await self.durable()
        # visible only once durable: a job the client was never told about must not run
        self.jobs[job.job_id] = job
        self.pending[job.job_id] = job
        self.stats["submitted"] += 1
        if job.mail_type:
            log.info("job %d asked for mail (%s); Corral does not send mail", job.job_id, job.mail_type)
        if not job.held:  # a held job changes nothing the scheduler could act on
            self.request_schedule()
        return job

    def _check_feasible(self, job: Job, part: Partition) -> None:
        nodes = [self.nodes[n] for n in part.nodes]
        if not nodes:
            raise SlurmError("Requested node configuration is not available",
                             ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE)
        max_mem = max(n.real_memory for n in nodes)
        per_node_mem = job.mem_per_node or 0
        if job.mem_per_cpu:
            per_node_mem = max(per_node_mem, job.mem_per_cpu * job.cpus_per_task)
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
            views = self._idle_views[part.name] = [self._idle_view(n) for n in nodes]
        pv = self._pending_view(job, ignore_nodes=False)
        pv.partition = part.name
        if not fits_ever(pv, views, self.def_mem_per_cpu):
            raise SlurmError("Requested node configuration is not available",
                             ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE)

    def _priority(self, job: Job, now: float) -> int:
        part = self.partitions.get(job.partition)
        max_factor = max((p.priority_job_factor for p in self.partitions.values()), default=1)
        return job_priority(
            job.submit_time, now,
            partition_job_factor=part.priority_job_factor if part else 1,
            max_partition_job_factor=max_factor or 1,
            weight_age=self.config.get_int("PriorityWeightAge"),
            max_age_s=self.config.get_seconds("PriorityMaxAge"),
            weight_partition=self.config.get_int("PriorityWeightPartition"),
            nice=job.nice,
        )

    # ---------------------------------------------------------- scheduling
    def request_schedule(self, delay: float = 0.0) -> None:
        """Run a scheduling pass soon; requests made meanwhile coalesce into one."""
        if self._sched_running:
            self._sched_again = True
            return
        if self._sched_handle is not None:
            return
        loop = asyncio.get_running_loop()
        if delay:
            self._sched_handle = loop.call_later(delay, self._run_schedule)
        else:
            self._sched_handle = loop.call_soon(self._run_schedule)

    def _run_schedule(self) -> None:
        self._sched_handle = None
        self._sched_running = True
        t0 = time.perf_counter()
        try:
            self.schedule_pass(time.time())
        except Exception:
            log.exception("scheduling pass failed")
        finally:
            self._sched_running = False
            self.last_sched_duration = time.perf_counter() - t0
            self.sched_passes += 1
        if self._sched_again:
            self._sched_again = False
            # Under load, passes coalesce: scheduling takes at most about a third of the
            # loop, so submissions keep flowing while the queue is long.
            self.request_schedule(max(0.002, min(1.0, 2 * self.last_sched_duration)))

    def _dep_lookup(self, job_id: int, task_id: int | None) -> list[tuple[str, int, float | None]]:
        out: list[tuple[str, int, float | None]] = []
        if task_id is None:
            js = [j for j in self.jobs.values() if j.job_id == job_id or j.array_job_id == job_id]
        else:
            js = [j for j in self.jobs.values() if j.array_job_id == job_id
                  and (j.array_task_id == task_id or (j.array_tasks and task_id in j.array_tasks))]
        for j in js:
            out.append((j.state.value, j.exit_code, j.start_time))
        if not js:
            for j in self.store.query_jobs(ids=[job_id] if task_id is None else None,
                                           array_ids=[job_id]):
                if task_id is None or j.array_task_id == task_id:
                    out.append((j.state.value, j.exit_code, j.start_time))
        return out

    def _eligible(self, job: Job, now: float, running_per_array: dict[int, int]) -> bool:
        if job.held:
            job.reason = Reason.HELD_ADMIN if job.held == "admin" else Reason.HELD_USER
            return False
        if job.begin_time and job.begin_time > now:
            job.reason = Reason.BEGIN_TIME
            return False
        if job.dependency:
            singleton_blocked = False
            if "singleton" in job.dependency:
                singleton_blocked = any(
                    j.name == job.name and j.uid == job.uid and j.job_id != job.job_id
                    and (j.state.active or (j.state == JobState.PENDING and j.job_id < job.job_id
                                            and j.array_job_id != job.array_job_id))
                    for j in self.jobs.values())
            try:
                dep = sched_deps.parse_dependency(job.dependency)
                verdict = sched_deps.evaluate(dep, self._dep_lookup, now, job_user=job.user,
                                              job_name=job.name, singleton_blocked=singleton_blocked)
            except sched_deps.DependencyError:
                verdict = "never"
            if verdict == "waiting":
                job.reason = Reason.DEPENDENCY
                return False
            if verdict == "never":
                job.reason = Reason.DEPENDENCY_NEVER
                return False
        part = self.partitions.get(job.partition)
        if part is None or part.state != "UP":
            job.reason = Reason.PARTITION_DOWN if part is None or part.state == "DOWN" \
                else Reason.PARTITION_INACTIVE
            return False
        if part.max_time >= 0 and (job.time_limit < 0 or job.time_limit > part.max_time):
            job.reason = Reason.PARTITION_TIME_LIMIT
            return False
        if job.num_nodes > len(part.nodes) or (part.max_nodes and job.num_nodes > part.max_nodes):
            job.reason = Reason.PARTITION_NODE_LIMIT
            return False
        if job.array_tasks is not None and job.array_max_running:
            if running_per_array.get(job.job_id, 0) >= job.array_max_running:
                job.reason = Reason.ARRAY_LIMIT
                return False
        return True

    def _idle_view(self, n: Node) -> NodeView:
        return NodeView(n.name, n.cpus, n.real_memory, n.gpus, n.cpus, n.real_memory,
                        list(range(n.gpus)), True, n.weight, tuple(n.partitions),
                        tuple(n.features), 0, False)

    def _node_view(self, n: Node) -> NodeView:
        return NodeView(n.name, n.cpus, n.real_memory, n.gpus, n.free_cpus, n.free_mem_mb,
                        n.free_gpu_ids, n.usable, n.weight, tuple(n.partitions),
                        tuple(n.features), n.job_count, n.exclusive_job is not None)

    @staticmethod
    def _pending_view(job: Job, ignore_nodes: bool = False) -> PendingView:
        return PendingView(
            job.job_id, job.priority, job.submit_time, job.partition, job.user,
            job.num_nodes, job.max_nodes, job.num_tasks, job.ntasks_per_node, job.cpus_per_task,
            job.mem_per_node, job.mem_per_cpu, job.gpus, job.gpus_per_node, job.gpus_per_task,
            job.exclusive, tuple(job.req_nodes), tuple(job.exc_nodes), job.time_limit)

    def schedule_pass(self, now: float) -> None:
        running_per_array: dict[int, int] = {}
        for j in self.running.values():
            if j.array_job_id is not None:
                running_per_array[j.array_job_id] = running_per_array.get(j.array_job_id, 0) + 1
        candidates: list[PendingView] = []
        for job in self.pending.values():
            if job.held:
                continue
            job.last_sched_eval = now
            if self._eligible(job, now, running_per_array):
                if job.eligible_time is None:
                    job.eligible_time = now
                candidates.append(self._pending_view(job))
        if not candidates:
            return
        snap = Snapshot(
            now=now,
            nodes={n.name: self._node_view(n) for n in self.nodes.values()},
            partitions=self.partitions,
            running=[RunningView(j.job_id,
                                 (j.start_time or now) + j.time_limit if j.time_limit > 0 else INFINITE_TIME,
                                 j.alloc, j.exclusive) for j in self.running.values()],
            pending=candidates,
            def_mem_per_cpu=self.def_mem_per_cpu,
        )
        decision = schedule(snap)
        started: set[int] = set()
        for job_id, alloc in decision.starts:
            found = self.pending.get(job_id)
            if found is None:
                continue
            job = found
            if job.array_tasks is not None:
                limit = job.array_max_running
                if limit and running_per_array.get(job.job_id, 0) >= limit:
                    continue
                job = self._split_array_task(job, now)
                running_per_array[job.array_job_id or 0] = running_per_array.get(job.array_job_id or 0, 0) + 1
            self._start(job, alloc, now)
            started.add(job_id)
        for job_id, reason in decision.reasons.items():
            waiting = self.pending.get(job_id)
            if waiting is not None and job_id not in started:
                waiting.reason = reason
        for job_id, (start, names) in decision.planned.items():
            waiting = self.pending.get(job_id)
            if waiting is not None:
                waiting.sched_start = start
                waiting.sched_nodes = list(names)
        # array metas with tasks left and a free throttle slot get another chance next pass
        if any(self.pending.get(j) is not None and self.pending[j].array_tasks for j in started):
            self.request_schedule()

    def _split_array_task(self, meta: Job, now: float, task_id: int | None = None) -> Job:
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
        d.update(job_id=self.next_id, array_tasks=None, array_task_id=task_id, array_max_running=None)
        self.next_id += 1
        self._next_id_dirty = True
        task = Job.from_dict(d)
        task.array_max_running = meta.array_max_running
        self.jobs[task.job_id] = task
        self.pending[task.job_id] = task
        self.mark(meta)
        return task

    def _charge(self, job: Job) -> None:
        for a in job.alloc:
            n = self.nodes.get(a.node)
            if n is None:
                continue
            n.alloc_cpus += a.cpus
            n.alloc_mem += a.mem_mb
            n.alloc_gpus.extend(a.gpus)
            n.job_count += 1
            if job.exclusive:
                n.exclusive_job = job.job_id

    def _release(self, job: Job, now: float) -> None:
        for a in job.alloc:
            n = self.nodes.get(a.node)
            if n is None:
                continue
            n.alloc_cpus -= a.cpus
            n.alloc_mem -= a.mem_mb
            for g in a.gpus:
                if g in n.alloc_gpus:
                    n.alloc_gpus.remove(g)
            n.job_count -= 1
            if n.exclusive_job == job.job_id:
                n.exclusive_job = None
            n.last_busy = now

    def _start(self, job: Job, alloc: list[NodeAlloc], now: float) -> None:
        self.pending.pop(job.job_id, None)
        job.state = JobState.RUNNING
        job.reason = Reason.NONE
        job.start_time = now
        job.end_time = None
        job.alloc = alloc
        job.nodes = [a.node for a in alloc]
        job.batch_host = job.nodes[0]
        job.scheduler = "Main"
        job.sched_start = None
        job.sched_nodes = []
        job.kill_reason = None
        self.running[job.job_id] = job
        self._charge(job)
        self.stats["started"] += 1
        if job.batch:
            job.steps = [s for s in job.steps if s.step_id != "batch"]
            job.steps.append(Step("batch", "batch", JobState.RUNNING.value, start_time=now,
                                  cpus=alloc[0].cpus, nodes=alloc[0].node))
            self._launch(job)
        self.mark(job)
        self.notify("started", job)

    def launch_message(self, job: Job) -> dict[str, Any]:
        payload = self.store.load_payload(job.job_id)
        if payload is None and job.array_job_id is not None:
            payload = self.store.load_payload(job.array_job_id)
        if payload is None:
            raise RuntimeError(f"no script stored for job {job.job_id}")
        first = job.alloc[0]
        env = dict(payload.env)
        env.update(batch_environment(job, cluster_name=self.cluster_name,
                                     submit_host=job.submit_host or os.uname().nodename))
        if job.array_spec:
            ids, _ = parse_array_spec(job.array_spec, 1 << 31)
            step = ids[1] - ids[0] if len(ids) > 1 else 1
            env.update(array_environment(len(ids), ids[0], ids[-1], step))
        env.setdefault("SLURM_CONF", self.config_path)
        if payload.open_mode == "append":
            env["SLURM_OPEN_MODE"] = "a"  # srun in the script appends too, as in Slurm
        is_array = job.array_job_id is not None
        default_out = "slurm-%A_%a.out" if is_array else "slurm-%j.out"

        def path(pattern: str | None, default: str | None) -> str | None:
            p = pattern or default
            if p is None:
                return None
            p = expand_pattern(p, job_id=job.job_id, name=job.name, user=job.user,
                               node=first.node, array_job_id=job.array_job_id,
                               array_task_id=job.array_task_id)
            return p if os.path.isabs(p) else os.path.join(job.work_dir, p)

        stdout = path(job.stdout, default_out)
        stderr = path(job.stderr, None) or stdout
        try:
            pw = pwd.getpwuid(job.uid)
            home = pw.pw_dir
        except KeyError:
            home = "/"
        signal = parse_signal_spec(job.signal)
        if signal is not None and not signal["batch_only"]:
            signal = None  # without B: the steps get it, not the batch shell (steps.py times it)
        return {
            "type": "launch",
            "node": first.node,
            "launch": {
                "job_id": job.job_id, "step": "batch", "node_name": first.node,
                "uid": job.uid, "gid": job.gid,
                "user": job.user, "home": home, "script_text": payload.script,
                "argv": payload.argv, "work_dir": job.work_dir, "stdout": stdout,
                "stderr": stderr, "stdin": path(job.stdin, "/dev/null"),
                "open_mode": payload.open_mode, "env": env, "time_limit": job.time_limit,
                "kill_wait": self.kill_wait, "signal": signal,
                "gpus": first.gpus, "cpus_count": first.cpus, "mem_mb": first.mem_mb or None,
                "restart_count": job.restart_count,
            },
        }

    def _launch(self, job: Job) -> None:
        assert job.batch_host is not None
        send = self.agent_senders.get(job.batch_host)
        try:
            msg = self.launch_message(job)
        except Exception as e:
            log.exception("cannot build launch for job %d", job.job_id)
            self.job_ended(job.job_id, "FAILED", 1, 0, time.time(), note=str(e))
            return
        if send is None:
            log.warning("no agent for node %s; job %d fails to launch", job.batch_host, job.job_id)
            self.job_ended(job.job_id, "NODE_FAIL", 0, 0, time.time())
            return
        send(msg)

    # ---------------------------------------------------------- job endings
    def job_ended(self, job_id: int, state: str, exit_code: int, signal: int, end_time: float,
                  note: str | None = None) -> Job | None:
        """The agent says the batch step is over (or a launch failed)."""
        job = self.jobs.get(job_id)
        if job is None or not job.state.active:
            return job
        self.running.pop(job_id, None)
        self._release(job, end_time)
        for s in job.steps:
            if s.step_id == "batch" and s.end_time is None:
                s.end_time = end_time
                s.exit_code, s.signal = exit_code, signal
                s.state = "CANCELLED" if (job.kill_reason or state == "TIMEOUT") and signal else state
                if state in ("COMPLETED", "FAILED", "OUT_OF_MEMORY"):
                    s.state = state
        reason = job.kill_reason
        job.kill_reason = None
        if reason in ("REQUEUE", "REQUEUE_HOLD") or (reason == "NODE_FAIL" and job.requeue):
            self._requeue(job, end_time, hold=(reason == "REQUEUE_HOLD"))
            self.mark(job)
            self.request_schedule()
            return job
        job.end_time = end_time
        if reason in ("CANCELLED", "NODE_FAIL", "PREEMPTED"):
            final = reason
            job.exit_code, job.term_signal = 0, 0
        else:
            final = state
            job.exit_code, job.term_signal = exit_code, signal
            if final == "TIMEOUT":
                job.exit_code, job.term_signal = 0, 0
        job.state = JobState(final)
        job.reason = Reason.NONE
        self._count_end(final)
        self.mark(job)
        self.notify("ended", job)
        self.request_schedule()
        return job

    def _count_end(self, state: str) -> None:
        key = {"COMPLETED": "completed", "CANCELLED": "cancelled", "TIMEOUT": "timeout"}.get(state, "failed")
        self.stats[key] += 1

    def end_allocation(self, job: Job, state: str, exit_code: int = 0, signal: int = 0) -> None:
        """A job without a batch script (salloc, srun) ends: released, cancelled, timed out."""
        if not job.state.active:
            return
        now = time.time()
        self.running.pop(job.job_id, None)
        self._release(job, now)
        job.kill_reason = None
        job.end_time = now
        job.state = JobState(state)
        job.exit_code, job.term_signal = exit_code, signal
        job.reason = Reason.NONE
        self._count_end(state)
        self.mark(job)
        self.notify("ended", job)
        self.request_schedule()

    def check_time_limits(self, now: float) -> None:
        """Allocations have no step supervisor to enforce their limit: the controller does."""
        for job in list(self.running.values()):
            if job.batch or job.time_limit <= 0 or job.start_time is None:
                continue
            if job.state == JobState.RUNNING and now >= job.start_time + job.time_limit + job.suspended_secs:
                log.info("allocation %d reached its time limit", job.job_id)
                self.end_allocation(job, "TIMEOUT")

    def _requeue(self, job: Job, now: float, hold: bool) -> None:
        job.state = JobState.PENDING
        job.restart_count += 1
        job.start_time = None
        job.end_time = None
        job.alloc = []
        job.nodes = []
        job.batch_host = None
        job.exit_code = job.term_signal = 0
        # Slurm waits before a requeued job may start again; keep a short delay
        job.begin_time = now + 1
        job.reason = Reason.BEGIN_TIME
        if hold:
            job.held = "admin"
            job.reason = Reason.HELD_ADMIN
            job.priority = 0
        self.pending[job.job_id] = job

    def finish_pending(self, job: Job, state: JobState, now: float, by: int | None = None) -> None:
        self.pending.pop(job.job_id, None)
        job.state = state
        job.end_time = now
        job.reason = Reason.NONE
        if by is not None:
            job.cancelled_by = by
        if state == JobState.CANCELLED:
            self.stats["cancelled"] += 1
        self.mark(job)
        self.notify("ended", job)

    # ------------------------------------------------------------- actions
    def _send_control(self, job: Job, op: dict[str, Any]) -> None:
        if job.batch_host is None:
            return
        send = self.agent_senders.get(job.batch_host)
        if send is not None:
            # Acted on once the decision is durable, and after the caller has its answer:
            # `scontrol requeue $SLURM_JOB_ID` inside the job must not be killed mid-request.
            self._after_commit.append((send, {"type": "control", "job_id": job.job_id, "control": op}))
            self._kick_writer()

    def signal_jobs(self, who: Identity, jobs: list[Job], signum: int, *, batch_only: bool,
                    cancel: bool, full: bool = False) -> None:
        """scancel: cancel, or deliver a signal (to the batch shell with -b, to every
        process of the batch step with -f; the job's srun steps are signalled by the caller
        through the step manager unless -b)."""
        now = time.time()
        for job in jobs:
            self.check_owner(who, job)
        for job in jobs:
            if job.state.finished:
                continue
            if job.state == JobState.PENDING:
                if cancel:
                    self.finish_pending(job, JobState.CANCELLED, now, by=who.uid)
                continue
            if cancel and not job.batch:
                job.cancelled_by = who.uid
                self.end_allocation(job, "CANCELLED")
            elif cancel:
                job.kill_reason = "CANCELLED"
                job.cancelled_by = who.uid
                job.state = JobState.COMPLETING
                self._send_control(job, {"op": "cancel"})
                self.notify("ending", job)
            elif batch_only or full:
                self._send_control(job, {"op": "signal", "signal": signum, "batch_only": batch_only})
            self.mark(job)
        self.request_schedule()

    def hold(self, who: Identity, jobs: list[Job], kind: str) -> None:
        for job in jobs:
            self.check_owner(who, job)
            if job.state != JobState.PENDING:
                raise SlurmError("Job is no longer pending execution", ESLURM_JOB_PENDING)
        for job in jobs:
            job.held = "admin" if (kind == "hold" and who.operator) else "user"
            job.priority = 0
            job.reason = Reason.HELD_ADMIN if job.held == "admin" else Reason.HELD_USER
            self.mark(job)

    def release(self, who: Identity, jobs: list[Job]) -> None:
        for job in jobs:
            self.check_owner(who, job)
            if job.held == "admin" and not who.operator:
                raise SlurmError("Access/permission denied", ESLURM_ACCESS_DENIED, 403)
        now = time.time()
        for job in jobs:
            if job.state == JobState.PENDING and job.held:
                job.held = None
                job.reason = Reason.NONE
                job.priority = self._priority(job, now)
                self.mark(job)
        self.request_schedule()

    def requeue(self, who: Identity, jobs: list[Job], hold: bool) -> None:
        for job in jobs:
            self.check_owner(who, job)
            if job.state == JobState.PENDING or (job.state.finished and job.state not in (
                    JobState.COMPLETED, JobState.FAILED, JobState.TIMEOUT, JobState.CANCELLED,
                    JobState.NODE_FAIL, JobState.OUT_OF_MEMORY, JobState.PREEMPTED)):
                raise SlurmError("Job is pending execution" if job.state == JobState.PENDING
                                 else "Requested operation is presently disabled", 0)
        now = time.time()
        for job in jobs:
            if not job.batch:
                raise SlurmError("Job is not a batch job: it cannot be requeued", 0)
        for job in jobs:
            if job.state.active:
                job.kill_reason = "REQUEUE_HOLD" if hold else "REQUEUE"
                job.state = JobState.COMPLETING
                self._send_control(job, {"op": "requeue"})
            elif job.state.finished:
                self._requeue(job, now, hold)
            self.mark(job)
        self.request_schedule()

    def suspend(self, who: Identity, jobs: list[Job], resume: bool) -> None:
        if not who.operator:
            raise SlurmError("Access/permission denied", ESLURM_ACCESS_DENIED, 403)
        now = time.time()
        for job in jobs:
            if resume and job.state == JobState.SUSPENDED:
                job.state = JobState.RUNNING
                job.suspended_secs += now - (job.suspend_time or now)
                job.suspend_time = None
                self._send_control(job, {"op": "resume"})
            elif not resume and job.state == JobState.RUNNING:
                job.state = JobState.SUSPENDED
                job.suspend_time = now
                self._send_control(job, {"op": "suspend"})
            else:
                raise SlurmError("Job state is not suitable for this operation"
                                 if not resume else "Job is not suspended", 0)
            self.mark(job)

    def update_job(self, who: Identity, job: Job, changes: dict[str, Any]) -> None:
        self.check_owner(who, job)
        if job.state.finished:
            raise SlurmError("Job has already finished", ESLURM_ALREADY_DONE)
        pending_only = {"partition", "numnodes", "dependency", "name", "jobname"}
        for key, value in changes.items():
            k = key.lower()
            if k in pending_only and job.state != JobState.PENDING:
                raise SlurmError("Job is no longer pending execution", ESLURM_JOB_PENDING)
            if k == "timelimit":
                try:
                    limit = parse_time_limit(str(value))
                except TimeFormatError:
                    raise SlurmError("Invalid time limit specification", ESLURM_INVALID_TIME_LIMIT) from None
                # users may only shorten their jobs (Slurm's rule); UNLIMITED is the longest
                longer = (limit < 0 and job.time_limit >= 0) or (0 <= job.time_limit < limit)
                if not who.operator and longer:
                    raise SlurmError("Access/permission denied", ESLURM_ACCESS_DENIED, 403)
                job.time_limit = limit
                if job.state.active:
                    self._send_control(job, {"op": "time_limit", "seconds": limit})
            elif k == "partition":
                if value not in self.partitions:
                    raise SlurmError("Invalid partition name specified", ESLURM_INVALID_PARTITION_NAME)
                job.partition = str(value)
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
            elif k in ("name", "jobname"):
                job.name = str(value)
            elif k == "nice":
                try:
                    nice = int(value)
                except ValueError:
                    raise SlurmError("Invalid nice value", 0) from None
                if nice < 0 and not who.operator:
                    raise SlurmError("Access/permission denied", ESLURM_ACCESS_DENIED, 403)
                job.nice = nice
                if not job.held:
                    job.priority = self._priority(job, time.time())
            elif k == "comment":
                job.comment = str(value)
            else:
                raise SlurmError(f"Update of {key} is not supported", 0)
        self.mark(job)
        self.request_schedule()

    def update_nodes(self, who: Identity, names: list[str], state: str, reason: str | None) -> None:
        if not who.operator:
            raise SlurmError("Access/permission denied", ESLURM_ACCESS_DENIED, 403)
        nodes = []
        for name in names:
            n = self.nodes.get(name)
            if n is None:
                raise SlurmError("Invalid node name specified", ESLURM_INVALID_NODE_NAME, 404)
            nodes.append(n)
        st = state.lower()
        if st in ("drain", "down", "fail") and not reason:
            raise SlurmError("You must specify a reason when DOWNING or DRAINING a node. Request denied", 0)
        now = time.time()
        for n in nodes:
            if st in ("drain", "fail"):
                n.admin_state = "drain"
            elif st == "down":
                n.admin_state = "down"
                for job in list(self.running.values()):
                    if n.name in job.nodes and not job.batch:
                        self.end_allocation(job, "NODE_FAIL")
                    elif n.name in job.nodes and job.kill_reason is None:
                        job.kill_reason = "NODE_FAIL"
                        job.state = JobState.COMPLETING
                        self._send_control(job, {"op": "cancel"})
                        self.mark(job)
            elif st in ("resume", "idle", "undrain"):
                n.admin_state = "up"
            else:
                raise SlurmError(f"Invalid node state specified: {state}", 0)
            if n.admin_state == "up":
                n.reason = n.reason_user = None
                n.reason_uid = n.reason_time = None
            else:
                n.reason, n.reason_user, n.reason_uid, n.reason_time = reason, who.user, who.uid, now
            self.mark_node(n)
        self.request_schedule()

    # ---------------------------------------------------------- agents
    def agent_registered(self, node_names: list[str], send: Callable[[dict[str, Any]], None],
                         hw: dict[str, Any], running: list[int]) -> None:
        now = time.time()
        for name in node_names:
            n = self.nodes[name]
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
                if n.admin_state == "down" and self.config.get_int("ReturnToService") >= 1:
                    n.admin_state = "up"  # ReturnToService: down only for silence, it comes back
                if n.admin_state == "up":
                    n.reason = n.reason_user = None
                    n.reason_uid = n.reason_time = None
                self.mark_node(n)
            self.agent_senders[name] = send
        # a job we think runs on these nodes but the agent does not know: it was lost
        alive = set(running)
        for job in list(self.running.values()):
            if job.batch and job.batch_host in node_names and job.job_id not in alive:
                log.warning("job %d unknown to the agent of %s after restart", job.job_id, job.batch_host)
                job.kill_reason = job.kill_reason or "NODE_FAIL"
                self.job_ended(job.job_id, "NODE_FAIL", 0, 0, now)
        # and one the agent still runs that we gave up on (node failed, job requeued elsewhere)
        for jid in alive:
            known = self.jobs.get(jid)
            if known is None or not known.state.active or known.batch_host not in node_names:
                log.warning("agent still runs job %d which ended here; killing it", jid)
                send({"type": "control", "job_id": jid, "control": {"op": "cancel"}})
        self.request_schedule()

    def add_dynamic_node(self, name: str, hw: dict[str, Any]) -> Node:
        """A node that joined (`corral join`) without being in the configuration.

        It gets the hardware its agent detected (memory less 5% for the OS, as `corral up`
        writes it) and joins the default partition. It lives in memory only: after a
        controller restart its agent re-joins when it reconnects.
        """
        if name in self.nodes:
            return self.nodes[name]
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
        part = self.config.default_partition()
        if part is not None:
            part.nodes.append(name)
            node.partitions.append(part.name)
            self._idle_views.pop(part.name, None)
        self.nodes[name] = node
        # jobs recovered after a controller restart may still hold resources here
        for job in self.running.values():
            for a in job.alloc:
                if a.node == name:
                    node.alloc_cpus += a.cpus
                    node.alloc_mem += a.mem_mb
                    node.alloc_gpus.extend(a.gpus)
                    node.job_count += 1
                    if job.exclusive:
                        node.exclusive_job = job.job_id
        return node

    def agent_contact(self, node_names: list[str]) -> None:
        now = time.time()
        for name in node_names:
            self.nodes[name].last_contact = now

    def heartbeat_interval(self) -> float:
        return max(0.5, min(10.0, self.config.get_int("SlurmdTimeout") / 3))

    def check_node_health(self, now: float) -> None:
        """Nodes silent for SlurmdTimeout: NOT_RESPONDING, their jobs NODE_FAIL or requeued."""
        timeout = self.config.get_int("SlurmdTimeout")
        if timeout <= 0:
            return
        for n in self.nodes.values():
            if not n.registered or n.last_contact is None or now - n.last_contact < timeout:
                continue
            if n.name in self.agent_senders and n.responding:
                continue  # connected and heartbeating
            n.responding = False
            victims = [j for j in self.running.values() if n.name in j.nodes]
            for job in victims:
                log.warning("node %s not responding for %ds: job %d fails", n.name, timeout, job.job_id)
                if job.batch:
                    job.kill_reason = "NODE_FAIL"
                    self.job_ended(job.job_id, "NODE_FAIL", 0, 0, now)
                else:
                    self.end_allocation(job, "NODE_FAIL")
            if self.config.get_int("ReturnToService") == 0 and n.admin_state == "up":
                n.admin_state = "down"
                n.reason, n.reason_user, n.reason_uid, n.reason_time = NOT_RESPONDING_REASON, "root", 0, now
                self.mark_node(n)

    def agent_lost(self, node_names: list[str], send: Callable[[dict[str, Any]], None]) -> None:
        for name in node_names:
            if self.agent_senders.get(name) is send:
                del self.agent_senders[name]
                self.nodes[name].responding = False

    def expire_finished(self, now: float) -> None:
        """Forget finished jobs older than MinJobAge (they stay in the store for sacct)."""
        cutoff = now - self.min_job_age
        old = [jid for jid, j in self.jobs.items()
               if j.state.finished and (j.end_time or 0) < cutoff]
        for jid in old:
            del self.jobs[jid]


@functools.lru_cache(maxsize=4096)
def _group_name(gid: int) -> str:
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def parse_signal_spec(spec: str | None) -> dict[str, Any] | None:
    """"[B:|R:]SIG[@secs]" → {"num", "secs", "batch_only"}."""
    if not spec:
        return None
    import signal as _signal

    text = spec
    batch_only = False
    if text[:2].upper() in ("B:", "R:"):
        batch_only = text[0].upper() == "B"
        text = text[2:]
    name, _, secs = text.partition("@")
    if name.isdigit():
        num = int(name)
    else:
        nm = name.upper()
        if not nm.startswith("SIG"):
            nm = "SIG" + nm
        num = int(getattr(_signal, nm, 0)) or int(_signal.SIGUSR1)
    return {"num": num, "secs": int(secs) if secs.isdigit() else 60, "batch_only": batch_only}
