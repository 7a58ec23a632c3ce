"""Fairshare usage, a part of the core: decaying it and charging running jobs every
PriorityCalcPeriod, charging an ended job at once, and emitting what is to be kept
(the state, and each job's run by hour for usage reports)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral.controller.core.effects import PersistUsage
from corral.controller.jobs import JobEvent, JobEventKind
from corral.model.assoc import AssocIndex
from corral.model.job import Job
from corral.sched import fairshare as fs
from corral.sched.limits_check import job_request
from corral.store.base import UsageRecord

if TYPE_CHECKING:
    from corral.controller.core.core import Core

USAGE_SAVE_S = 5.0  # ended jobs' usage is written at most this often


class UsageBook:
    def __init__(self, core: Core, state: fs.UsageState) -> None:
        self.core = core
        self.state = state
        self._spans: list[fs.UsageSpan] = []
        self._dirty = False
        self._saved = 0.0

    def accounting_on(self) -> bool:
        """Whether anything reads usage: fairshare or enforced limits."""
        s = self.core.settings
        return bool(s.sched_params.priority.weights.fairshare) or "limits" in s.enforce

    def usage_factor(self) -> dict[str, float]:
        return {name: q.usage_factor for name, q in self.core.accounts.db.qos.items()}

    def running_job(self, j: Job, index: AssocIndex | None = None) -> fs.RunningJob | None:
        core = self.core
        a = (index or core.accounts.db).job_assoc(core.settings.cluster_name, j.user,
                                                  j.account, j.partition)
        if a is None or j.start_time is None:
            return None
        tres = dict(job_request(j).tres)
        return fs.RunningJob(j.job_id, a.id, j.qos or None, j.start_time, tres)

    def used_minutes(self) -> dict[int | str, dict[str, float]]:
        """GrpTRESMins' usage: each association's including everything below it (as
        Slurm charges parents), and each QoS's."""
        core = self.core
        tree = fs.tree_usage(core.accounts.db, core.settings.cluster_name, self.state.assoc)
        used: dict[int | str, fs.Usage] = {}
        for name, q in self.state.qos.items():
            used[name] = q
        for aid, u in tree.items():
            used[aid] = u
        return fs.tres_minutes(used)

    def tick(self, now: float) -> None:
        """The periodic duty: charge and decay when PriorityCalcPeriod says so, write what
        ended jobs added (at most every few seconds)."""
        if self.accounting_on():
            self.charge(now)
            self.flush(now)

    def charge(self, now: float, force: bool = False) -> None:
        """Every PriorityCalcPeriod: decay the usage and charge the running jobs (per
        TRES, TRESBillingWeights, QoS UsageFactor); persisted so a restart keeps it."""
        s = self.core.settings
        if not force and now - self.state.last_decay < s.calc_period_s \
                and self.state.last_decay:
            return
        index = AssocIndex(self.core.accounts.db)  # O(1) lookups for every running job
        running = [r for r in (self.running_job(j, index) for j in self.core.running.values())
                   if r is not None]
        self.state = fs.advance(self.state, now, running, s.fair_params,
                                usage_factor=self.usage_factor())
        self._save()

    def _save(self) -> None:
        self._dirty = False
        self.core.out.emit(PersistUsage(self.state.to_dict()))

    def on_event(self, ev: JobEvent) -> None:
        """A job that ended is charged for its last stretch at once, so the next pass's
        fairshare sees it; the state and the hourly records are written in batches (at
        most every few seconds: a flood of short jobs must not cost a write each)."""
        if ev.kind is not JobEventKind.ENDED or ev.job.start_time is None \
                or not self.accounting_on():
            return
        r = self.running_job(ev.job)
        if r is None:
            return
        end = ev.job.end_time or ev.time
        params = self.core.settings.fair_params
        fs.charge_ended(self.state, r, end, params, self.usage_factor())
        self._spans.append(fs.UsageSpan(
            r.assoc_id, r.start_time, end, r.tres,
            fs.billing(r.tres, params.billing_weights, params.max_tres)))
        self._dirty = True

    def flush(self, now: float, force: bool = False) -> None:
        if not self._dirty or (not force and now - self._saved < USAGE_SAVE_S):
            return
        spans, self._spans = self._spans, []
        # each job's whole run, by hour, for usage reports
        records = tuple(UsageRecord(c, a, h, t, b) for c, a, h, t, b
                        in fs.hourly_records(self.core.settings.cluster_name, spans))
        self.core.out.emit(PersistUsage(None, records))
        self._save()
        self._saved = now
