"""The scheduling pass, a part of the core: the `ClusterSnapshot` the pure pipeline
(sched.pipeline.run_pass) decides on, and applying its `Decision` back to the job table.

No policy lives here: what starts where, in which order, why the others wait and who is
preempted is decided by the pipeline; this module turns the core's memory into a snapshot
and the decision into transitions and effects.  When passes run is the cadence's business
(controller/cadence.py), in real time in the shell and in virtual time in the simulator."""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from operator import attrgetter
from typing import TYPE_CHECKING

from corral.controller.cluster import alloc_without
from corral.controller.core.followed import MarkCursor
from corral.controller.core.lifecycle import PREEMPT_KILLS
from corral.controller.jobs import JobEvent, JobEventKind
from corral.model.config import preempt_settings
from corral.model.job import Job, JobState
from corral.model.node import Node
from corral.sched.backfill import BackfillMemo
from corral.sched.limits import PolicySnapshot
from corral.sched.limits_check import PendingRequests, job_request
from corral.sched.pipeline import (
    ClusterSnapshot,
    Decision,
    Preemption,
    SchedParams,
    assoc_factor_of,
    fairshare_of,
    run_pass,
)
from corral.sched.predict import RuntimeHistory, counts, expected_end
from corral.sched.preempt import PreemptPolicy, QosPreempt
from corral.sched.priority import pass_priorities
from corral.sched.snapshot import INFINITE_TIME, NodeView, RunningView

if TYPE_CHECKING:
    from corral.controller.core.core import Core

log = logging.getLogger("corral.controller")


def node_view(n: Node) -> NodeView:
    return NodeView(n.name, n.cpus, n.real_memory, n.gpus, n.free_cpus, n.free_mem_mb,
                    n.free_gpu_ids, n.usable, n.weight, tuple(n.partitions),
                    tuple(n.features), n.job_count, n.exclusive_job is not None,
                    n.gpu_type, n.tmp_disk)


# what `node_view` reads of a node (the three lists last)
_NODE_VIEW_OF = attrgetter("name", "cpus", "real_memory", "gpus", "alloc_cpus", "alloc_mem",
                           "job_count", "exclusive_job", "admin_state", "responding",
                           "weight", "gpu_type", "tmp_disk", "alloc_gpus", "partitions",
                           "features")


def running_view(j: Job, now: float, recent_mean: float | None = None) -> RunningView:
    """A running job as the pass sees it; with `recent_mean` (its user's recent run times,
    sched/predict.py) it is expected to end when predicted, not at its limit."""
    start = j.start_time or now
    end = expected_end(start, float(j.time_limit), recent_mean, now) if j.time_limit > 0 \
        else INFINITE_TIME
    return RunningView(j.job_id, end, j.alloc, j.exclusive, j.array_job_id,
                       j.qos or "normal", j.partition, j.start_time or now,
                       j.kill_reason in PREEMPT_KILLS)


def _base_mode(mode: str) -> str:
    """A QoS's PreemptMode without GANG/WITHIN ("requeue,gang" is "requeue")."""
    base = [m for m in mode.split(",") if m and m not in ("gang", "within")]
    return base[0] if base else "cluster"


