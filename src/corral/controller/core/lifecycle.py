"""The job lifecycle, a part of the core: starting, ending, requeueing, preempting and
forgetting jobs, and time limits.

Every change of a job's state goes through the job table's state machine
(`Core.set_state`); resources are charged and released through the cluster's ledger; what
the world must do (persist, launch, control a job on its node, signal its steps, schedule
a pass) is emitted as effects.  Time is a parameter (`now`)."""

from __future__ import annotations

import heapq
import logging
import signal as signal_module
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from corral.controller.cluster import NodeEventKind
from corral.controller.core.effects import Control, Launch, SignalSteps, StartUndo
from corral.controller.core.followed import MarkCursor
from corral.controller.jobs import JobEventKind
from corral.model.job import FINISHED_STATES, Job, JobState, NodeAlloc, Reason, Step
from corral.model.messages import JOB_END_STATES
from corral.sched import deps as sched_deps

if TYPE_CHECKING:
    from corral.controller.core.core import Core

log = logging.getLogger("corral.controller")

# what an agent may report a batch step ended as, the one list of model/messages
# (REQUEUED: the step was killed for a requeue the controller asked for)
AGENT_END_STATES = JOB_END_STATES


def end_reason(state: str, exit_code: int, signal: int, note: str | None = None) -> str:
    """The Reason= a finished job shows, as slurmctld sets it (job_completion_logger and
    friends): NonZeroExitCode for FAILED, RaisedSignal:N(NAME) when a signal killed it,
    TimeLimit, NodeDown, OutOfMemory, JobLaunchFailure, BootFail; None otherwise."""
    if note is not None and state in ("FAILED", "NODE_FAIL"):
        return "JobLaunchFailure"
    if state == "FAILED":
        if signal and not exit_code:
            try:
                name = signal_module.Signals(signal).name[3:]
            except ValueError:
                name = str(signal)
            return f"RaisedSignal:{signal}({name})"
        return "NonZeroExitCode"
    return {"TIMEOUT": "TimeLimit", "NODE_FAIL": "NodeDown", "OUT_OF_MEMORY": "OutOfMemory",
            "BOOT_FAIL": "BootFail", "DEADLINE": "DeadLine"}.get(state, Reason.NONE)


class StepTable(Protocol):
    """What the lifecycle asks of the step manager (controller/steps.py) about a job's srun
    steps while the job ends."""

    def lingering_steps(self, job_id: int) -> list[str]:
        """The job's steps whose tasks have not all reported their end, on nodes whose agents
        can still report (a step on a node that stopped responding does not hold the job)."""
        ...

    def forget_steps(self, job_id: int) -> list[str]:
        """Give up on the job's remaining steps (ended as CANCELLED, their clients told):
        the nodes where a step still lingered."""
        ...

    def signal_job_steps(self, job_id: int, signum: int) -> None:
        """Signal the job's running steps (preemption's SIGTERM before its grace time)."""
        ...


class NoSteps:
    def lingering_steps(self, job_id: int) -> list[str]:
        return []

    def forget_steps(self, job_id: int) -> list[str]:
        return []

    def signal_job_steps(self, job_id: int, signum: int) -> None:
        pass


@dataclass(slots=True)
class _Ending:
    """A job whose batch step (or allocation) is over while srun steps of it still run: it
    stays COMPLETING, holding its resources, until they are gone (Slurm: CG until every
    step is complete, then the final state, or PENDING again for a requeue)."""

    state: str  # as the agent reported the batch step (or the allocation's end)
    exit_code: int
    signal: int
    end_time: float
    note: str | None
    since: float  # when the wait began (the bound counts from here)
    reason: str | None  # the job's kill_reason then (a node failing meanwhile does not
    # change how it ends; a requeue asked meanwhile does)


KILL_TASK_FAILED = "Kill task failed"


# kill reasons of a preempted job: requeued, or ended PREEMPTED
PREEMPT_KILLS = ("REQUEUE_PREEMPT", "PREEMPTED")


