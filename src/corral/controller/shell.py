"""The shell: the one place where the core's effects meet the world.

It owns the event loop's side of the controller — the group-commit writer (the one write
path to the store), the agent links, the pass cadence on the wall clock — and executes
what the core emits (controller/core/effects.py):

- `PersistJob`, `PersistNode`, `PersistPayload`, `PersistNextJobId`, `PersistUsage`,
  `PersistCrontab`, `PersistReservation`, `PersistPartitions` are marked in the writer,
  committed in the next batch;
- `Control` and `Launch` wait for that commit (`after_commit`, `launch_after_commit`):
  nothing reaches an agent before the change it depends on is durable, and nothing is
  sent while a commit fails; a launch's message is built from the committed record in
  the store's thread, and goes out only if the job is still in the run and state it was
  decided for (a job cancelled meanwhile is ended here: its script never starts);
- a failed commit's starts are taken back (`Lifecycle.unstart`: PENDING again, resources
  released, the UNSTARTED event) and a pass asked for later; submissions it held that
  were never made visible are withdrawn (`_commit_failed`);
- `ScheduleSoon` asks the cadence (controller/cadence.py) for a pass;
- `ReadGoneJobs` reads from the store off the loop and hands the answer to the core;
- `SignalSteps` goes to the step manager; job and node events have already reached
  their subscribers.

The shell alone talks to the store and reads the wall clock."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from corral.controller import persist
from corral.controller.cadence import Cadence, CadenceParams
from corral.controller.core import Core
from corral.controller.core.effects import (
    Control,
    Effect,
    Launch,
    PersistCrontab,
    PersistJob,
    PersistNextJobId,
    PersistNode,
    PersistPartitions,
    PersistPayload,
    PersistReservation,
    PersistUsage,
    ReadGoneJobs,
    ScheduleSoon,
    SignalSteps,
    StartUndo,
)
from corral.controller.launch import launch_message
from corral.controller.persist import After, GroupCommitWriter, TakenBack
from corral.controller.persist import Launch as WaitingLaunch
from corral.model.job import Job, JobState
from corral.sched.pipeline import Decision
from corral.store.base import Store, WriteBatch

log = logging.getLogger("corral.controller")

Clock = Callable[[], float]
Send = Callable[[dict[str, Any]], None]


class PassDriver(Protocol):
    """Where the cadence's times live and how a pass is armed for one: the event loop in
    real time (`LoopPasses`), a test's hand (`controller.harness`), the simulator's event
    queue in virtual time (`corral.sim`)."""

    def now(self) -> float: ...

    def arm(self, at: float, run: Callable[[], None]) -> None: ...

    def pass_seconds(self, measured: float) -> float:
        """How long the pass that took `measured` wall seconds lasted on this timeline."""
        ...


class LoopPasses:
    """Passes on the controller's event loop, on the monotonic clock."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None

    def now(self) -> float:
        return time.perf_counter()

    def arm(self, at: float, run: Callable[[], None]) -> None:
        loop = self.loop = asyncio.get_running_loop()
        delay = at - time.perf_counter()
        if delay > 0:
            loop.call_later(delay, run)
        else:
            loop.call_soon(run)

    def pass_seconds(self, measured: float) -> float:
        return measured


