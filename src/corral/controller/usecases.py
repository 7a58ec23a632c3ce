"""The use cases users and admins drive, each with its authorization: submit, signal and
cancel, hold and release, requeue, suspend, update a job, and node administration.

A refused request raises `SlurmError` with Slurm's errno and message and changes nothing."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from corral.controller.base import Identity, group_name
from corral.controller.cluster import NodeEventKind
from corral.controller.errors import (
    ESLURM_ACCESS_DENIED,
    ESLURM_ALREADY_DONE,
    ESLURM_DEPENDENCY,
    ESLURM_INVALID_ARRAY,
    ESLURM_INVALID_NODE_NAME,
    ESLURM_INVALID_PARTITION_NAME,
    ESLURM_INVALID_TIME_LIMIT,
    ESLURM_JOB_PENDING,
    ESLURM_PARTITION_NOT_AVAIL,
    ESLURM_PATHNAME_TOO_LONG,
    ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE,
    SlurmError,
    access_denied,
)
from corral.controller.scheduling import Scheduling
from corral.model.arrays import ArraySpecError, parse_array_spec
from corral.model.job import Job, JobState, Reason
from corral.model.jobspec import JobSpecError, script_too_large, validate_spec
from corral.model.node import Node, Partition
from corral.sched import deps as sched_deps
from corral.sched.eligibility import view_of
from corral.sched.select import fits_ever
from corral.sched.snapshot import NodeView
from corral.store.base import JobPayload

log = logging.getLogger("corral.controller")

NOT_AVAILABLE = "Required partition not available (inactive or drain)"


def _idle_view(n: Node) -> NodeView:
    return NodeView(n.name, n.cpus, n.real_memory, n.gpus, n.cpus, n.real_memory,
                    list(range(n.gpus)), True, n.weight, tuple(n.partitions),
                    tuple(n.features), 0, False)


class UseCases(Scheduling):
    _idle_views: dict[str, list[NodeView]]

    # -------------------------------------------------------------- submit
    def _validate_spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        try:
            return validate_spec(spec)
        except JobSpecError as e:
            raise SlurmError(str(e), ESLURM_PATHNAME_TOO_LONG if e.too_long else 0) from None

    def _submit_partition(self, pname: str | None) -> Partition:
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
        # DRAIN and INACTIVE take no new jobs (DOWN queues them), slurm.conf(5) State=
        if part.state in ("DRAIN", "INACTIVE"):
            raise SlurmError(NOT_AVAILABLE, ESLURM_PARTITION_NOT_AVAIL)
        return part

    async def submit(self, who: Identity, spec_in: dict[str, Any], script: str,
                     env: dict[str, str], argv: list[str], array: str | None,
                     open_mode: str = "truncate") -> Job:
        if not isinstance(spec_in, dict):
            raise SlurmError("Invalid job description", 0)
        if not isinstance(script, str) or (not script and spec_in.get("batch", True)):
            raise SlurmError("Batch script is empty!", 0)
        if script_too_large(script, self.max_script_size):
            # slurmctld's limit (SchedulerParameters=max_script_size=, 4 MB by default)
            raise SlurmError("Pathname of a file, directory or other parameter too long",
                             ESLURM_PATHNAME_TOO_LONG)
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in env.items()):
            raise SlurmError("Invalid job environment", 0)
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise SlurmError("Invalid script arguments", 0)
        spec = self._validate_spec(spec_in)
        now = self.clock()
        part = self._submit_partition(spec.pop("partition", None))
        if spec.get("held") == "admin" and not who.operator:
            spec["held"] = "user"
        if spec.get("nice", 0) < 0 and not who.operator:
            raise access_denied()
        job = Job(job_id=0, name=spec.pop("name", "sbatch"), user=who.user, uid=who.uid,
                  gid=who.gid, **spec)
        job.partition = part.name
        job.group = group_name(who.gid)
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
        unknown = self.unknown_dependencies([job])
        if unknown:  # named jobs gone from memory: their final state, read once, off the loop
            found = await asyncio.get_running_loop().run_in_executor(
                None, lambda: self.store.query_jobs(ids=sorted(unknown), array_ids=sorted(unknown)))
            self.gone_records(unknown, found)
        job.job_id = self._new_job_id()
        if job.array_tasks is not None:
            job.array_job_id = job.job_id
        job.priority = self.priority_now(job)
        if job.held:
            job.reason = Reason.HELD_ADMIN if job.held == "admin" else Reason.HELD_USER
        self.writer.payload(job.job_id, JobPayload(script, env, argv, open_mode))
        self.mark(job)
        await self.durable()
        # visible only once durable: a job the client was never told about must not run
        self.set_state(job, JobState.PENDING, now)
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
            views = self._idle_views[part.name] = [_idle_view(n) for n in nodes]
        pv = view_of(job)
        pv.partition = part.name
        if not fits_ever(pv, views, self.def_mem_per_cpu):
            raise SlurmError("Requested node configuration is not available",
                             ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE)

    # ------------------------------------------------------------- actions
    def signal_jobs(self, who: Identity, jobs: list[Job], signum: int, *, batch_only: bool,
                    cancel: bool, full: bool = False) -> None:
        """scancel: cancel, or deliver a signal (to the batch shell with -b, to every
        process of the batch step with -f; the job's srun steps are signalled by the caller
        through the step manager unless -b)."""
        now = self.clock()
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
                if job.state != JobState.COMPLETING:
                    self.set_state(job, JobState.COMPLETING, now)
                self._send_control(job, {"op": "cancel"})
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
                raise access_denied()
        for job in jobs:
            if job.state == JobState.PENDING and job.held:
                job.held = None
                job.reason = Reason.NONE
                job.priority = self.priority_now(job)
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
        now = self.clock()
        for job in jobs:
            if not job.batch:
                raise SlurmError("Job is not a batch job: it cannot be requeued", 0)
        for job in jobs:
            if job.state.active:
                job.kill_reason = "REQUEUE_HOLD" if hold else "REQUEUE"
                if job.state != JobState.COMPLETING:
                    self.set_state(job, JobState.COMPLETING, now)
                self._send_control(job, {"op": "requeue"})
            elif job.state.finished:
                self.requeue_job(job, now, hold)
            self.mark(job)
        self.request_schedule()

    def suspend(self, who: Identity, jobs: list[Job], resume: bool) -> None:
        if not who.operator:
            raise access_denied()
        now = self.clock()
        for job in jobs:
            if resume and job.state == JobState.SUSPENDED:
                job.suspended_secs += now - (job.suspend_time or now)
                job.suspend_time = None
                self.set_state(job, JobState.RUNNING, now)
                self._send_control(job, {"op": "resume"})
            elif not resume and job.state == JobState.RUNNING:
                job.suspend_time = now
                self.set_state(job, JobState.SUSPENDED, now)
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
                    self._send_control(job, {"op": "time_limit", "seconds": limit})
            elif k == "partition":
                part = self.partitions.get(str(value))
                if part is None:
                    raise SlurmError("Invalid partition name specified", ESLURM_INVALID_PARTITION_NAME)
                if part.state in ("DRAIN", "INACTIVE"):
                    raise SlurmError(NOT_AVAILABLE, ESLURM_PARTITION_NOT_AVAIL)
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
                # a rare admin action: the store is read here, never in a pass
                self.remember_gone(self.unknown_dependencies([job]))
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
                    job.priority = self.priority_now(job)
            elif k == "comment":
                job.comment = str(value)
            else:
                raise SlurmError(f"Update of {key} is not supported", 0)
        self.mark(job)
        self.request_schedule()

    # --------------------------------------------------------- node admin
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
        if st not in ("drain", "fail", "down", "resume", "idle", "undrain"):
            raise SlurmError(f"Invalid node state specified: {state}", 0)
        now = self.clock()
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
                        if job.state != JobState.COMPLETING:
                            self.set_state(job, JobState.COMPLETING, now)
                        self._send_control(job, {"op": "cancel"})
                        self.mark(job)
            else:
                n.admin_state = "up"
            if n.admin_state == "up":
                n.reason = n.reason_user = None
                n.reason_uid = n.reason_time = None
            else:
                n.reason, n.reason_user, n.reason_uid, n.reason_time = reason, who.user, who.uid, now
            self.node_event(n, {"drain": NodeEventKind.DRAINED, "down": NodeEventKind.DOWN}
                            .get(n.admin_state, NodeEventKind.RESUMED))
            self.mark_node(n)
        self.request_schedule()