def _limit_end(job: Job) -> float | None:
    """When a started job's time limit is over (None: no limit)."""
    if job.time_limit <= 0 or job.start_time is None:
        return None
    return job.start_time + job.time_limit + job.suspended_secs


def _signal_number(spec: str | None) -> int | None:
    """The signal of a --signal "[B:]SIG[@secs]" (None if it names none we know)."""
    if not spec:
        return None
    name = spec.split(":", 1)[-1].split("@", 1)[0].strip().upper()
    if name.isdigit():
        return int(name)
    try:
        return int(signal_module.Signals["SIG" + name.removeprefix("SIG")])
    except (KeyError, ValueError):
        return None


class Lifecycle:
    """Starting, ending, requeueing, preempting and forgetting jobs (a part of `Core`)."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.out = core.out
        self.ending: dict[int, _Ending] = {}
        # preempted jobs in their GraceTime: job id -> when they are killed
        self.preempt_deadlines: dict[int, float] = {}
        # what the periodic checks look at, kept from the job table's marks (every change
        # of a job's state, limit, start or kill reason marks it): so that a tick visits
        # the jobs that may be due, not every running job
        self._marks = MarkCursor(core.table)
        self._deadlines: list[tuple[float, int]] = []  # a heap: (time limit's end, job id)
        # running jobs the time-limit check acts on other than at their limit's end (lent
        # to a preemptor, preempted), and jobs in COMPLETING, in the table's order
        self._odd: dict[int, None] = {}
        self._completing: dict[int, None] = {}
        self._finished: list[tuple[float, int]] = []  # a heap: (end time, job id)

    def start_job(self, job: Job, alloc: list[NodeAlloc], now: float,
                  partition: str | None = None) -> None:
        """Start `job` on `alloc` (in `partition`, one of its -p a,b list, when given)."""
        undo = StartUndo(job.restart_count, now, job.reason, job.start_time, job.end_time,
                         job.alloc, job.nodes, job.batch_host, job.num_tasks, job.scheduler,
                         job.sched_start, job.sched_nodes, job.kill_reason, list(job.steps),
                         job.partition, self.core.pending_reasons.get(job.job_id))
        if partition:
            job.partition = partition
        job.reason = Reason.NONE
        job.start_time = now
        job.end_time = None
        job.alloc = alloc
        job.nodes = [a.node for a in alloc]
        job.batch_host = job.nodes[0]
        if not job.ntasks_per_node and job.num_tasks < len(alloc):
            # spread over more nodes than tasks (a --gpus total without -N): one task per
            # node at least, as Slurm lays it out, so a plain srun in it runs on every node
            job.num_tasks = len(alloc)
        job.scheduler = "Main"
        job.sched_start = None
        job.sched_nodes = []
        job.kill_reason = None
        self.core.pending_reasons.pop(job.job_id, None)
        self.core.cluster.charge(job)
        if job.batch:
            job.steps = [s for s in job.steps if s.step_id != "batch"]
            job.steps.append(Step("batch", "batch", JobState.RUNNING.value, start_time=now,
                                  cpus=alloc[0].cpus, nodes=alloc[0].node))
        self.out.job(job)
        self.core.set_state(job, JobState.RUNNING, now)
        if job.batch and job.state == JobState.RUNNING:
            self.out.emit(Launch(job, undo))

    def unstart(self, job: Job, undo: StartUndo, now: float) -> bool:
        """Take back a start whose commit failed: the job is PENDING again with the fields
        it had before (`undo`), its resources released, and the typed UNSTARTED event
        tells the subscribers.  Only while the job is still in that run and RUNNING (a
        cancel, requeue or end since is the user's or an agent's and stays), and not for a
        preemptor running on resources lent by suspended victims (their suspension went in
        the same batch; that start is kept and its commit retried).  True when undone."""
        if job.state != JobState.RUNNING or job.restart_count != undo.run \
                or job.start_time != undo.start or job.job_id in self.core.cluster.loans \
                or self.core.cluster.lenders(job.job_id):
            return False
        self.core.cluster.release(job, now)
        job.reason, job.start_time, job.end_time = undo.reason, undo.start_time, undo.end_time
        job.alloc, job.nodes, job.batch_host = undo.alloc, undo.nodes, undo.batch_host
        job.num_tasks, job.scheduler = undo.num_tasks, undo.scheduler
        job.sched_start, job.sched_nodes = undo.sched_start, undo.sched_nodes
        job.kill_reason, job.steps, job.partition = undo.kill_reason, undo.steps, undo.partition
        if undo.pending_reason is not None:
            self.core.pending_reasons[job.job_id] = undo.pending_reason
        self.out.job(job)
        self.core.set_state(job, JobState.PENDING, now, JobEventKind.UNSTARTED)
        return True

    # ---------------------------------------------------------- job endings
    def job_ended(self, job_id: int, state: str, exit_code: int, signal: int, end_time: float,
                  now: float, note: str | None = None) -> Job | None:
        """The agent says the batch step is over (or a launch failed).

        A report for a job that is not running (unknown, already ended: a duplicate) or
        with a state no batch step ends in changes nothing and never raises.  While srun
        steps of the job still run, the job stays COMPLETING with its resources held, and
        ends (or goes back to PENDING for a requeue) once they are gone."""
        job = self.core.jobs.get(job_id)
        if job is None or not job.state.active:
            return job
        if state not in AGENT_END_STATES:
            log.warning("job %d: end report with invalid state %r refused", job_id, state)
            return job
        if job_id in self.ending:  # already over, waiting for its steps
            self.steps_changed(job_id, now)
            return job
        for s in job.steps:
            if s.step_id == "batch" and s.end_time is None:
                s.end_time = end_time
                s.exit_code, s.signal = exit_code, signal
                s.state = "CANCELLED" if (job.kill_reason or state == "TIMEOUT") and signal else state
                if state in ("COMPLETED", "FAILED", "OUT_OF_MEMORY"):
                    s.state = state
        if self._wait_for_steps(job, _Ending(state, exit_code, signal, end_time, note,
                                             now, job.kill_reason)):
            return job
        return self._finish_ended(job, state, exit_code, signal, end_time, note, now)

    def _wait_for_steps(self, job: Job, ending: _Ending) -> bool:
        """True when steps of `job` still run: it stays (or becomes) COMPLETING, which kills
        them (the step manager hears the "ending" event), until `steps_changed` finds them
        gone or the bound passes."""
        left = self.core.step_table.lingering_steps(job.job_id)
        if not left:
            return False
        self.ending[job.job_id] = ending
        log.info("job %d: waiting for step(s) %s to end before it %s", job.job_id,
                 ",".join(left), "is requeued" if (job.kill_reason or "").startswith("REQUEUE")
                 else "ends")
        self.out.job(job)
        if job.state != JobState.COMPLETING:
            self.core.set_state(job, JobState.COMPLETING, ending.end_time)
        return True

    def steps_changed(self, job_id: int, now: float) -> None:
        """A step of `job_id` ended (or its node stopped responding): a job waiting for its
        steps ends once none lingers."""
        ending = self.ending.get(job_id)
        job = self.core.jobs.get(job_id)
        if ending is None:
            return
        if job is None or not job.state.active:
            del self.ending[job_id]
            return
        if not self.core.step_table.lingering_steps(job_id):
            self._end_after_steps(job, ending, now)

    def check_ending(self, now: float) -> None:
        """Jobs waiting for their steps: end those whose steps are gone, or whose steps did not
        report within the bound (logged; the nodes where they linger are drained).  A job left
        COMPLETING by a controller restart after its batch step ended is picked up again."""
        self._follow_marks()
        if self._completing_unfollowed():
            for held in list(self.core.running.values()):
                if held.state != JobState.COMPLETING or held.job_id in self.ending:
                    continue
                recovered = self._recovered_ending(held, now)
                if recovered is not None:
                    self.ending[held.job_id] = recovered
        bound = self.core.settings.step_bound()
        for job_id, ending in list(self.ending.items()):
            job = self.core.jobs.get(job_id)
            if job is None or not job.state.active:
                self.ending.pop(job_id, None)
                continue
            left = self.core.step_table.lingering_steps(job_id)
            if left and now - ending.since < bound:
                continue
            if left:
                log.warning("job %d: step(s) %s did not end within %ds (KillWait + "
                            "UnkillableStepTimeout); ending the job without them",
                            job_id, ",".join(left), int(bound))
                del self.ending[job_id]  # forgetting the steps must not end it a second time
                self._drain_unkillable(self.core.step_table.forget_steps(job_id), now)
            self._end_after_steps(job, ending, now)

    def _recovered_ending(self, job: Job, now: float) -> _Ending | None:
        if not job.batch:
            if job.kill_reason is None:
                return None
            return _Ending(job.kill_reason, job.exit_code, job.term_signal, now, None, now,
                           job.kill_reason)
        batch = next((s for s in job.steps if s.step_id == "batch"), None)
        if batch is None or batch.end_time is None:
            return None  # the agent has not reported the batch step's end yet
        state = batch.state
        if state == "CANCELLED" and job.kill_reason in (None, "TIMEOUT"):
            state = "TIMEOUT"  # job_ended writes a timed-out, signalled batch step so
        return _Ending(state, batch.exit_code, batch.signal, batch.end_time, None, now,
                       job.kill_reason)

    def _drain_unkillable(self, nodes: list[str], now: float) -> None:
        for name in dict.fromkeys(nodes):
            n = self.core.nodes.get(name)
            if n is None or n.admin_state != "up":
                continue
            n.admin_state = "drain"
            n.reason, n.reason_user, n.reason_uid, n.reason_time = KILL_TASK_FAILED, "root", 0, now
            self.core.node_event(n, NodeEventKind.DRAINED, now)
            self.out.node(n.name)

    def _end_after_steps(self, job: Job, ending: _Ending, now: float) -> None:
        self.ending.pop(job.job_id, None)
        if not (job.kill_reason or "").startswith("REQUEUE"):
            # a requeue asked meanwhile wins (Slurm requeues a completing job once it is
            # done); anything else (a node failing) does not change how it ends
            job.kill_reason = ending.reason
        if job.batch:
            self._finish_ended(job, ending.state, ending.exit_code, ending.signal,
                               ending.end_time, ending.note, now)
        else:
            self._finish_allocation(job, ending.state, ending.exit_code, ending.signal,
                                    ending.end_time, now)

    def _finish_ended(self, job: Job, state: str, exit_code: int, signal: int, end_time: float,
                      note: str | None, now: float) -> Job:
        # steps left only on nodes that stopped responding are given up with the job
        self.core.step_table.forget_steps(job.job_id)
        # released only now: no other job gets these resources while the old steps run
        self._release(job, now)
        reason = job.kill_reason
        job.kill_reason = None
        if reason == "REQUEUE_PREEMPT":
            self.requeue_job(job, max(end_time, now), hold=False, keep_age=True)
            self.out.job(job)
            self.out.schedule()
            return job
        if reason in ("REQUEUE", "REQUEUE_HOLD", "REQUEUE_UHOLD") or (
                reason == "NODE_FAIL" and job.requeue):
            # BeginTime counts from when the job is pending again, after its steps are gone
            self.requeue_job(job, max(end_time, now),
                             hold=reason in ("REQUEUE_HOLD", "REQUEUE_UHOLD"),
                             held="user" if reason == "REQUEUE_UHOLD" else "admin")
            self.out.job(job)
            self.out.schedule()
            return job
        job.end_time = end_time
        if reason in ("CANCELLED", "NODE_FAIL", "PREEMPTED", "TIMEOUT"):
            final = reason  # what the controller killed it for wins over how the step ended
            job.exit_code, job.term_signal = 0, 0
        else:
            # a step says REQUEUED only when the controller asked for a requeue (handled
            # above); a job cannot requeue itself by writing it
            final = "FAILED" if state == "REQUEUED" else state
            job.exit_code, job.term_signal = exit_code, signal
            if final == "TIMEOUT":
                job.exit_code, job.term_signal = 0, 0
        job.reason = end_reason(final, job.exit_code, job.term_signal, note)
        job.dependency_text = None
        self.out.job(job)
        self.core.set_state(job, JobState(final), end_time)
        self.out.schedule()
        return job

    def end_allocation(self, job: Job, state: str, now: float, exit_code: int = 0,
                       signal: int = 0) -> None:
        """A job without a batch script (salloc, srun) ends: released, cancelled, timed out.
        While steps of it still run it stays COMPLETING (kill_reason names the end it waits
        for, so a controller restart meanwhile still knows it)."""
        if not job.state.active:
            return
        if job.job_id in self.ending:
            self.steps_changed(job.job_id, now)
            return
        job.exit_code, job.term_signal = exit_code, signal
        job.kill_reason = state
        if self._wait_for_steps(job, _Ending(state, exit_code, signal, now, None, now, state)):
            return
        self._finish_allocation(job, state, exit_code, signal, now, now)

    def _finish_allocation(self, job: Job, state: str, exit_code: int, signal: int,
                           end_time: float, now: float) -> None:
        self.core.step_table.forget_steps(job.job_id)
        self._release(job, now)
        job.kill_reason = None
        job.end_time = end_time
        job.exit_code, job.term_signal = exit_code, signal
        job.reason = end_reason(state, exit_code, signal)
        self.out.job(job)
        self.core.set_state(job, JobState(state), end_time)
        self.out.schedule()

    def check_time_limits(self, now: float) -> None:
        """Jobs past their time limit end TIMEOUT (the periodic tick; jobs waiting in
        COMPLETING for their steps are checked too).  An allocation has no step supervisor,
        so it ends here; a batch job's supervisor enforces the limit on its node as well, and
        whichever comes first, the job ends TIMEOUT once (see `time_out_batch`)."""
        self.check_ending(now)
        self.check_preempted(now)
        if not self._may_act(now):
            return  # (the loop below would find nothing to do)
        for job in list(self.core.running.values()):
            if job.suspended_for is not None and job.state == JobState.SUSPENDED \
                    and job.job_id not in self.core.cluster.loans.get(job.suspended_for, ()):
                self.resume_lent(job, now)  # its preemptor is gone (ended while we were down)
                continue
            if job.kill_reason in PREEMPT_KILLS and job.state == JobState.RUNNING \
                    and job.job_id not in self.preempt_deadlines:
                self._kill_preempted(job, now)  # its grace time was lost with a restart
                continue
            end = _limit_end(job)
            if end is None or job.state != JobState.RUNNING or now < end:
                continue
            if job.batch:
                self.time_out_batch(job, now)
            else:
                log.info("allocation %d reached its time limit", job.job_id)
                self.end_allocation(job, "TIMEOUT", now)

    # ---- what the periodic checks look at, kept between ticks ------------------------
    def _follow_marks(self) -> None:
        """The jobs marked since the last tick noted again (all of them when marks were
        missed): a running job's time limit's end into the heap, odd and COMPLETING ones
        into their sets.  A job that changed is marked, so the heap holds, for every
        running job with a limit, an entry no later than its limit's end (stale entries are
        checked and dropped as they come up)."""
        running, jobs = self.core.running, self.core.jobs
        changed = self._marks.changed()
        if changed is None:
            self._deadlines, self._odd, self._completing, self._finished = [], {}, {}, []
            changed = list(jobs)
        heap = self._deadlines
        odd, completing = self._odd, self._completing
        for job_id in dict.fromkeys(changed):
            job = running.get(job_id)
            if job is None:
                done = jobs.get(job_id)
                if done is not None and done.state in FINISHED_STATES:
                    heapq.heappush(self._finished, (done.end_time or 0, job_id))
                continue
            end = _limit_end(job)
            if end is not None:
                heapq.heappush(heap, (end, job_id))
            if job.suspended_for is not None or job.kill_reason in PREEMPT_KILLS:
                odd[job_id] = None
            if job.state == JobState.COMPLETING:
                completing[job_id] = None
        if len(heap) > 64 + 4 * len(running):  # (mostly entries of jobs gone): afresh
            self._deadlines = [(end, job.job_id) for job in running.values()
                               if (end := _limit_end(job)) is not None]
            heapq.heapify(self._deadlines)

    def _may_expire(self, cutoff: float) -> bool:
        """Whether a finished job in memory ended before `cutoff` (expire_finished looks
        for them; exact in one direction, as `_may_act`)."""
        self._follow_marks()
        heap, jobs = self._finished, self.core.jobs
        while heap and heap[0][0] < cutoff:
            end, job_id = heap[0]
            job = jobs.get(job_id)
            finished = job is not None and job.state in FINISHED_STATES
            if finished and (job.end_time or 0) <= end:  # type: ignore[union-attr]
                return True
            heapq.heappop(heap)  # gone or requeued (entered anew when it ends again)
            if finished:  # (its end moved later)
                heapq.heappush(heap, (job.end_time or 0, job_id))  # type: ignore[union-attr]
        return False

    def _completing_unfollowed(self) -> bool:
        """Whether a job in COMPLETING is not yet in `ending` (check_ending looks for it)."""
        running, ending = self.core.running, self.ending
        for job_id in list(self._completing):
            job = running.get(job_id)
            if job is None or job.state != JobState.COMPLETING:
                del self._completing[job_id]
            elif job_id not in ending:
                return True
        return False

    def _may_act(self, now: float) -> bool:
        """Whether check_time_limits' loop over the running jobs may act on one: a job lent
        to a preemptor or preempted, or a job whose time limit's end has come.  (Exact in
        one direction: False only when the loop would do nothing.)"""
        self._follow_marks()  # (what check_ending and check_preempted changed)
        running = self.core.running
        odd = self._odd
        for job_id in list(odd):
            job = running.get(job_id)
            if job is None or (job.suspended_for is None
                               and job.kill_reason not in PREEMPT_KILLS):
                del odd[job_id]
            else:
                return True
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            end, job_id = heap[0]
            job = running.get(job_id)
            now_end = None if job is None else _limit_end(job)
            if now_end is not None and now_end <= now:
                return True  # (left in the heap: it is checked again until it ends)
            heapq.heappop(heap)
            if now_end is not None:  # (its limit moved: the entry for its new end)
                heapq.heappush(heap, (now_end, job_id))
        return False

    def time_out_batch(self, job: Job, now: float) -> None:
        """A batch job reached its limit: COMPLETING as TIMEOUT (Slurm's state TIMEOUT +
        COMPLETING), its srun steps killed, and its node told the limit again, so the step
        supervisor terminates it now if its own timer has not (SIGTERM, then SIGKILL after
        KillWait; its log says "DUE TO TIME LIMIT").  The job ends TIMEOUT when the node
        reports the batch step over, however the step says it ended.  A job already being
        killed (cancelled, requeued) keeps that end."""
        if job.kill_reason is not None or job.state != JobState.RUNNING:
            return
        log.info("job %d reached its time limit", job.job_id)
        job.kill_reason = "TIMEOUT"
        self.out.job(job)
        self.core.set_state(job, JobState.COMPLETING, now)
        self.out.control(job, {"op": "time_limit", "seconds": job.time_limit})

    # ---------------------------------------------------------- preemption
    def preempt_job(self, job: Job, now: float, mode: str, grace: int) -> None:
        """Stop a running job for a preemptor, without any authorization check (the
        scheduling pass decided it).  REQUEUE (a batch job that may be requeued) puts it
        back in the queue with its age kept; CANCEL, or a --no-requeue job, ends it
        PREEMPTED.  With a GraceTime its processes get SIGTERM (and its --signal) first
        and are killed when the grace time is over, or earlier if they exit."""
        if job.state != JobState.RUNNING or job.kill_reason is not None:
            return
        requeue = mode == "requeue" and job.batch and job.requeue
        job.kill_reason = "REQUEUE_PREEMPT" if requeue else "PREEMPTED"
        self.out.job(job)
        if grace <= 0:
            self._kill_preempted(job, now)
            return
        self.preempt_deadlines[job.job_id] = now + grace
        signals = [int(signal_module.SIGTERM)]
        asked = _signal_number(job.signal)
        if asked is not None and asked not in signals:
            signals.insert(0, asked)
        for signum in signals:
            if job.batch:
                self.out.control(job, {"op": "signal", "signal": signum,
                                         "batch_only": False})
            self.out.emit(SignalSteps(job.job_id, signum))

    # ------------------------------------------------- preemption by suspension
    def suspend_for(self, victim: Job, preemptor_id: int, alloc: list[NodeAlloc],
                    now: float) -> None:
        """Preemption by suspension (PreemptMode=SUSPEND): the victim is stopped at once,
        without GraceTime (its node freezes its processes, as for `scontrol suspend`), and
        lends the preemptor, which starts on `alloc`, what it needs of its resources; the
        ledger keeps them the victim's, so no other job gets them.  It resumes on them
        when the preemptor ends (`_release`); its time limit does not count the wait."""
        victim.suspend_time = now
        victim.suspended_for = preemptor_id
        self.core.cluster.lend(victim, preemptor_id, alloc)
        self.out.job(victim)
        self.core.set_state(victim, JobState.SUSPENDED, now)
        self._control_nodes(victim, "suspend")

    def resume_lent(self, victim: Job, now: float) -> None:
        """A victim suspended for a preemptor that has ended runs again."""
        victim.suspended_for = None
        if victim.state != JobState.SUSPENDED:  # `scontrol resume` resumed it meanwhile
            self.out.job(victim)
            return
        victim.suspended_secs += now - (victim.suspend_time or now)
        victim.suspend_time = None
        if victim.exclusive:  # the preemptor's release cleared the node's exclusive owner
            for name in victim.nodes:
                node = self.core.nodes.get(name)
                if node is not None:
                    node.exclusive_job = victim.job_id
        log.info("job %d resumes (its preemptor ended)", victim.job_id)
        self.out.job(victim)
        self.core.set_state(victim, JobState.RUNNING, now)
        self._control_nodes(victim, "resume")

    def recover_loans(self, active: list[Job]) -> None:
        """After a restart, before charging: suspended victims lend to their preemptors
        again (in job id order, as when they were suspended), so a preemptor is charged
        only for what it does not borrow.  A victim whose preemptor is no longer active
        is resumed by the next tick."""
        by_id = {j.job_id: j for j in active}
        for victim in sorted(active, key=lambda j: j.job_id):
            pid = victim.suspended_for
            if pid is None or victim.state != JobState.SUSPENDED:
                continue
            preemptor = by_id.get(pid)
            if preemptor is not None and preemptor.state.active:
                self.core.cluster.lend(victim, pid, preemptor.alloc)

    def _release(self, job: Job, now: float) -> None:
        """Give `job`'s resources back; the victims suspended for it resume on what it
        borrowed of theirs (in the same step: no pass runs in between)."""
        lenders = self.core.cluster.lenders(job.job_id)
        self.core.cluster.release(job, now)
        job.suspended_for = None  # a victim that ended while suspended lent to the end
        for vid in lenders:
            victim = self.core.jobs.get(vid)
            if victim is not None and victim.suspended_for == job.job_id:
                self.resume_lent(victim, now)

    def _control_nodes(self, job: Job, op: str) -> None:
        """`op` to the agent of every node of the job (its batch step and srun steps)."""
        for name in job.nodes or ([job.batch_host] if job.batch_host else []):
            self.out.emit(Control(job.job_id, name, {"op": op}))

    def check_preempted(self, now: float) -> None:
        """Preempted jobs whose GraceTime is over are killed (requeued or cancelled)."""
        for job_id, deadline in list(self.preempt_deadlines.items()):
            job = self.core.jobs.get(job_id)
            if job is None or job.state != JobState.RUNNING \
                    or job.kill_reason not in PREEMPT_KILLS:
                del self.preempt_deadlines[job_id]
                continue
            if now >= deadline:
                del self.preempt_deadlines[job_id]
                self._kill_preempted(job, now)

    def _kill_preempted(self, job: Job, now: float) -> None:
        if not job.batch:
            job.kill_reason = None  # an allocation is never requeued: it ends PREEMPTED
            self.end_allocation(job, "PREEMPTED", now)
            return
        self.stop_running(job, job.kill_reason or "PREEMPTED",
                          "requeue" if job.kill_reason == "REQUEUE_PREEMPT" else "cancel", now)
        self.out.schedule()

    def stop_running(self, job: Job, kill_reason: str, op: str, now: float) -> None:
        """Kill a running batch job (its node is told `op`: "cancel" or "requeue"); it is
        COMPLETING until the node reports its end, which `kill_reason` then decides
        (`_finish_ended`).  No authorization here: scancel and scontrol requeue check
        theirs first (controller/usecases.py); preemption is decided by the pass."""
        job.kill_reason = kill_reason
        if job.state != JobState.COMPLETING:
            self.core.set_state(job, JobState.COMPLETING, now)
        self.out.control(job, {"op": op})

    def requeue_job(self, job: Job, now: float, hold: bool, held: str | None = "admin",
                    keep_age: bool = False) -> None:
        """Back to PENDING (its resources, if any, are released by the caller); `hold`
        holds it, as `held` ("admin", or "user": an owner's requeuehold); `keep_age`
        (a preempted job) keeps its eligible time, so its priority age."""
        job.restart_count += 1
        # a new run: its steps are numbered from 0 again (Slurm's batch_requeue_fini resets
        # next_step_id); the old run's steps are gone with it, as sacct shows only the last run
        job.steps = []
        job.start_time = None
        job.end_time = None
        job.alloc = []
        job.nodes = []
        job.batch_host = None
        job.exit_code = job.term_signal = 0
        if not keep_age:
            job.eligible_time = None  # it ages again from when it may start again
        # Slurm waits before a requeued job may start again; keep a short delay
        job.begin_time = now + 1
        job.reason = Reason.BEGIN_TIME
        if hold:
            job.held = "user" if held == "user" else "admin"
            job.reason = Reason.HELD_USER if job.held == "user" else Reason.HELD_ADMIN
            job.priority = 0
        self.core.set_state(job, JobState.PENDING, now)

    def finish_pending(self, job: Job, state: JobState, now: float, by: int | None = None) -> None:
        if job.state != JobState.PENDING:
            return
        job.end_time = now
        job.reason = Reason.NONE
        if by is not None:
            job.cancelled_by = by
        self.core.pending_reasons.pop(job.job_id, None)
        self.out.job(job)
        self.core.set_state(job, state, now)

    def expire_finished(self, now: float) -> None:
        """Forget finished jobs older than MinJobAge (they stay in the store for sacct).

        The final state of one that a pending job's dependency still names is kept in
        `gone`, so the scheduler never has to read it back from the store."""
        cutoff = now - self.core.settings.min_job_age
        if not self._may_expire(cutoff):
            return
        old = [j for j in self.core.jobs.values()
               if j.state in FINISHED_STATES and (j.end_time or 0) < cutoff]
        if not old:
            return
        named: set[int] = set()
        for p in self.core.pending.values():
            if p.dependency:
                try:
                    named.update(sched_deps.parse_cached(p.dependency).job_ids())
                except sched_deps.DependencyError:
                    pass
        for j in old:
            if j.job_id in named or (j.array_job_id is not None and j.array_job_id in named):
                self.core.gone.add(sched_deps.GoneRecord.of(j))
            self.core.table.forget(j.job_id)
            if j.submit_id and self.core.submit_ids.get((j.uid, j.submit_id)) == j.job_id:
                del self.core.submit_ids[(j.uid, j.submit_id)]
        if len(self.core.gone) > 2 * len(named) + 1024:  # drop what no dependency names any more
            keep = sched_deps.GoneJobs()
            for rec in self.core.gone.by_id.values():
                if rec.job_id in named or rec.array_job_id in named:
                    keep.add(rec)
            self.core.gone = keep