class Shell:
    # Counts every change that reaches the store or comes through the API (answers.py).
    changes = 0
    last_sched_duration = 0.0
    sched_passes = 0

    def __init__(self, core: Core, store: Store, *, config_path: str = "",
                 clock: Clock | None = None, pass_driver: PassDriver | None = None) -> None:
        self.core = core
        self.store = store
        self.config_path = config_path
        self.clock: Clock = clock or time.time
        self.writer = GroupCommitWriter(store, core.cluster.node_record, lambda: core.next_id)
        # agent links: node name -> callable sending one message to its agent
        self.agent_senders: dict[str, Send] = {}
        self.cadence = Cadence(CadenceParams.from_config(core.config))
        self.pass_driver: PassDriver = pass_driver or LoopPasses()
        self.last_decision: Decision | None = None
        # a batch launch may wait for something first (PrologSlurmctld): the gate returns
        # True when it will call the launch itself
        self.launch_gate: Callable[[Job, Callable[[], None]], bool] | None = None
        self.writer.on_failure = self._commit_failed
        core.out.sink = self.execute

    # ---- effects ------------------------------------------------------------------
    def execute(self, effect: Effect) -> None:
        writer = self.writer
        if isinstance(effect, PersistJob):
            self.changes += 1  # (the job was marked as it was persisted: Outbox.job)
            writer.job(effect.job)
        elif isinstance(effect, PersistNode):
            self.changes += 1
            writer.node(effect.name)
        elif isinstance(effect, Control):
            send = self.agent_senders.get(effect.node)
            if send is not None:
                # acted on once the decision is durable, and after the caller has its
                # answer: `scontrol requeue $SLURM_JOB_ID` inside the job must not be
                # killed mid-request
                writer.after_commit(send, {"type": "control", "job_id": effect.job_id,
                                           "control": effect.control})
        elif isinstance(effect, Launch):
            job = effect.job
            # a gated launch goes in a later batch than its start: never taken back
            if self.launch_gate is None or not self.launch_gate(job, lambda: self._launch(job)):
                self._launch(job, effect.undo)
        elif isinstance(effect, ScheduleSoon):
            self.request_schedule(effect.delay)
        elif isinstance(effect, PersistPayload):
            writer.payload(effect.job_id, effect.payload)
        elif isinstance(effect, PersistNextJobId):
            writer.next_job_id()
        elif isinstance(effect, PersistUsage):
            writer.usage(effect.state, list(effect.records))
        elif isinstance(effect, PersistCrontab):
            writer.crontab(effect.record)
        elif isinstance(effect, PersistReservation):
            self.changes += 1
            writer.reservation(effect.change)
        elif isinstance(effect, PersistPartitions):
            self.changes += 1
            writer.partitions(effect.table)
        elif isinstance(effect, ReadGoneJobs):
            self._read_gone(effect.ids)
        elif isinstance(effect, SignalSteps):
            self.core.step_table.signal_job_steps(effect.job_id, effect.signum)
        # job and node events: delivered to their subscribers as they happened

    async def durable(self) -> None:
        """Return once every change made so far is committed to the store."""
        await self.writer.durable()

    # ---- recovery -----------------------------------------------------------------
    def recover(self) -> None:
        """Load what the store holds after a restart into the core."""
        store = self.store
        now = self.clock()
        self.core.recover(store.load_nodes(), store.load_active_jobs(),
                          store.load_recent_finished(now - self.core.settings.min_job_age),
                          store.next_job_id(), now)

    def _read_gone(self, ids: frozenset[int]) -> None:
        def read() -> list[Job]:
            return self.store.query_jobs(ids=sorted(ids), array_ids=sorted(ids))

        if not self.writer.reads_off_loop():
            self.core.gone_found(ids, read())
            return

        def found(jobs: list[Job] | Exception) -> None:
            if isinstance(jobs, Exception):
                log.error("reading jobs %s from the store failed: %s", sorted(ids), jobs)
                jobs = []
            self.core.gone_found(ids, jobs)

        self.writer.read(read, found)

    # ---- launches -----------------------------------------------------------------
    def launch_message(self, job: Job) -> dict[str, Any]:
        """The `launch` message of a job's batch step (model.messages.LaunchJob)."""
        assert job.alloc
        return launch_message(job, store=self.store, config_path=self.config_path,
                              cluster_name=self.core.settings.cluster_name,
                              kill_wait=self.core.settings.kill_wait,
                              node=self.core.nodes.get(job.alloc[0].node))

    def _launch(self, job: Job, undo: StartUndo | None = None) -> None:
        """Send the job's launch once its start is committed (never before: a crash between
        the two would run a job the store does not know runs).  The message is built after
        the commit, in the store's thread, from the committed record."""
        assert job.batch_host is not None
        run, start = job.restart_count, job.start_time
        self.writer.launch_after_commit(
            job, self.launch_message, lambda msg: self._deliver_launch(job, run, start, msg),
            undo)

    def _deliver_launch(self, job: Job, run: int, start: float | None,
                        msg: dict[str, Any] | Exception) -> None:
        now = self.clock()
        job_id = job.job_id
        if self.core.jobs.get(job_id) is not job or job.restart_count != run \
                or job.start_time != start \
                or job.state not in (JobState.RUNNING, JobState.SUSPENDED):
            # cancelled, requeued or ended while its commit was pending: the launch of a run
            # that is over must not start the script.  A job being killed (COMPLETING)
            # waits for an end its agent will never report: it ends here, as its
            # kill_reason says (CANCELLED, TIMEOUT, requeued…)
            log.info("job %d: launch not sent, the job is %s", job_id, job.state.value)
            if job.state == JobState.COMPLETING and job.restart_count == run \
                    and job.start_time == start and self.core.jobs.get(job_id) is job:
                # (no batch step: it never ran, as sacct shows a job cancelled before launch)
                job.steps = [s for s in job.steps if s.step_id != "batch"]
                self.core.lifecycle.job_ended(job_id, "CANCELLED", 0, 0, now, now)
            return
        if isinstance(msg, Exception):
            log.error("cannot build launch for job %d: %s", job_id, msg)
            self.core.lifecycle.job_ended(job_id, "FAILED", 1, 0, now, now, note=str(msg))
            return
        host = str(msg["node"])
        send = self.agent_senders.get(host)
        if send is None:
            log.warning("no agent for node %s; job %d fails to launch", host, job_id)
            self.core.lifecycle.job_ended(job_id, "NODE_FAIL", 0, 0, now, now)
            return
        send(msg)

    def _commit_failed(self, batch: WriteBatch, after: list[After]) -> TakenBack:
        """What a failed commit takes back (the writer asks; it retries the rest): the starts
        it held, still RUNNING in that run, are undone — PENDING again, resources released,
        their launch and Prolog messages never sent — and a pass is asked for later; the
        submissions it held that were never made visible are withdrawn (their clients got
        the error; a later retry must not make them exist).  Cancels, ends and everything
        agents reported stay, and are committed when the store takes them."""
        core = self.core
        now = self.clock()
        unsent: set[int] = set()
        for item in after:
            if not isinstance(item, WaitingLaunch) or not isinstance(item.undo, StartUndo):
                continue
            job = core.jobs.get(item.job_id)
            if job is not None and core.lifecycle.unstart(job, item.undo, now):
                unsent.add(job.job_id)
        withdrawn = {j.job_id for j in batch.jobs
                     if j.job_id not in core.table.jobs and not j.state.finished}
        if withdrawn:
            for key in [k for k, jid in core.submit_ids.items() if jid in withdrawn]:
                del core.submit_ids[key]
            log.error("submission of job(s) %s not committed: withdrawn",
                      ",".join(map(str, sorted(withdrawn))))
        if unsent:
            log.error("start of job(s) %s not committed: pending again",
                      ",".join(map(str, sorted(unsent))))
            self.request_schedule(persist.RETRY_S)  # when the writer tries again
        return TakenBack(withdrawn, unsent)

    # ---- agent links --------------------------------------------------------------
    def agent_registered(self, node_names: list[str], send: Send,
                         hw: dict[str, Any], running: list[int]) -> None:
        for name in node_names:
            self.agent_senders[name] = send
        self.core.reports.registered(node_names, hw, running, self.clock())

    def agent_lost(self, node_names: list[str], send: Send) -> None:
        mine = [n for n in node_names if self.agent_senders.get(n) is send]
        for name in mine:
            del self.agent_senders[name]
        self.core.reports.lost(mine)

    # ---- the pass cadence ---------------------------------------------------------
    def request_schedule(self, delay: float = 0.0) -> None:
        """Run a scheduling pass soon; requests made meanwhile coalesce into one
        (controller/cadence.py decides when)."""
        at = self.cadence.request(self.pass_driver.now(), delay)
        if at is not None:
            self.pass_driver.arm(at, self._run_schedule)

    def schedule_from_any_thread(self) -> None:
        """request_schedule from a worker thread too (sacctmgr changes are committed off
        the loop): the next pass sees the new associations and limits."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            loop = getattr(self.pass_driver, "loop", None)
            if loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(self.request_schedule)
            return
        self.request_schedule()

    def schedule_pass(self, now: float) -> Decision | None:
        # the pass's stages timed on the monotonic clock (Decision.stage_seconds: metrics)
        decision = self.core.passes.run(now, time.perf_counter)
        if decision is not None:
            self.last_decision = decision
        return decision

    def _run_schedule(self) -> None:
        self.cadence.started(self.pass_driver.now())
        t0 = time.perf_counter()
        try:
            self.schedule_pass(self.clock())
        except Exception:
            log.exception("scheduling pass failed")
        finally:
            self.last_sched_duration = time.perf_counter() - t0
            self.sched_passes += 1
        driver = self.pass_driver
        again = self.cadence.finished(driver.now(), driver.pass_seconds(self.last_sched_duration))
        if again is not None:
            driver.arm(again, self._run_schedule)