class Passes:
    def __init__(self, core: Core) -> None:
        self.core = core
        # run times of each user's recent jobs, for corral_predict_runtime (in memory: a
        # restarted controller plans with time limits until its users' jobs end again)
        params = core.settings.sched_params
        self.history = RuntimeHistory(params.levers.history_depth(params.predict_runtime))
        core.table.subscribe(self.on_event)
        # told each pass's plan {job id: (start, nodes)} (controller.estimates, via metrics)
        self.on_planned: Callable[[dict[int, tuple[float, list[str]]]], None] | None = None
        # the last pass's view of each node and running job, with what it was made from:
        # a view is made again only when that changed (between two passes few do)
        self._node_views: dict[str, tuple[Node, tuple[object, ...], NodeView]] = {}
        self._running_views: dict[int, RunningView] = {}
        self._unstarted: list[int] = []  # running jobs without a start time (the last pass)
        self._running_marks = MarkCursor(core.table)
        # what backfill keeps from one pass to the next (its nodes, per scope)
        self.backfill_memo = BackfillMemo()
        # the simulator reads only the passes' starts (ClusterSnapshot.starts_only)
        self.starts_only = False

    def on_event(self, ev: JobEvent) -> None:
        """An ended job's run time joins its user's history (when it finished on its own)."""
        if ev.kind is JobEventKind.ENDED and self.history.depth > 0 \
                and ev.job.start_time is not None and counts(ev.new.value):
            self.history.record(ev.job.user, ev.job.run_seconds(ev.time))

    # ---- the pass ------------------------------------------------------------------
    def run(self, now: float, timer: Callable[[], float] | None = None) -> Decision | None:
        """One pass: the pipeline run on a snapshot, its decision applied.  (Usage is
        charged by the periodic duties, `UsageBook.tick`, as Slurm decays it in a thread of
        its own: a pass never pays for it.)"""
        if not self.core.pending:
            return None
        # The cyclic collector paused for the pass: its objects live until it ends (the
        # snapshot, the pipeline's working state), so each collection their allocations
        # trigger (hundreds in a 10,000-job pass, full ones among them) scans them for
        # nothing; reference counting frees them when the pass ends as before.
        paused = gc.isenabled()
        if paused:
            gc.disable()
        try:
            decision = run_pass(self.snapshot(now), timer, self.backfill_memo)
            self.apply(decision, now)
        finally:
            if paused:
                gc.enable()
        return decision

    def snapshot(self, now: float) -> ClusterSnapshot:
        core = self.core
        params = self.params()
        history = self.history
        history.resize(params.levers.history_depth(params.predict_runtime))
        if history.depth > 0 and history.recent:  # EASY++ (sched/predict.py)
            mean = history.mean
            plan = params.predict_runtime > 0  # [quality] else for backfill's order alone
            running = [running_view(j, now, mean(j.user) if plan else None)
                       for j in core.running.values()]
            predicted = history.means(j.user for j in core.pending.values())
        else:
            running = self.running_views(now)
            predicted = {}
        snap = ClusterSnapshot(
            now=now,
            nodes=self.node_views(),
            partitions=core.partitions,
            running=running,
            pending=list(core.pending.values()),
            jobs=list(core.jobs.values()),
            gone=core.gone,
            params=params,
            policy=self.policy_snapshot(now),
            reservations=core.reservations(now),
            predicted_runtime=predicted,
            starts_only=self.starts_only,
        )
        if core.cluster.loans:
            self._lent_views(snap.running, now)
        return snap

    def node_views(self) -> dict[str, NodeView]:
        """`node_view` of every node, the last pass's view of a node reused when nothing
        it was made from changed."""
        cache = self._node_views
        out: dict[str, NodeView] = {}
        made_of = _NODE_VIEW_OF
        for n in self.core.nodes.values():
            key = made_of(n)
            hit = cache.get(n.name)
            if hit is not None and hit[0] is n and hit[1] == key:
                view = hit[2]
            else:
                view = node_view(n)
                # (the lists copied: a node's own lists change in place)
                cache[n.name] = (n, (*key[:-3], *map(list, key[-3:])), view)
            out[n.name] = view
        if len(cache) > len(out):  # nodes gone (reconfigured)
            for name in [name for name in cache if name not in out]:
                del cache[name]
        return out

    def running_views(self, now: float) -> list[RunningView]:
        """`running_view` of every running job (planned at its time limit), in the job
        table's order; the last pass's view of a job is reused unless the job was marked
        since (`JobTable.mark`: every change of what a view is made of marks its job)."""
        cache = self._running_views
        changed = self._running_marks.changed()
        if changed is None:
            cache.clear()
        else:
            pop = cache.pop
            for job_id in changed:
                pop(job_id, None)
            for job_id in self._unstarted:  # (planned from the `now` of their pass)
                pop(job_id, None)
        running = self.core.running
        missing = [job_id for job_id in running if job_id not in cache]
        if missing:
            unstarted = self._unstarted = []
            for job_id in missing:
                j = running[job_id]
                cache[job_id] = running_view(j, now)
                if not j.start_time:
                    unstarted.append(job_id)
        return list(map(cache.__getitem__, running))

    def _lent_views(self, running: list[RunningView], now: float) -> None:
        """Preemption by suspension, as the pass must see it: a suspended victim holds its
        resources until its preemptor's end plus what is left of its own time limit, and
        may not be preempted again; the preemptor releases at its end only what it does not
        borrow (what it borrows is the victim's again)."""
        core = self.core
        loans = core.cluster.loans
        ends = {r.job_id: r.end_time for r in running}
        for i, r in enumerate(running):
            job = core.running.get(r.job_id)
            if job is None:
                continue
            borrowed = loans.get(r.job_id)
            if borrowed:
                lent = [p for parts in borrowed.values() for p in parts]
                r = running[i] = replace(r, alloc=[
                    alloc_without(a, [p for p in lent if p.node == a.node]) for a in r.alloc])
            if job.suspended_for in loans:  # (or resumed by hand beside its preemptor)
                until = ends.get(job.suspended_for, INFINITE_TIME)
                left = job.time_limit - job.run_seconds(now) \
                    if job.time_limit > 0 else INFINITE_TIME
                end = INFINITE_TIME if INFINITE_TIME in (until, left) \
                    else until + max(0.0, left)
                running[i] = replace(r, end_time=end, lent=True)

    def apply(self, decision: Decision, now: float) -> None:
        core = self.core
        pending = core.pending
        mark = core.table.mark  # what squeue shows of a job changed (controller/answers.py)
        # Priority and reasons are derived each pass: kept in memory, not written out.
        get = pending.get
        for job_id, prio in decision.priorities.items():
            job = get(job_id)
            if job is not None:
                if job.priority != prio:
                    mark(job_id)
                    job.priority = prio
                if not job.held:
                    job.last_sched_eval = now
        for job_id in decision.became_eligible:
            job = pending.get(job_id)
            if job is not None and job.eligible_time is None:
                job.eligible_time = now  # written once: a restart must not reset its age
                core.out.job(job)
        more = False
        for start in decision.starts:
            found = pending.get(start.job_id)
            if found is None:
                continue
            job = found
            if start.array_task_id is not None:
                if not job.array_tasks or start.array_task_id not in job.array_tasks:
                    continue
                job = core.split_array_task(found, now, start.array_task_id)
                more = more or bool(found.array_tasks)
            # -p a,b: it runs in the partition that could start it (start.partition)
            core.lifecycle.start_job(job, start.alloc, now, start.partition)
        texts: dict[int, str] = {}  # (by reason: most jobs share a plain one)
        typed = core.pending_reasons
        for job_id, why in decision.reasons.items():
            waiting = pending.get(job_id)
            if waiting is not None:
                text = texts.get(id(why))
                if text is None:
                    text = texts[id(why)] = why.text()
                if waiting.reason != text:
                    mark(job_id)
                    waiting.reason = text
                typed[job_id] = why
        for job_id, text in decision.dependency_texts.items():
            waiting = pending.get(job_id)
            if waiting is not None:
                if waiting.dependency_text != text:
                    mark(job_id)
                waiting.dependency_text = text
        for job_id, (start_at, names) in decision.planned.items():
            waiting = pending.get(job_id)
            if waiting is not None:
                if waiting.sched_start != start_at or waiting.sched_nodes != list(names):
                    mark(job_id)
                waiting.sched_start = start_at
                waiting.sched_nodes = list(names)
        if self.on_planned is not None:
            self.on_planned(decision.planned)
        for p in decision.preemptions:
            self.apply_preemption(p, now)
        if more:  # array records with tasks left get another pass
            core.out.schedule()

    def apply_preemption(self, p: Preemption, now: float) -> None:
        """Stop the victims of a preemptor placed in this pass, each in its mode.  CANCEL
        and REQUEUE victims are killed after their QoS's GraceTime (Lifecycle.preempt_job)
        and the preemptor waits for their resources.  When every victim is to be
        suspended (SUSPEND), they are suspended now and the preemptor starts at once on
        `p.alloc`, on resources they lend it until it ends; with victims of both kinds,
        the others are stopped first and the suspensions wait for a later pass."""
        policy = self.params().preempt
        if policy is None:
            return
        core = self.core
        suspend: list[Job] = []
        others = False
        for vid in p.victims:
            victim = core.running.get(vid)
            if victim is None or victim.kill_reason is not None \
                    or victim.state != JobState.RUNNING:
                others = True  # already being stopped (preempted, cancelled, timed out)
                continue
            qos = victim.qos or "normal"
            mode = policy.mode_of(qos, victim.partition)
            if mode == "suspend":
                suspend.append(victim)
                continue
            others = True
            log.info("job %d preempts job %d", p.job_id, vid)
            core.lifecycle.preempt_job(victim, now, mode, policy.grace_of(qos))
        if suspend and not others:
            self._suspend_for(p, suspend, now)

    def _suspend_for(self, p: Preemption, victims: list[Job], now: float) -> None:
        core = self.core
        job = core.pending.get(p.job_id)
        if job is None:
            return
        if job.array_tasks is not None:  # the array's next task is the one placed
            if not job.array_tasks:
                return
            job = core.split_array_task(job, now)
            core.out.schedule()  # its other tasks get another pass
        if "," in job.partition:  # -p a,b: a partition holding every node it gets
            names = {a.node for a in p.alloc}
            job.partition = next(
                (part for part in job.partition.split(",") if part in core.partitions
                 and names <= set(core.partitions[part].nodes)), job.partition.split(",")[0])
        for victim in sorted(victims, key=lambda j: j.job_id):
            log.info("job %d preempts job %d (suspended)", job.job_id, victim.job_id)
            core.lifecycle.suspend_for(victim, job.job_id, p.alloc, now)
        core.lifecycle.start_job(job, p.alloc, now)

    # ---- the pass's parameters -----------------------------------------------------
    def preempt_policy(self) -> PreemptPolicy | None:
        """PreemptType/PreemptMode of slurm.conf, the partitions' PriorityTier and
        PreemptMode, the QoS's Preempt/PreemptMode/GraceTime/PreemptExemptTime; None
        when preemption is off."""
        core = self.core
        kind, mode, exempt = preempt_settings(core.config.options)
        if kind == "preempt/none" or mode == "off":
            return None
        qos = {name: QosPreempt(frozenset(q.preempt), _base_mode(q.preempt_mode), q.grace_time,
                                q.preempt_exempt_time)
               for name, q in core.accounts.db.qos.items()}
        return PreemptPolicy(kind, mode, exempt, qos,
                             {p.name: p.preempt_mode for p in core.partitions.values()},
                             {p.name: p.priority_tier for p in core.partitions.values()})

    def params(self) -> SchedParams:
        """slurm.conf's parameters plus what sacctmgr sets: QoS priorities (for
        PriorityWeightQOS, normalised by the largest) and preemption settings."""
        params = self.core.settings.sched_params
        policy = self.preempt_policy()
        if policy is not None:
            params = replace(params, preempt=policy)
        if not params.priority.weights.qos:
            return params
        qos = {name: q.priority for name, q in self.core.accounts.db.qos.items()}
        if qos == params.priority.qos_priority:
            return params
        return replace(params, priority=replace(params.priority, qos_priority=qos))

    def partition_qos(self) -> dict[str, str]:
        """Each partition's QOS= (the partition QoS whose limits its jobs meet)."""
        return {p.name: p.qos for p in self.core.partitions.values() if p.qos}

    def policy_snapshot(self, now: float) -> PolicySnapshot | None:
        """What the pass needs of accounting, or None when nothing uses it (no limits
        enforced, no fairshare weight): existing clusters pay nothing."""
        core = self.core
        s = core.settings
        limits = "limits" in s.enforce
        w = s.sched_params.priority.weights
        if not limits and not w.fairshare and not w.assoc:
            return None
        pending: Mapping[int, object] = {}
        running: list[tuple[object, float | None]] = []
        if limits:
            # (made as the limits gate asks: a copy of the table, the jobs read in the pass)
            pending = PendingRequests(dict(core.pending))
            for j in core.running.values():
                left = None
                if j.time_limit > 0 and j.start_time is not None:
                    left = max(0.0, (j.start_time + j.time_limit - now) / 60)
                running.append((job_request(j), left))
        return PolicySnapshot(
            db=core.accounts.db, cluster=s.cluster_name, enforce=s.enforce,
            pending=pending, running=tuple(running),  # type: ignore[arg-type]
            used_tres_mins=core.usage.used_minutes() if limits else {},
            usage=core.usage.state, fair_tree=s.fair_params.fair_tree,
            part_qos=self.partition_qos())

    def policy_snapshot_light(self) -> PolicySnapshot | None:
        """Enough of the policy for one job's priority (fairshare only)."""
        s = self.core.settings
        w = s.sched_params.priority.weights
        if not (w.fairshare or w.assoc):
            return None
        return PolicySnapshot(db=self.core.accounts.db, cluster=s.cluster_name,
                              usage=self.core.usage.state, fair_tree=s.fair_params.fair_tree)

    def priority_now(self, job: Job, now: float) -> int:
        """The job's priority as the next pass will compute it (for a new or changed job)."""
        light = self.policy_snapshot_light()
        sp = self.core.settings.sched_params
        return pass_priorities([job], now, self.params().priority, self.core.partitions,
                               fairshare_of(light, sp), assoc_factor_of(light, sp))[job.job_id]
