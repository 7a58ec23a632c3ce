"""Driving the scheduler: build the snapshot, run the pipeline, apply its decision.

No policy lives here: what starts where, in which order, and why the others wait is
decided by `sched.pipeline.run_pass`; this module only turns the controller's state into
a `ClusterSnapshot` and the `Decision` back into state changes."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from corral.controller.cadence import Cadence, CadenceParams
from corral.controller.jobs import JobEvent, JobEventKind
from corral.controller.launch import Launching
from corral.controller.lifecycle import PREEMPT_KILLS
from corral.controller.reservations import scheduling_reservations
from corral.model.assoc import AssocIndex
from corral.model.config import preempt_settings
from corral.model.job import Job, JobState
from corral.model.node import Node
from corral.sched import fairshare as fs
from corral.sched.limits import PolicySnapshot
from corral.sched.limits_check import job_request
from corral.sched.pipeline import (
    ClusterSnapshot,
    Decision,
    Preemption,
    SchedParams,
    assoc_factor_of,
    fairshare_of,
    run_pass,
)
from corral.sched.preempt import PreemptPolicy, QosPreempt
from corral.sched.priority import pass_priorities
from corral.sched.snapshot import INFINITE_TIME, NodeView, RunningView
from corral.store.base import UsageRecord

log = logging.getLogger("corral.controller")
USAGE_SAVE_S = 5.0  # ended jobs' usage is written at most this often


def node_view(n: Node) -> NodeView:
    return NodeView(n.name, n.cpus, n.real_memory, n.gpus, n.free_cpus, n.free_mem_mb,
                    n.free_gpu_ids, n.usable, n.weight, tuple(n.partitions),
                    tuple(n.features), n.job_count, n.exclusive_job is not None,
                    n.gpu_type, n.tmp_disk)


def running_view(j: Job, now: float) -> RunningView:
    end = (j.start_time or now) + j.time_limit if j.time_limit > 0 else INFINITE_TIME
    return RunningView(j.job_id, end, j.alloc, j.exclusive, j.array_job_id,
                       j.qos or "normal", j.partition, j.start_time or now,
                       j.kill_reason in PREEMPT_KILLS)


def _base_mode(mode: str) -> str:
    """A QoS's PreemptMode without GANG/WITHIN ("requeue,gang" is "requeue")."""
    base = [m for m in mode.split(",") if m and m not in ("gang", "within")]
    return base[0] if base else "cluster"


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


