"""Job steps (srun) and interactive allocations (salloc, srun outside a job).

The client keeps a WebSocket open (`/v1/steps/ws`, protocol in docs/STEPS.md); the
controller lays the step out inside the job's allocation, asks the agents of the step's
nodes to start the tasks, and relays output, input, signals and exits.

Every message is parsed into model.messages' typed classes: a malformed one from a client
is answered with an error to that client alone; one from an agent is logged and dropped.
Output a client does not read stays bounded: past OUTPUT_HIGH queued bytes the step's agents
are asked to stop reading its tasks' pipes (`task_flow`), so the tasks block on write, and
to resume below OUTPUT_LOW; past OUTPUT_HARD (an agent that ignores the request) output is
dropped rather than held.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import pwd
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import ClientConnectionResetError, WSMsgType, web

from corral.controller.state import Controller, Identity, SlurmError, parse_signal_spec
from corral.model import hostlists
from corral.model import messages as m
from corral.model.job import Job, JobState, NodeAlloc, Step
from corral.model.jobenv import (
    GPU_VARIABLES,
    GpuBindError,
    allocation_environment,
    bind_task_gpus,
    gpu_bind_line,
    multi_prog_argv,
    parse_gpu_bind,
    step_environment,
)
from corral.model.patterns import expand_pattern
from corral.model.pmi import FenceError, FenceGather

log = logging.getLogger("corral.controller")

OUTPUT_HIGH = 1 << 20  # queued output bytes of one client: ask its step's agents to pause
OUTPUT_LOW = 256 << 10  # ... and to resume once the queue is this small again
OUTPUT_HARD = 16 << 20  # beyond this (an agent that does not pause), output is dropped
# Each agent stops reading a step's output after this many bytes not yet credited
# (agent/tasks.py OUTPUT_WINDOW); the client's session credits every half window it passes on.
OUTPUT_WINDOW = 4 << 20
OUTPUT_CREDIT = OUTPUT_WINDOW // 2
NO_ALLOC_JOB_ID = 4294967294  # srun -Z steps: no job (Slurm's NO_VAL job id)


class Session:
    """One client's WebSocket: what it created and what waits to be written to it."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[m.Message | None] = asyncio.Queue()
        self.alloc: int | None = None
        self.detached = False
        self.released = False
        self.step: LiveStep | None = None
        self.queued = 0  # bytes of output in the queue
        self.paused = False  # the step's agents were asked to stop reading its output
        self.dropped = 0
        self.delivered = 0  # output bytes passed on since the agents' last credit
        self.flow: Any = None  # Callable[[LiveStep, bool], None]: pause/resume the agents

    def send(self, msg: m.Message) -> None:
        if isinstance(msg, m.Output):
            size = len(msg.data)
            hard = OUTPUT_HARD
            if self.step is not None:  # every agent of the step may have a window in transit
                hard += 2 * OUTPUT_WINDOW * len(self.step.nodes)
            if self.queued + size > hard:
                if not self.dropped:
                    log.warning("step output for a client that does not read it passed %d "
                                "bytes: dropping output", OUTPUT_HARD)
                self.dropped += size
                return
            self.queued += size
            if self.queued > OUTPUT_HIGH and not self.paused and self.step is not None:
                self.paused = True
                self.flow(self.step, True)
        self.queue.put_nowait(msg)

    def sent(self, msg: m.Message) -> None:
        """`msg` left the queue (written to the client)."""
        if isinstance(msg, m.Output):
            self.queued -= len(msg.data)
            self.delivered += len(msg.data)
            if self.paused and self.queued < OUTPUT_LOW and self.step is not None:
                self.paused = False
                self.delivered = 0
                self.flow(self.step, False)
            elif not self.paused and self.delivered >= OUTPUT_CREDIT and self.step is not None:
                self.delivered = 0
                self.flow(self.step, False)  # a credit: the agents may send another window


Send = Any  # Callable[[m.Message], None]


@dataclass
class LiveStep:
    job_id: int
    step_id: int
    send: Send  # to the client
    nodes: list[str]
    tasks_per_node: list[int]
    cpus: dict[str, int]  # CPUs it holds per node (0 when --overlap)
    gpus: dict[str, list[int]]
    record: Step
    stdin: str = "0"
    mem: dict[str, int] = field(default_factory=dict)  # MB of the job's memory it holds per node
    # the job's GPUs it holds per node (none with --overlap: it uses GPUs others may hold)
    gpus_held: dict[str, list[int]] = field(default_factory=dict)
    exits: dict[int, tuple[int, int]] = field(default_factory=dict)
    cancelled: bool = False
    pmi: FenceGather | None = None  # --mpi=pmi2 across agents: the fence under way

    @property
    def ntasks(self) -> int:
        return sum(self.tasks_per_node)

    def task_node(self, task_id: int) -> str:
        n = task_id
        for node, count in zip(self.nodes, self.tasks_per_node, strict=True):
            if n < count:
                return node
            n -= count
        return self.nodes[-1]


