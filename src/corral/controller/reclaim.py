"""Idle-GPU reclaim on the controller: the agents' GPU samples feed an idle-since tracker
(model/reclaim.py), and the periodic duties notice the owners of idle jobs and, later, requeue
or cancel them as the policy says (interactive allocations first).

A notice goes where `scontrol notify`'s does (the job's salloc/srun, or its batch step's
output) and into the job's Comment (scontrol show job, sacct).  A reclaim goes through the
controller's own kill and requeue transitions (no user's authority is checked: the policy is
the operator's), is written into the Comment, the controller's log and the counters behind
`corral_gpu_hours_reclaimed_total`.  The tracking lives in memory: a controller restart
starts every idle spell anew."""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from corral.model.job import Job, JobState
from corral.model.reclaim import (
    ACT,
    NOTICE,
    IdleTracker,
    ReclaimPolicy,
    ReclaimPolicyError,
    gpu_idle,
    parse_policy,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

    from corral.controller.state import Controller

log = logging.getLogger("corral.controller")

COMMENT_TAG = "idle-gpu:"
NOTICES_KEPT = 10  # as `scontrol notify` keeps them
EVENTS_KEPT = 1000


@dataclass(frozen=True, slots=True)
class ReclaimEvent:
    job_id: int
    user: str
    account: str
    action: str  # "requeue" or "cancel"
    gpus: int
    idle_since: float
    time: float

    @property
    def gpu_hours(self) -> float:
        return self.gpus * max(0.0, self.time - self.idle_since) / 3600.0


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def _gpu_nodes(job: Job) -> list[str]:
    return [a.node for a in job.alloc if a.gpus]


class Reclaimer:
    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.tracker = IdleTracker()
        self.events: deque[ReclaimEvent] = deque(maxlen=EVENTS_KEPT)  # the latest, for a look
        # counters derived from the events: GPU-hours per (user, account), reclaims per
        # (user, account, action)
        self.hours: dict[tuple[str, str], float] = {}
        self.reclaims: Counter[tuple[str, str, str]] = Counter()
        self.notices: Counter[tuple[str, str]] = Counter()  # (user, account)
        self._raw: tuple[str, ...] | None = None
        self._policy: ReclaimPolicy | None = None

    # ---- the policy, read again when the configuration changes (reconfigure) ------------
    def policy(self) -> ReclaimPolicy | None:
        from corral.model.reclaim import KEYS

        opts = self.ctl.config.options
        raw = tuple(opts.get(k, "") for k in KEYS)
        if raw != self._raw:
            self._raw = raw
            try:
                self._policy = parse_policy(opts)
            except ReclaimPolicyError as e:  # parse_config refuses it; a reconfigure may not
                log.error("idle-GPU reclaim off: %s", e)
                self._policy = None
        return self._policy

    # ---- from the usage samples (controller/usage.py) -----------------------------------
    def observe(self, node: str, samples: list[dict[str, Any]], now: float,
                jobs: Iterable[Job] | None = None) -> None:
        """A node's GPU sample: which of its jobs (`jobs`: those holding GPUs there, when
        the caller knows them; else every running job) have all their GPUs there idle."""
        if self.policy() is None:
            return
        by_index = {g["index"]: g for g in samples}
        for job in self.ctl.running.values() if jobs is None else jobs:
            if job.state != JobState.RUNNING:
                continue
            held = [i for a in job.alloc if a.node == node for i in a.gpus]
            if not held:
                continue
            idle = all(i in by_index and gpu_idle(by_index[i]["util"], by_index[i]["processes"])
                       for i in held)
            self.tracker.observe(job.job_id, node, idle, now)

    # ---- the periodic duty (controller/duties.py) ---------------------------------------
    def tick(self, now: float) -> None:
        policy = self.policy()
        if policy is None:
            return
        running = self.ctl.running
        for job_id in self.tracker.tracked():
            job = running.get(job_id)
            if job is None or job.state != JobState.RUNNING:
                self.tracker.forget(job_id)
        # interactive allocations (salloc, srun --pty: no batch script) first
        jobs = sorted((running[j] for j in self.tracker.tracked()),
                      key=lambda j: (j.batch, j.job_id))
        for job in jobs:
            decision = self.tracker.decide(job.job_id, _gpu_nodes(job), now, policy,
                                           interactive=not job.batch)
            if decision == NOTICE:
                self._notice(job, policy, now)
            elif decision == ACT:
                self._act(job, policy, now)

    def _set_comment(self, job: Job, text: str) -> None:
        """The user's own comment stays; Corral's note follows it, replacing an older one."""
        own = (job.comment or "").split(COMMENT_TAG)[0].rstrip("; ")
        job.comment = f"{own}; {COMMENT_TAG} {text}" if own else f"{COMMENT_TAG} {text}"

    def _notice(self, job: Job, policy: ReclaimPolicy, now: float) -> None:
        since = self.tracker.idle_since(job.job_id, _gpu_nodes(job)) or now
        action = self._effective_action(job, policy)
        due = now + policy.grace(not job.batch)
        then = (f"it will be {'requeued' if action == 'requeue' else 'cancelled'} at "
                f"{_stamp(due)} unless they are used" if action != "none"
                else "no action will be taken")
        text = (f"Corral: the {job.alloc_gpus} GPU(s) of job {job.job_id} have shown no "
                f"utilisation and no process since {_stamp(since)}; {then}")
        self.tracker.mark_noticed(job.job_id, now)
        self.notices[(job.user, job.account or "")] += 1
        job.notices = [*job.notices[-(NOTICES_KEPT - 1):], text]
        self._set_comment(job, f"GPUs idle since {_stamp(since)}, noticed {_stamp(now)}"
                          + (f", {action} due {_stamp(due)}" if action != "none" else ""))
        log.info("job %d (user %s): GPUs idle since %s, owner noticed (idle-GPU reclaim)",
                 job.job_id, job.user, _stamp(since))
        self.ctl._send_control(job, {"op": "notify", "message": text})
        self.ctl.notify("notified", job)
        self.ctl.mark(job)

    @staticmethod
    def _effective_action(job: Job, policy: ReclaimPolicy) -> str:
        action = policy.action_for(job.partition, job.qos)
        if action == "requeue" and (not job.batch or not job.requeue):
            return "cancel"  # an allocation cannot be requeued, nor a --no-requeue job
        return action

    def _act(self, job: Job, policy: ReclaimPolicy, now: float) -> None:
        action = self._effective_action(job, policy)
        if action == "none":
            self.tracker.mark_left(job.job_id)
            return
        since = self.tracker.idle_since(job.job_id, _gpu_nodes(job)) or now
        event = ReclaimEvent(job.job_id, job.user, job.account or "", action, job.alloc_gpus,
                             since, now)
        self.tracker.forget(job.job_id)
        self.events.append(event)
        key = (event.user, event.account)
        self.hours[key] = self.hours.get(key, 0.0) + event.gpu_hours
        self.reclaims[(*key, action)] += 1
        done = "requeued" if action == "requeue" else "cancelled"
        self._set_comment(job, f"{done} {_stamp(now)} after its GPUs idled since "
                          f"{_stamp(since)} ({event.gpu_hours:.2f} GPU-hours reclaimed)")
        log.warning("job %d (user %s, account %s): %s by idle-GPU reclaim, %d GPU(s) idle "
                    "since %s, %.2f GPU-hours reclaimed", job.job_id, job.user, job.account,
                    done, job.alloc_gpus, _stamp(since), event.gpu_hours)
        ctl = self.ctl
        # the lifecycle's internal transitions, the ones scancel and requeue use after
        # their user checks (and preemption after the pass)
        if action == "requeue":
            ctl.stop_running(job, "REQUEUE", "requeue", now)
        elif job.batch:
            job.cancelled_by = 0
            ctl.stop_running(job, "CANCELLED", "cancel", now)
        else:
            job.cancelled_by = 0
            ctl.end_allocation(job, "CANCELLED")
        ctl.mark(job)
        ctl.request_schedule()


def reclaimer(ctl: Controller) -> Reclaimer:
    """The controller's one Reclaimer (made at first use)."""
    found = getattr(ctl, "idle_gpu_reclaimer", None)
    if found is None:
        found = Reclaimer(ctl)
        ctl.idle_gpu_reclaimer = found  # type: ignore[attr-defined]
    return found  # type: ignore[no-any-return]


def tick(ctl: Controller, now: float) -> None:
    reclaimer(ctl).tick(now)