class Scheduling(Launching):
    _usage_dirty = False
    _usage_saved = 0.0
    _usage_spans: list[fs.UsageSpan]
    last_sched_duration = 0.0
    sched_passes = 0

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.cadence = Cadence(CadenceParams.from_config(self.config))
        self.pass_driver: PassDriver = LoopPasses()

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

    # ---- accounting policy: the pass's view, usage charging -------------------------
    def policy_snapshot(self, now: float) -> PolicySnapshot | None:
        """What the pass needs of accounting, or None when nothing uses it (no limits
        enforced, no fairshare weight): existing clusters pay nothing."""
        limits = "limits" in self.enforce
        w = self.sched_params.priority.weights
        if not limits and not w.fairshare and not w.assoc:
            return None
        pending: dict[int, object] = {}
        running: list[tuple[object, float | None]] = []
        if limits:
            pending = {j.job_id: job_request(j) for j in self.pending.values() if not j.held}
            for j in self.running.values():
                left = None
                if j.time_limit > 0 and j.start_time is not None:
                    left = max(0.0, (j.start_time + j.time_limit - now) / 60)
                running.append((job_request(j), left))
        return PolicySnapshot(
            db=self.accounts.db, cluster=self.cluster_name, enforce=self.enforce,
            pending=pending, running=tuple(running),  # type: ignore[arg-type]
            used_tres_mins=self._used_minutes() if limits else {},
            usage=self.usage, fair_tree=self.fair_params.fair_tree,
            part_qos=self.partition_qos())

    def partition_qos(self) -> dict[str, str]:
        """Each partition's QOS= (the partition QoS whose limits its jobs meet)."""
        return {p.name: p.qos for p in self.partitions.values() if p.qos}

    def _used_minutes(self) -> dict[int | str, dict[str, float]]:
        """GrpTRESMins' usage: each association's including everything below it (as
        Slurm charges parents), and each QoS's."""
        tree = fs.tree_usage(self.accounts.db, self.cluster_name, self.usage.assoc)
        used: dict[int | str, fs.Usage] = {}
        for name, q in self.usage.qos.items():
            used[name] = q
        for aid, u in tree.items():
            used[aid] = u
        return fs.tres_minutes(used)

    def _running_for_usage(self, j: Job, index: AssocIndex | None = None) -> fs.RunningJob | None:
        a = (index or self.accounts.db).job_assoc(self.cluster_name, j.user, j.account,
                                                  j.partition)
        if a is None or j.start_time is None:
            return None
        tres = dict(job_request(j).tres)
        return fs.RunningJob(j.job_id, a.id, j.qos or None, j.start_time, tres)

    def _usage_factor(self) -> dict[str, float]:
        return {name: q.usage_factor for name, q in self.accounts.db.qos.items()}

    def charge_usage(self, now: float, force: bool = False) -> None:
        """Every PriorityCalcPeriod: decay the usage and charge the running jobs (per
        TRES, TRESBillingWeights, QoS UsageFactor); persisted so a restart keeps it."""
        if not force and now - self.usage.last_decay < self.calc_period_s \
                and self.usage.last_decay:
            return
        index = AssocIndex(self.accounts.db)  # O(1) lookups for every running job
        running = [r for r in (self._running_for_usage(j, index) for j in self.running.values())
                   if r is not None]
        self.usage = fs.advance(self.usage, now, running, self.fair_params,
                                usage_factor=self._usage_factor())
        self._save_usage()

    def _save_usage(self) -> None:
        self._usage_dirty = False
        self.writer.usage(self.usage.to_dict(), [])  # committed by the writer, off the loop

    def accounting_on(self) -> bool:
        """Whether anything reads usage: fairshare or enforced limits."""
        return bool(self.sched_params.priority.weights.fairshare) or "limits" in self.enforce

    def usage_on_event(self, ev: JobEvent) -> None:
        """A job that ended is charged for its last stretch at once, so the next pass's
        fairshare sees it; the state and the hourly records are written in batches (at
        most every few seconds: a flood of short jobs must not cost a write each)."""
        if ev.kind is not JobEventKind.ENDED or ev.job.start_time is None \
                or not self.accounting_on():
            return
        r = self._running_for_usage(ev.job)
        if r is None:
            return
        end = ev.job.end_time or ev.time
        fs.charge_ended(self.usage, r, end, self.fair_params, self._usage_factor())
        self._usage_spans.append(fs.UsageSpan(
            r.assoc_id, r.start_time, end, r.tres,
            fs.billing(r.tres, self.fair_params.billing_weights, self.fair_params.max_tres)))
        self._usage_dirty = True

    def flush_usage(self, now: float, force: bool = False) -> None:
        if not self._usage_dirty or (not force and now - self._usage_saved < USAGE_SAVE_S):
            return
        spans, self._usage_spans = self._usage_spans, []
        # each job's whole run, by hour, for usage reports
        self.writer.usage(None, [UsageRecord(c, a, h, t, b) for c, a, h, t, b
                                 in fs.hourly_records(self.cluster_name, spans)])
        self._save_usage()
        self._usage_saved = now

    def preempt_policy(self) -> PreemptPolicy | None:
        """PreemptType/PreemptMode of slurm.conf, the partitions' PriorityTier and
        PreemptMode, the QoS's Preempt/PreemptMode/GraceTime/PreemptExemptTime; None
        when preemption is off."""
        kind, mode, exempt = preempt_settings(self.config.options)
        if kind == "preempt/none" or mode == "off":
            return None
        qos = {name: QosPreempt(frozenset(q.preempt), _base_mode(q.preempt_mode), q.grace_time,
                                q.preempt_exempt_time)
               for name, q in self.accounts.db.qos.items()}
        return PreemptPolicy(kind, mode, exempt, qos,
                             {p.name: p.preempt_mode for p in self.partitions.values()},
                             {p.name: p.priority_tier for p in self.partitions.values()})

    def pass_params(self) -> SchedParams:
        """slurm.conf's parameters plus what sacctmgr sets: QoS priorities (for
        PriorityWeightQOS, normalised by the largest) and preemption settings."""
        params = self.sched_params
        policy = self.preempt_policy()
        if policy is not None:
            params = replace(params, preempt=policy)
        if not params.priority.weights.qos:
            return params
        qos = {name: q.priority for name, q in self.accounts.db.qos.items()}
        if qos == params.priority.qos_priority:
            return params
        return replace(params, priority=replace(params.priority, qos_priority=qos))

    def snapshot(self, now: float) -> ClusterSnapshot:
        return ClusterSnapshot(
            now=now,
            nodes={n.name: node_view(n) for n in self.nodes.values()},
            partitions=self.partitions,
            running=[running_view(j, now) for j in self.running.values()],
            pending=list(self.pending.values()),
            jobs=list(self.jobs.values()),
            gone=self.gone,
            params=self.pass_params(),
            policy=self.policy_snapshot(now),
            reservations=scheduling_reservations(self, now),
        )

    def schedule_pass(self, now: float) -> Decision | None:
        if self.accounting_on():
            self.charge_usage(now)
            self.flush_usage(now)
        if not self.pending:
            return None
        decision = run_pass(self.snapshot(now))
        self.apply(decision, now)
        return decision

    def apply(self, decision: Decision, now: float) -> None:
        pending = self.pending
        # Priority and reasons are derived each pass: kept in memory, not written out.
        for job_id, prio in decision.priorities.items():
            job = pending.get(job_id)
            if job is not None:
                job.priority = prio
                if not job.held:
                    job.last_sched_eval = now
        for job_id in decision.became_eligible:
            job = pending.get(job_id)
            if job is not None and job.eligible_time is None:
                job.eligible_time = now  # written once: a restart must not reset its age
                self.mark(job)
        more = False
        for start in decision.starts:
            found = pending.get(start.job_id)
            if found is None:
                continue
            job = found
            if start.array_task_id is not None:
                if not job.array_tasks or start.array_task_id not in job.array_tasks:
                    continue
                job = self.split_array_task(found, now, start.array_task_id)
                more = more or bool(found.array_tasks)
            if start.partition:  # -p a,b: it runs in the partition that could start it
                job.partition = start.partition
            self.start_job(job, start.alloc, now)
        for job_id, why in decision.reasons.items():
            waiting = pending.get(job_id)
            if waiting is not None:
                waiting.reason = why.text()
                self.pending_reasons[job_id] = why
        for job_id, text in decision.dependency_texts.items():
            waiting = pending.get(job_id)
            if waiting is not None:
                waiting.dependency_text = text
        for job_id, (start_at, names) in decision.planned.items():
            waiting = pending.get(job_id)
            if waiting is not None:
                waiting.sched_start = start_at
                waiting.sched_nodes = list(names)
        for p in decision.preemptions:
            self.apply_preemption(p, now)
        if more:  # array records with tasks left get another pass
            self.request_schedule()

    def apply_preemption(self, p: Preemption, now: float) -> None:
        """Stop the victims of a preemptor placed in this pass (each in its mode, after
        its QoS's GraceTime; see JobLifecycle.preempt_job); the preemptor waits."""
        policy = self.pass_params().preempt
        if policy is None:
            return
        for vid in p.victims:
            victim = self.running.get(vid)
            if victim is None or victim.kill_reason is not None \
                    or victim.state != JobState.RUNNING:
                continue  # already being stopped (preempted, cancelled, timed out)
            qos = victim.qos or "normal"
            log.info("job %d preempts job %d", p.job_id, vid)
            self.preempt_job(victim, now, policy.mode_of(qos, victim.partition),
                             policy.grace_of(qos))

    def priority_now(self, job: Job) -> int:
        """The job's priority as the next pass will compute it (for a new or changed job)."""
        now = self.clock()
        light = self.policy_snapshot_light()
        return pass_priorities([job], now, self.pass_params().priority, self.partitions,
                               fairshare_of(light, self.sched_params),
                               assoc_factor_of(light, self.sched_params))[job.job_id]

    def policy_snapshot_light(self) -> PolicySnapshot | None:
        """Enough of the policy for one job's priority (fairshare only)."""
        w = self.sched_params.priority.weights
        if not (w.fairshare or w.assoc):
            return None
        return PolicySnapshot(db=self.accounts.db, cluster=self.cluster_name,
                              usage=self.usage, fair_tree=self.fair_params.fair_tree)