class StepManager:
    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.live: dict[tuple[int, int], LiveStep] = {}
        self.alloc_waiters: dict[int, asyncio.Future[str]] = {}
        self.alloc_sessions: dict[int, Send] = {}  # allocation job id -> its client
        self.step_freed: dict[int, asyncio.Event] = {}
        self.no_alloc_steps = 0  # srun -Z steps started (their step ids)
        ctl.listeners.append(self._on_job_event)
        ctl.step_table = self  # the lifecycle asks which steps of an ending job still run

    # ---- the lifecycle's questions (lifecycle.StepTable) ---------------------------
    def _lingering_nodes(self, step: LiveStep) -> list[str]:
        """Nodes where tasks of `step` have not reported their end and could still: the
        node's agent is connected and the node responds."""
        out: list[str] = []
        for task_id in range(step.ntasks):
            if task_id in step.exits:
                continue
            node = step.task_node(task_id)
            n = self.ctl.nodes.get(node)
            if node not in out and node in self.ctl.agent_senders and n is not None \
                    and n.responding:
                out.append(node)
        return out

    def lingering_steps(self, job_id: int) -> list[str]:
        return [f"{jid}.{sid}" for (jid, sid), st in sorted(self.live.items())
                if jid == job_id and self._lingering_nodes(st)]

    def forget_steps(self, job_id: int) -> list[str]:
        nodes: list[str] = []
        for key, st in sorted(self.live.items()):
            if key[0] != job_id:
                continue
            nodes.extend(self._lingering_nodes(st))
            st.cancelled = True
            for task_id in range(st.ntasks):  # never reported: as if killed
                st.exits.setdefault(task_id, (0, 9))
            self._maybe_finish(st)
        return nodes

    def _to_agents(self, step: LiveStep, msg: m.Message) -> None:
        for s in self._agents_of(step):
            s(msg.to_dict())

    # ---- job events --------------------------------------------------------
    def signal_job_steps(self, job_id: int, signum: int) -> None:
        for (jid, _), step in list(self.live.items()):
            if jid == job_id:
                self._to_agents(step, m.SignalTasks(job_id=jid, step_id=step.step_id,
                                                    signal=signum))

    def _arm_step_signal(self, job: Job) -> None:
        """--signal=SIG@secs without B: goes to the job's steps before the time limit."""
        spec = parse_signal_spec(job.signal)
        if spec is None or spec["batch_only"] or job.time_limit <= 0 or job.start_time is None:
            return
        delay = job.start_time + job.time_limit - spec["secs"] - time.time()
        asyncio.get_running_loop().call_later(max(0.0, delay), self.signal_job_steps,
                                              job.job_id, int(spec["num"]))

    def _on_job_event(self, event: str, job: Job) -> None:
        if event == "started" and job.signal:
            self._arm_step_signal(job)
        fut = self.alloc_waiters.get(job.job_id)
        if fut is not None and not fut.done() and event in ("started", "ended"):
            fut.set_result(event)
        if event == "notified" and job.notices:
            # Slurm's srun_user_message: to the client that holds the allocation (salloc,
            # or an srun that made its own); a batch job's goes to its batch step
            send = self.alloc_sessions.get(job.job_id)
            if send is not None:
                send(m.UserMessage(message=job.notices[-1]))
        if event in ("ended", "ending"):
            for key, step in list(self.live.items()):
                if key[0] == job.job_id:
                    self._abort_step(step)
            send = self.alloc_sessions.get(job.job_id)
            if send is not None and event == "ended":
                send(m.AllocationEnded(state=job.state.value))

    # ---- the client's WebSocket ----------------------------------------------
    async def handle(self, request: web.Request, who: Identity) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(heartbeat=30, max_msg_size=8 * 1024 * 1024)
        await ws.prepare(request)
        session = Session()
        session.flow = self._flow
        send = session.send

        async def writer() -> None:
            while True:
                msg = await session.queue.get()
                if msg is None:
                    return
                try:
                    await ws.send_str(m.encode(msg))
                except (ConnectionError, ClientConnectionResetError):
                    return  # the client went away; the session's cleanup follows
                finally:
                    session.sent(msg)

        writer_task = asyncio.get_running_loop().create_task(writer())
        runner: asyncio.Task[None] | None = None
        try:
            async for raw in ws:
                if raw.type != WSMsgType.TEXT:
                    if raw.type == WSMsgType.ERROR:
                        break
                    continue
                try:
                    msg = m.decode(raw.data, m.TO_CONTROLLER_FROM_CLIENT)
                except m.MessageError as e:
                    # refused alone: this client hears why; nothing else is touched
                    log.warning("uid %d: refused %s", who.uid, e)
                    send(m.Error(message=f"malformed message: {e}"))
                    continue
                if isinstance(msg, m.StepStart):
                    if runner is None:
                        runner = asyncio.get_running_loop().create_task(
                            self._start(msg, who, send, session))
                elif isinstance(msg, m.Release):
                    session.released = True
                    self._release(session, msg.exit_code)
                elif isinstance(msg, m.Detach):
                    session.detached = True
                else:
                    self._client_message(session, msg)
        finally:
            if runner is not None and not runner.done():
                runner.cancel()
            step = session.step
            if step is not None and (step.job_id, step.step_id) in self.live:
                self._kill_step(step)  # srun went away: its tasks go too
            if session.alloc is not None and not session.detached and not session.released:
                job = self.ctl.jobs.get(session.alloc)
                if job is not None and job.state == JobState.PENDING:
                    self.ctl.finish_pending(job, JobState.CANCELLED, time.time(), by=who.uid)
                elif job is not None and job.state.active:
                    self.ctl.end_allocation(job, "CANCELLED")
            if session.alloc is not None:
                self.alloc_sessions.pop(session.alloc, None)
            session.queue.put_nowait(None)
            await writer_task
        return ws

    def _flow(self, step: LiveStep, pause: bool) -> None:
        if (step.job_id, step.step_id) in self.live:
            self._to_agents(step, m.TaskFlow(job_id=step.job_id, step_id=step.step_id,
                                             pause=pause))

    def _release(self, session: Session, exit_code: int) -> None:
        jid = session.alloc
        job = self.ctl.jobs.get(jid) if jid is not None else None
        if job is not None and job.state.active:
            self.ctl.end_allocation(job, "COMPLETED" if exit_code == 0 else "FAILED", exit_code)

    async def _start(self, msg: m.StepStart, who: Identity, send: Send, session: Session) -> None:
        try:
            if msg.step is not None and msg.step.no_allocate:
                self._run_without_allocation(msg.step, who, send, session)
                return
            if msg.job_id is None:
                job = await self._allocate(msg.alloc or {}, msg.alloc_env or {}, who, send,
                                           session)
                if job is None:
                    return
            else:
                job = self._job_for_step(msg.job_id, who)
            if msg.step is not None:
                try:
                    await self._run_step(job, msg.step, who, send, session)
                except SlurmError as e:
                    raise SlurmError(f"Unable to create step for job {job.job_id}: {e.message}") from None
        except SlurmError as e:
            send(m.Error(message=e.message))
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("step start failed")
            send(m.Error(message=f"internal error: {e}"))

    def _job_for_step(self, job_id: int, who: Identity) -> Job:
        job = self.ctl.jobs.get(job_id)
        if job is None:
            raise SlurmError(f"Unable to confirm allocation for job {job_id}: Invalid job id specified")
        self.ctl.check_owner(who, job)
        # slurmctld's job_alloc_info_ptr: ESLURM_JOB_PENDING, then ESLURM_ALREADY_DONE
        # (which srun words as an expired job)
        if job.state == JobState.PENDING:
            raise SlurmError(f"Unable to confirm allocation for job {job_id}: "
                             "Job is pending execution")
        if job.state.finished:
            raise SlurmError(f"Slurm job {job_id} has expired")
        if job.state != JobState.RUNNING:
            raise SlurmError(f"Unable to confirm allocation for job {job_id}: "
                             "Job/step already completing or completed")
        return job

    async def _allocate(self, spec: dict[str, Any], env: dict[str, str], who: Identity, send: Send,
                        session: Session) -> Job | None:
        spec = dict(spec)
        spec["batch"] = False
        part = self.ctl.partitions.get(str(spec.get("partition") or "")) \
            or self.ctl.config.default_partition()
        num_nodes = spec.get("num_nodes")
        if num_nodes is not None and type(num_nodes) is not int:
            raise SlurmError("Unable to allocate resources: Invalid node count specified")
        if part is not None and (num_nodes or 1) > len(part.nodes):
            # an interactive request that can never be met fails now rather than wait forever
            raise SlurmError("Unable to allocate resources: Requested partition configuration not available now")
        try:
            job = await self.ctl.submit(who, spec, "", env, [], None)
        except SlurmError as e:
            # the controller's own line first (`invalid partition specified: X`), as Slurm's
            # RESPONSE_SLURM_RC_MSG; the client prints each line as an error
            first = f"{e.user_msg}\n" if e.user_msg else ""
            raise SlurmError(f"{first}Unable to allocate resources: {e.message}") from None
        session.alloc = job.job_id
        self.alloc_sessions[job.job_id] = send
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.alloc_waiters[job.job_id] = fut
        try:
            if not job.state.active:
                try:
                    await asyncio.wait_for(asyncio.shield(fut), 0.3)
                except TimeoutError:
                    send(m.Pending(job_id=job.job_id, reason=job.reason))
                    await fut
        finally:
            self.alloc_waiters.pop(job.job_id, None)
        if job.state != JobState.RUNNING:
            send(m.Error(message=f"Job allocation {job.job_id} has been revoked"))
            return None
        env_out = allocation_environment(job, cluster_name=self.ctl.cluster_name,
                                         submit_host=job.submit_host or os.uname().nodename)
        send(m.Allocated(job_id=job.job_id, nodes=hostlists.compress(job.nodes), env=env_out))
        return job

    # ---- steps ---------------------------------------------------------------
    def _layout(self, job: Job, req: m.StepSpec,
                mem: dict[str, int] | None = None,
                ) -> tuple[list[str], list[int], dict[str, int], dict[str, list[int]]]:
        """Nodes, tasks per node, CPUs and GPUs per node for a step; SlurmError if impossible,
        None-like busy signalled by raising _Busy."""
        alloc = {a.node: a for a in job.alloc}
        nodes = list(job.nodes)
        if req.exclude:
            nodes = [n for n in nodes if n not in set(req.exclude)]
        if req.nodelist:
            wanted = list(req.nodelist)
            if not set(wanted) <= set(job.nodes):
                raise SlurmError("Requested node configuration is not available")
            nodes = [n for n in job.nodes if n in set(wanted)]
        ntasks = req.ntasks
        nnodes = req.nodes
        per_node = req.ntasks_per_node
        cpt = req.cpus_per_task
        if nnodes is None and ntasks is None and per_node is None:
            nnodes = len(nodes)
            per_node = job.ntasks_per_node
            ntasks = job.num_tasks if not per_node else None
        if nnodes is None:
            if per_node and ntasks:
                nnodes = -(-int(ntasks) // int(per_node))
            else:
                nnodes = min(len(nodes), int(ntasks)) if ntasks else len(nodes)
        nnodes = int(nnodes)
        if nnodes < 1 or nnodes > len(nodes):
            raise SlurmError("Requested node configuration is not available")
        if per_node:
            counts = [int(per_node)] * nnodes
            if ntasks:
                total = int(ntasks)
                counts = []
                left = total
                for _ in range(nnodes):
                    take = min(int(per_node), left)
                    counts.append(take)
                    left -= take
                if left > 0 or 0 in counts:
                    raise SlurmError("Requested node configuration is not available")
        else:
            total = int(ntasks) if ntasks else nnodes
            if total < nnodes:
                raise SlurmError("Requested node configuration is not available")
            base, extra = divmod(total, nnodes)
            counts = [base + (1 if i < extra else 0) for i in range(nnodes)]
        used = self._cpus_in_use(job.job_id)
        mem_used = self._mem_in_use(job.job_id)
        gpus_used = self._gpus_in_use(job.job_id)
        # memory is a step resource when the job has some (Slurm's CR_*_Memory): --overlap
        # steps hold none; --mem=0 none (bounded by the job's); otherwise --mem per node,
        # --mem-per-cpu times the step's CPUs there, or by default all of the job's memory
        has_mem = job.mem_per_node is not None or job.mem_per_cpu is not None

        def need_of(count: int) -> int:
            # -O/--overcommit: the step's CPUs are one task's per node, not one per task
            return cpt if req.overcommit else count * cpt

        def free(node: str) -> int:
            return alloc[node].cpus - used.get(node, 0)

        def mem_of(node: str, count: int) -> int:
            if not has_mem or req.overlap:
                return 0
            if req.mem_per_node is not None:
                return req.mem_per_node
            if req.mem_per_cpu is not None:
                return req.mem_per_cpu * need_of(count)
            return alloc[node].mem_mb

        job_asked_gpus = bool(job.gpus or job.gpus_per_node or job.gpus_per_task)

        def gpus_wanted(node: str, count: int) -> int:
            # Slurm 22.05 (step_mgr.c _copy_job_tres_to_step): a step without a GPU request
            # asks for the job's GPUs, i.e. all of them on the node, but not those an
            # --exclusive job holds without having asked for any (srun(1) --gres)
            gpt, gpn = req.gpus_per_task, req.gpus_per_node
            if gpn == 0 or req.gpus is not None:
                return 0  # (a --gpus total is shared out over the step's nodes below)
            if gpt:
                return int(gpt) * count
            if gpn:
                return int(gpn)
            return len(alloc[node].gpus) if job_asked_gpus else 0

        def free_gpus(node: str) -> list[int]:
            held = gpus_used.get(node, set())
            return [g for g in alloc[node].gpus if g not in held]

        def fits(node: str, count: int) -> bool:
            return req.overlap or (need_of(count) <= free(node) and mem_of(node, count)
                                   <= alloc[node].mem_mb - mem_used.get(node, 0)
                                   and gpus_wanted(node, count) <= len(free_gpus(node)))

        if not req.nodelist and nnodes < len(nodes):
            # Slurm's step layout: the first nodes of the allocation where the step's CPUs
            # and memory are free now (steps running elsewhere do not hold it back)
            fits_now = [n for n in nodes if fits(n, counts[0])]
            if len(fits_now) >= nnodes:
                nodes = fits_now[:nnodes]
            else:
                # not enough free now: wait for the nodes that could hold it at all
                nodes = ([n for n in nodes if need_of(counts[0]) <= alloc[n].cpus
                          and gpus_wanted(n, counts[0]) <= len(alloc[n].gpus)]
                         or nodes)[:nnodes]
                if len(nodes) < nnodes:
                    raise SlurmError("More processors requested than permitted")
        else:
            nodes = nodes[:nnodes]
        cpus: dict[str, int] = {}
        gpus: dict[str, list[int]] = {}
        busy = False
        for node, count in zip(nodes, counts, strict=True):
            a = alloc[node]
            need = need_of(count)
            if need > a.cpus:
                raise SlurmError("More processors requested than permitted")
            if mem_of(node, count) > a.mem_mb:
                raise SlurmError("Memory required by task is not available")
            if not req.overlap:
                if not fits(node, count):
                    busy = True
                cpus[node] = need
                if mem is not None and has_mem:
                    mem[node] = mem_of(node, count)
            want = gpus_wanted(node, count)
            if want > len(a.gpus):
                raise SlurmError("Requested node configuration is not available")
            if req.overlap:
                gpus[node] = a.gpus[:want]  # the first of the job's, held or not (Slurm's)
            else:
                # the job's GPUs no other step holds (gres_ctld.c _set_step_gres_bit_alloc)
                avail = free_gpus(node)
                if want > len(avail):
                    busy = True
                gpus[node] = avail[:want]
        if req.gpus and req.gpus_per_node != 0:
            # --gpus total: the job's GPUs node by node, as many as each node has
            if req.gpus > sum(len(alloc[n].gpus) for n in nodes):
                raise SlurmError("Requested node configuration is not available")
            left = req.gpus
            for node in nodes:
                pool = alloc[node].gpus if req.overlap else free_gpus(node)
                gpus[node] = list(pool[:left])
                left -= len(gpus[node])
            if left > 0:
                busy = True
        if busy:
            raise _Busy()
        return nodes, counts, cpus, gpus

    def _mem_in_use(self, job_id: int) -> dict[str, int]:
        used: dict[str, int] = {}
        for (jid, _), st in self.live.items():
            if jid == job_id:
                for node, n in st.mem.items():
                    used[node] = used.get(node, 0) + n
        return used

    def _gpus_in_use(self, job_id: int) -> dict[str, set[int]]:
        used: dict[str, set[int]] = {}
        for (jid, _), st in self.live.items():
            if jid == job_id:
                for node, ids in st.gpus_held.items():
                    used.setdefault(node, set()).update(ids)
        return used

    def _cpus_in_use(self, job_id: int) -> dict[str, int]:
        used: dict[str, int] = {}
        for (jid, _), st in self.live.items():
            if jid == job_id:
                for node, n in st.cpus.items():
                    used[node] = used.get(node, 0) + n
        return used

    async def _run_step(self, job: Job, req: m.StepSpec, who: Identity, send: Send,
                        session: Session) -> None:
        if not req.argv:
            raise SlurmError("No command given")
        _gpu_binding(req)  # an invalid --gpu-bind is refused before anything starts
        said_waiting = False
        while True:
            if job.state != JobState.RUNNING:
                raise SlurmError(f"Job {job.job_id} is no longer running")
            mem: dict[str, int] = {}
            try:
                nodes, counts, cpus, gpus = self._layout(job, req, mem)
                break
            except _Busy:
                if not said_waiting:
                    send(m.Waiting(message="Job step creation temporarily disabled, retrying "
                                           "(Requested nodes are busy)"))
                    said_waiting = True
                ev = self.step_freed.setdefault(job.job_id, asyncio.Event())
                try:
                    await asyncio.wait_for(ev.wait(), 1.0)
                except TimeoutError:
                    pass
                ev.clear()
        step_id = self._next_step_id(job)
        name = req.name or os.path.basename(req.argv[0])
        now = time.time()
        record = Step(str(step_id), name, JobState.RUNNING.value, start_time=now,
                      cpus=sum(a.cpus for a in job.alloc if a.node in nodes) if not cpus else sum(cpus.values()),
                      nodes=hostlists.compress(nodes), ntasks=sum(counts),
                      submit_line=req.submit_line)
        job.steps.append(record)
        self.ctl.mark(job)
        step = LiveStep(job.job_id, step_id, send, nodes, counts, cpus, gpus, record,
                        stdin=req.stdin, mem=mem,
                        gpus_held={} if req.overlap else {n: list(g) for n, g in gpus.items()})
        self.live[(job.job_id, step_id)] = step
        session.step = step
        send(m.StepStarted(job_id=job.job_id, step_id=step_id, nodes=nodes,
                           tasks_per_node=counts, ntasks=sum(counts)))
        self._launch(job, step, req)

    def _run_without_allocation(self, req: m.StepSpec, who: Identity, send: Send,
                                session: Session) -> None:
        """srun -Z/--no-allocate: an operator runs tasks on the named nodes with no job and
        no resources taken from anyone (Slurm's srun -Z; slurmd accepts the launch only from
        root or SlurmUser, and refuses others' credentials)."""
        step_id = self.no_alloc_steps
        nodes = list(dict.fromkeys(req.nodelist))
        if not who.operator:
            node = nodes[0] if nodes else "?"
            raise SlurmError(f"Task launch for StepId={NO_ALLOC_JOB_ID}.{step_id} failed on "
                             f"node {node}: Invalid job credential")
        unknown = [n for n in nodes if n not in self.ctl.nodes]
        if not nodes or unknown:
            raise SlurmError("Unable to create step: Invalid node name specified")
        if not req.argv:
            raise SlurmError("No command given")
        self.no_alloc_steps += 1
        now = time.time()
        job = Job(job_id=NO_ALLOC_JOB_ID, name=req.name or os.path.basename(req.argv[0]),
                  user=who.user, uid=who.uid, gid=who.gid, state=JobState.RUNNING,
                  num_nodes=len(nodes), num_tasks=req.ntasks or len(nodes), batch=False,
                  work_dir=req.cwd or "/", start_time=now, nodes=nodes,
                  alloc=[NodeAlloc(n, self.ctl.nodes[n].cpus, 0, []) for n in nodes],
                  submit_host=os.uname().nodename)
        # nothing is held: the step overlaps whatever runs there, and has no GPUs
        layout_req = m.StepSpec.from_dict({**req.to_dict(), "overlap": True,
                                           "gpus_per_node": 0, "gpus": None})
        nodes, counts, cpus, gpus = self._layout(job, layout_req)
        record = Step(str(step_id), job.name, JobState.RUNNING.value, start_time=now,
                      cpus=sum(a.cpus for a in job.alloc if a.node in nodes),
                      nodes=hostlists.compress(nodes), ntasks=sum(counts))
        step = LiveStep(job.job_id, step_id, send, nodes, counts, cpus, gpus, record,
                        stdin=req.stdin)
        self.live[(job.job_id, step_id)] = step
        session.step = step
        send(m.StepStarted(job_id=job.job_id, step_id=step_id, nodes=nodes,
                           tasks_per_node=counts, ntasks=sum(counts)))
        self._launch(job, step, layout_req)

    @staticmethod
    def _next_step_id(job: Job) -> int:
        ids = [int(s.step_id) for s in job.steps if s.step_id.isdigit()]
        return max(ids) + 1 if ids else 0

    def _launch(self, job: Job, step: LiveStep, req: m.StepSpec) -> None:
        ctl = self.ctl
        try:
            home = pwd.getpwuid(job.uid).pw_dir
        except KeyError:
            home = "/"
        cwd = req.cwd or job.work_dir
        alloc = {a.node: a for a in job.alloc}
        verbose, bind_kind, bind_numbers = _gpu_binding(req)
        gpt = req.gpus_per_task
        by_sender: dict[int, tuple[Any, list[m.TaskSpec]]] = {}
        task_id = 0
        submit_host = job.submit_host or os.uname().nodename
        for idx, (node, count) in enumerate(zip(step.nodes, step.tasks_per_node, strict=True)):
            sender = ctl.agent_senders.get(node)
            node_gpus = step.gpus.get(node)
            for local in range(count):
                task_gpus = bind_task_gpus(bind_kind, bind_numbers, local, node_gpus) \
                    if node_gpus else None
                env = dict(req.env)
                if node_gpus is not None and not node_gpus:
                    for key in GPU_VARIABLES:  # inherited from srun's caller; a step without
                        env.pop(key, None)     # GPUs has none (as slurmd unsets them)
                env.update(step_environment(
                    job, cluster_name=ctl.cluster_name, submit_host=submit_host, step_id=step.step_id,
                    step_nodes=step.nodes, tasks_per_node=step.tasks_per_node, node_index=idx,
                    task_id=task_id, local_id=local, gpus=node_gpus,
                    cpus_on_node=alloc[node].cpus, ntasks=step.ntasks, task_gpus=task_gpus,
                    gpus_per_task=gpt or None))
                env.setdefault("SLURM_CONF", ctl.config_path)
                if "SLURM_CPUS_PER_TASK" in req.env or req.cpus_per_task > 1:
                    env["SLURM_CPUS_PER_TASK"] = str(req.cpus_per_task)  # srun's -c wins

                def path(p: str | None, tid: int = task_id, nidx: int = idx, nname: str = node) -> str | None:
                    if not p:
                        return None
                    out = expand_pattern(p, job_id=job.job_id, name=job.name, user=job.user,
                                         node=nname, array_job_id=job.array_job_id,
                                         array_task_id=job.array_task_id, step=str(step.step_id),
                                         task=tid, node_index=nidx)
                    return out if os.path.isabs(out) else os.path.join(cwd, out)

                stdout, stderr = path(req.output), path(req.error or req.output)
                if req.pty and task_id != 0:
                    # srun(1) --pty: the terminal is task 0's; the others write to /dev/null
                    stdout = stderr = os.devnull
                notice = gpu_bind_line(node_gpus, task_gpus) if verbose and node_gpus else None
                task_argv: list[str] | None = None
                if req.multi_prog is not None:
                    task_argv = multi_prog_argv(req.multi_prog, task_id, req.argv[1:]) or []
                    if not task_argv:
                        notice = (notice or "") + (f"slurmstepd: error: Program for task rank "
                                                   f"{task_id} not specified.\n")
                task = m.TaskSpec(task_id=task_id, local_id=local, node=node, env=env,
                                  stdout=stdout, stderr=stderr, stdin=path(req.input),
                                  notice=notice, argv=task_argv)
                if sender is None:
                    step.exits[task_id] = (1, 0)
                    text = f"srun: error: {node}: no agent serves this node\n".encode()
                    step.send(m.Output(task=task_id, stream="stderr",
                                       data=base64.b64encode(text).decode()))
                    step.send(m.TaskEnded(task=task_id, exit_code=1, signal=0))
                else:
                    by_sender.setdefault(id(sender), (sender, []))[1].append(task)
                task_id += 1
        has_mem = job.mem_per_node is not None or job.mem_per_cpu is not None
        for sender, tasks in by_sender.values():
            sender(m.LaunchTasks(
                job_id=job.job_id, step_id=step.step_id, uid=job.uid, gid=job.gid,
                user=job.user, home=home, cwd=cwd, argv=list(req.argv), pty=req.pty,
                window=req.window, stdin=step.stdin, kill_wait=ctl.kill_wait,
                open_mode=req.open_mode, tasks=tasks,
                # for the agent's binding: CPUs per task, the step's CPUs on each node (0:
                # --overlap, any of the job's), the job's memory there (its cgroup's limit)
                cpus_per_task=req.cpus_per_task,
                node_cpus={n: step.cpus.get(n, 0) for n in step.nodes},
                node_mem_mb={n: alloc[n].mem_mb if has_mem else 0 for n in step.nodes},
                task_prolog=req.task_prolog, task_epilog=req.task_epilog,
                slurmd_debug=req.slurmd_debug, container=req.container,
            ).to_dict())
        self._maybe_finish(step)

    def _agents_of(self, step: LiveStep) -> list[Any]:
        seen: dict[int, Any] = {}
        for node in step.nodes:
            s = self.ctl.agent_senders.get(node)
            if s is not None:
                seen[id(s)] = s
        return list(seen.values())

    def _client_message(self, session: Session, msg: m.Message) -> None:
        step = session.step
        if step is None:
            return
        key = {"job_id": step.job_id, "step_id": step.step_id}
        if isinstance(msg, (m.Stdin, m.StdinEof)):
            if step.stdin == "none":
                return
            targets = self._agents_of(step) if step.stdin == "all" else \
                [s for s in [self.ctl.agent_senders.get(step.task_node(int(step.stdin)))]
                 if s is not None]
            out: m.Message = m.TaskStdin(**key, data=msg.data) if isinstance(msg, m.Stdin) \
                else m.TaskStdinEof(**key)
            for s in targets:
                s(out.to_dict())
        elif isinstance(msg, m.SignalStep):
            self._to_agents(step, m.SignalTasks(**key, signal=msg.signal))
        elif isinstance(msg, m.Cancel):
            self._kill_step(step)
        elif isinstance(msg, m.Resize):
            self._to_agents(step, m.ResizeTasks(**key, rows=msg.rows, cols=msg.cols))

    def _abort_step(self, step: LiveStep) -> None:
        """Killed from outside its srun (scancel, the job's end): srun says so as Slurm's
        does when slurmctld tells it the step is complete (KillWait + STEP_ABORT_TIME)."""
        if not step.cancelled:
            step.send(m.UserMessage(message=f"Job step aborted: Waiting up to "
                                    f"{self.ctl.kill_wait + 2} seconds for job step to finish."))
        self._kill_step(step)

    def _kill_step(self, step: LiveStep) -> None:
        step.cancelled = True
        self._to_agents(step, m.KillTasks(job_id=step.job_id, step_id=step.step_id))

    def signal_step(self, who: Identity, job_id: int, step_id: int, signum: int | None) -> None:
        """scancel J.S: end the step (signum None) or deliver a signal to its tasks."""
        job = self.ctl.jobs.get(job_id)
        step = self.live.get((job_id, step_id))
        if job is None or step is None:
            raise SlurmError("Invalid job id specified", 2017, 404)
        self.ctl.check_owner(who, job)
        if signum is None:
            self._abort_step(step)
        else:
            self._to_agents(step, m.SignalTasks(job_id=job_id, step_id=step_id, signal=signum))

    # ---- from the agents -------------------------------------------------------
    def agent_message(self, raw: dict[str, Any] | m.Message,
                      nodes: list[str] | None = None) -> None:
        """A task's output or exit from an agent.  A malformed one is logged and dropped:
        it never raises into the agent's link.  With `nodes` (those the sending agent
        serves), a message about a task on another node is refused too: one node cannot
        speak for another's tasks."""
        try:
            msg = raw if isinstance(raw, m.Message) else m.decode(raw, m.TO_CONTROLLER_FROM_AGENT)
        except m.MessageError as e:
            log.warning("refused %s", e)
            return
        if isinstance(msg, m.PmiFence):
            self._pmi_fence(msg, nodes)
            return
        if not isinstance(msg, (m.TaskOutput, m.TaskExit)):
            return
        step = self.live.get((msg.job_id, msg.step_id))
        if step is None:
            return
        if msg.task_id >= step.ntasks:
            log.warning("refused %s for task %d of step %d.%d, which has %d tasks", msg.TYPE,
                        msg.task_id, msg.job_id, msg.step_id, step.ntasks)
            return
        if nodes is not None and step.task_node(msg.task_id) not in nodes:
            log.warning("refused %s for task %d of step %d.%d from an agent of %s: the task "
                        "runs on %s", msg.TYPE, msg.task_id, msg.job_id, msg.step_id,
                        hostlists.compress(nodes) or "no node", step.task_node(msg.task_id))
            return
        if isinstance(msg, m.TaskOutput):
            step.send(m.Output(task=msg.task_id, stream=msg.stream, data=msg.data))
        elif msg.task_id not in step.exits:  # a repeated exit is not a second end
            step.exits[msg.task_id] = (msg.exit_code, msg.signal)
            step.send(m.TaskEnded(task=msg.task_id, exit_code=msg.exit_code, signal=msg.signal))
            self._maybe_finish(step)

    def _pmi_fence(self, msg: m.PmiFence, nodes: list[str] | None) -> None:
        """One agent's ranks of an --mpi=pmi2 step reached a fence (model/pmi.py): once
        every rank has, the merged puts go to every agent of the step.  A part for ranks
        the sending agent does not serve, or that does not fit the fence, is refused."""
        step = self.live.get((msg.job_id, msg.step_id))
        if step is None:
            return
        if nodes is not None and any(not 0 <= r < step.ntasks or step.task_node(r) not in nodes
                                     for r in msg.ranks):
            log.warning("refused pmi_fence of step %d.%d from an agent of %s: ranks of "
                        "other nodes", msg.job_id, msg.step_id,
                        hostlists.compress(nodes) or "no node")
            return
        if step.pmi is None:
            step.pmi = FenceGather(step.ntasks)
        try:
            merged = step.pmi.add(msg.epoch, list(msg.ranks), dict(msg.puts))
        except FenceError as e:
            log.warning("refused pmi_fence of step %d.%d: %s", msg.job_id, msg.step_id, e)
            return
        if merged is not None:
            self._to_agents(step, m.PmiKvs(job_id=msg.job_id, step_id=msg.step_id,
                                           epoch=msg.epoch, kvs=merged))

    def _maybe_finish(self, step: LiveStep) -> None:
        if len(step.exits) < step.ntasks:
            return
        self.live.pop((step.job_id, step.step_id), None)
        rc = 0
        worst_sig = 0
        for code, sig in step.exits.values():
            rc = max(rc, 128 + sig if sig else code)
            worst_sig = max(worst_sig, sig)
        exit_code = max(code for code, _ in step.exits.values())
        rec = step.record
        rec.end_time = time.time()
        rec.exit_code, rec.signal = exit_code, worst_sig
        if step.cancelled:
            rec.state = JobState.CANCELLED.value
        elif rc == 0:
            rec.state = JobState.COMPLETED.value
        else:
            rec.state = JobState.FAILED.value
        job = self.ctl.jobs.get(step.job_id)
        if job is not None:
            self.ctl.mark(job)
        step.send(m.StepEnd(exit_code=min(rc, 255)))
        ev = self.step_freed.get(step.job_id)
        if ev is not None:
            ev.set()
        self.ctl.steps_changed(step.job_id)  # a job waiting in COMPLETING for its steps


class _Busy(Exception):
    pass


def _gpu_binding(req: m.StepSpec) -> tuple[bool, str, list[int]]:
    """--gpu-bind, or per_task:N implied by --gpus-per-task=N (srun(1))."""
    if req.gpu_bind:
        try:
            return parse_gpu_bind(req.gpu_bind)
        except GpuBindError as e:
            raise SlurmError(f"Invalid --gpu-bind argument: {e}") from None
    if req.gpus_per_task:
        return False, "per_task", [req.gpus_per_task]
    return False, "none", []
