"""Association and QoS limits, pure: may this job start now, may it be submitted at all.

The scheduling pass builds one `LimitLedger` (the accounting tree, what running jobs hold,
what is queued), then for each candidate in priority order asks `check_start(job)`; a job
that starts is charged with `start(job)` at once, so the next candidate of the same pass
sees it (Slurm's acct_policy_job_runnable_post_select).  A job over a limit gets a
`LimitHit`: Slurm's reason name (`AssocGrpGRES`, `QOSMaxJobsPerUserLimit`, …) plus the
numbers.  Submission calls `resolve()` then `check_submit()`.

Slurm's rules kept here:
- Grp* limits of an association count everything below it (its users and sub-accounts);
  they are checked at every level from the user's association up to root.
- Max* limits (MaxJobs, MaxSubmitJobs, MaxTRES…, MaxWall) are inherited: a user
  association without one takes the nearest ancestor's, and it counts the user alone.
- A QoS limit overrides the association limit of the same kind and TRES.
- QoS first, then associations from the user up; within each, counts, wall, then TRES.
- Submit limits always refuse; per-job size and time limits refuse at submit only with the
  QoS flag DenyOnLimit (otherwise the job pends with the reason, as in Slurm).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from types import MappingProxyType
from typing import Any, NamedTuple

from corral.model.assoc import AssocDB, Association, AssocIndex, Limits, Qos
from corral.model.tres import Tres

# Slurm errnos and messages (src/common/slurm_errno.c)
ESLURM_INVALID_ACCOUNT = 2045
ESLURM_ACCOUNTING_POLICY = 2050
ESLURM_INVALID_QOS = 2066
MSG_INVALID_ACCOUNT = "Invalid account or account/partition combination specified"
MSG_ACCOUNTING_POLICY = ("Job violates accounting/QOS policy (job submit limit, user's size "
                         "and/or time limits)")
MSG_INVALID_QOS = "Invalid qos specification"


# ---- Slurm's reason names (src/common/job_state_reason.c) ---------------------
def _tres_class(tres: str) -> str:
    if tres == "cpu":
        return "cpu"
    if tres == "mem":
        return "mem"
    if tres == "node":
        return "node"
    if tres == "billing":
        return "billing"
    if tres == "energy":
        return "energy"
    kind = tres.split("/", 1)[0]
    return {"gres": "gres", "license": "license", "bb": "bb"}.get(kind, "unknown")


_PART = {"cpu": "Cpu", "mem": "Mem", "node": "Node", "gres": "GRES", "billing": "Billing",
         "energy": "Energy", "license": "License", "bb": "BB", "unknown": "Unknown"}


@cache
def reason_name(scope: str, kind: str, tres: str) -> str:
    """scope: "Assoc" or "QOS"; kind: grp, grp_mins, grp_run_mins, max_per_job,
    max_per_node, max_mins_per_job, max_per_user, min_per_job."""
    c = _tres_class(tres)
    p = _PART[c]
    if scope == "QOS" and c == "mem" and kind != "grp":
        p = "Memory"  # Slurm spells QOS memory reasons out (QOSMaxMemoryPerJob)
    if c == "cpu":
        name = {"grp": "GrpCpuLimit", "grp_mins": "GrpCPUMinutesLimit",
                "grp_run_mins": "GrpCPURunMinutesLimit", "max_per_job": "MaxCpuPerJobLimit",
                "max_per_node": "MaxCpuPerNode", "max_mins_per_job": "MaxCpuMinutesPerJobLimit",
                "max_per_user": "MaxCpuPerUserLimit", "min_per_job": "MinCpuNotSatisfied"}[kind]
    elif c == "node":
        name = {"grp": "GrpNodeLimit", "grp_mins": "GrpNodeMinutes",
                "grp_run_mins": "GrpNodeRunMinutes", "max_per_job": "MaxNodePerJobLimit",
                "max_per_node": "MaxUnknownPerNode", "max_mins_per_job": "MaxNodeMinutesPerJob",
                "max_per_user": "MaxNodePerUserLimit", "min_per_job": "MinNode"}[kind]
    elif c == "mem" and kind == "grp":
        name = "GrpMemLimit"
    else:
        name = {"grp": f"Grp{p}", "grp_mins": f"Grp{p}Minutes",
                "grp_run_mins": f"Grp{p}RunMinutes", "max_per_job": f"Max{p}PerJob",
                "max_per_node": f"Max{p}PerNode", "max_mins_per_job": f"Max{p}MinutesPerJob",
                "max_per_user": f"Max{p}PerUser", "min_per_job": f"Min{p}"}[kind]
    return scope + name


COUNT_REASONS = {
    ("Assoc", "grp_jobs"): "AssocGrpJobsLimit",
    ("Assoc", "max_jobs"): "AssocMaxJobsLimit",
    ("Assoc", "grp_submit_jobs"): "AssocGrpSubmitJobsLimit",
    ("Assoc", "max_submit_jobs"): "AssocMaxSubmitJobLimit",
    ("Assoc", "grp_wall"): "AssocGrpWallLimit",
    ("Assoc", "max_wall"): "AssocMaxWallDurationPerJobLimit",
    ("QOS", "grp_jobs"): "QOSGrpJobsLimit",
    ("QOS", "max_jobs_per_user"): "QOSMaxJobsPerUserLimit",
    ("QOS", "grp_submit_jobs"): "QOSGrpSubmitJobsLimit",
    ("QOS", "max_submit_jobs_per_user"): "QOSMaxSubmitJobPerUserLimit",
    ("QOS", "grp_wall"): "QOSGrpWallLimit",
    ("QOS", "max_wall"): "QOSMaxWallDurationPerJobLimit",
}


def all_reason_names() -> list[str]:
    """Every reason this module can return (for the pending-reason enum)."""
    names = set(COUNT_REASONS.values())
    for scope in ("Assoc", "QOS"):
        kinds = ["grp", "grp_mins", "grp_run_mins", "max_per_job", "max_per_node",
                 "max_mins_per_job"]
        if scope == "QOS":
            kinds += ["max_per_user", "min_per_job"]
        for kind in kinds:
            for tres in ("cpu", "mem", "node", "gres/gpu", "billing", "energy",
                         "license/x", "bb/x", "fs/disk"):
                names.add(reason_name(scope, kind, tres))
    return sorted(names)


# ---- what is checked ------------------------------------------------------------
_NO_TRES: Mapping[str, int] = MappingProxyType({})


class JobReq(NamedTuple):
    """What the limits read of a job.  `tres`: the whole job (cpu, mem in MB, node,
    gres/gpu, billing); `tres_per_node`: the most it holds on one node; minutes.
    (A named tuple, not a frozen dataclass: a pass makes one per running job and per
    pending job it checks, and a tuple is made four times as fast.)"""

    job_id: int
    user: str
    account: str
    partition: str | None = None
    qos: str | None = None
    tres: Mapping[str, int] = _NO_TRES
    tres_per_node: Mapping[str, int] = _NO_TRES
    time_limit_min: int | None = None
    # jobs it counts as in submit limits: an array's pending tasks each count (Slurm)
    submit_count: int = 1  # (not `count`: a tuple has a method of that name)


@dataclass(frozen=True, slots=True)
class LimitHit:
    """Why a job may not start (or be submitted): Slurm's reason name and the numbers."""

    code: str  # e.g. "AssocGrpGRES"; squeue prints it as is
    limit: str  # sacctmgr's name of the limit: "GrpTRES", "MaxJobsPerUser", …
    where: str  # "assoc <account>/<user>" or "qos <name>"
    tres: str | None = None
    requested: float = 0
    used: float = 0
    allowed: float = 0

    def text(self) -> str:
        return self.code

    def explain(self) -> str:
        what = f"{self.tres} " if self.tres else ""
        return (f"{self.limit} {what}of {self.where} is {self.allowed:g}; "
                f"{self.used:g} in use, the job asks {self.requested:g}")


@dataclass(frozen=True, slots=True)
class SubmitRefusal:
    """A submission refused: Slurm's message and errno (sbatch prints
    `sbatch: error: Batch job submission failed: <message>` and exits 1)."""

    message: str
    errno: int
    hit: LimitHit | None = None


@dataclass(slots=True)
class Counter:
    jobs: int = 0  # running
    submit: int = 0  # pending + running
    tres: dict[str, int] = field(default_factory=dict)
    run_mins: dict[str, float] = field(default_factory=dict)  # remaining TRES-minutes


@dataclass(slots=True)
class Resolved:
    assoc: Association
    chain: list[Association]
    qos: Qos | None
    # per association level: (association, "assoc …" label, the limits checked there)
    levels: list[tuple[Association, str, Limits]] = field(default_factory=list)
    qos_skip: dict[str, set[str]] = field(default_factory=dict)
    # the partition's QoS (partition QOS=): checked first; the job's QoS does not
    # check the limits it sets (Slurm: the partition QoS takes precedence)
    part_qos: Qos | None = None
    part_skip: dict[str, set[str]] = field(default_factory=dict)

    _qos_levels: list[tuple[Qos, dict[str, set[str]]]] | None = None

    def qos_levels(self) -> list[tuple[Qos, dict[str, set[str]]]]:
        """The QoS to check, in order, with what each skips (made once per resolution)."""
        if self._qos_levels is None:
            out: list[tuple[Qos, dict[str, set[str]]]] = []
            if self.part_qos is not None:
                out.append((self.part_qos, {}))
            if self.qos is not None:
                out.append((self.qos, self.part_skip))
            self._qos_levels = out
        return self._qos_levels

    _limited_qos: list[tuple[Qos, dict[str, set[str]]]] | None = None

    def limited_qos(self) -> list[tuple[Qos, dict[str, set[str]]]]:
        """`qos_levels` without the QoS that set no limit (nothing to check there)."""
        if self._limited_qos is None:
            self._limited_qos = [(q, skip) for q, skip in self.qos_levels()
                                 if not q.limits.empty()]
        return self._limited_qos


def _qos_skip(q: Qos | None) -> dict[str, set[str]]:
    """Which association limits a QoS overrides (it sets the same kind, for that TRES)."""
    skip: dict[str, set[str]] = {}
    if q is None:
        return skip
    lim = q.limits
    for name in ("grp_tres", "grp_tres_mins", "grp_tres_run_mins", "max_tres_per_job",
                 "max_tres_per_node", "max_tres_mins_per_job"):
        if getattr(lim, name):
            skip[name] = set(getattr(lim, name))
    for name in ("grp_jobs", "grp_submit_jobs", "grp_wall", "max_wall"):
        if getattr(lim, name) is not None:
            skip[name] = {"*"}
    if lim.max_jobs_per_user is not None:
        skip["max_jobs"] = {"*"}
    if lim.max_submit_jobs_per_user is not None:
        skip["max_submit_jobs"] = {"*"}
    return skip


def _merge_skip(a: dict[str, set[str]], b: dict[str, set[str]]) -> dict[str, set[str]]:
    out = {k: set(v) for k, v in a.items()}
    for k, v in b.items():
        out.setdefault(k, set()).update(v)
    return out


def _levels(chain: list[Association]) -> list[tuple[Association, str, Limits]]:
    out = []
    for depth, a in enumerate(chain):
        where = f"assoc {a.account}/{a.user}" if a.user else f"assoc {a.account}"
        if depth == 0:
            # the user's association carries the inherited Max* limits
            lim = _inherited_max(chain)
        else:
            lim = Limits(grp_tres=a.limits.grp_tres, grp_tres_mins=a.limits.grp_tres_mins,
                         grp_tres_run_mins=a.limits.grp_tres_run_mins,
                         grp_jobs=a.limits.grp_jobs, grp_submit_jobs=a.limits.grp_submit_jobs,
                         grp_wall=a.limits.grp_wall)
        if not lim.empty():
            out.append((a, where, lim))
    return out


class LimitLedger:
    """Counters of one scheduling pass (or one submission) over an `AssocDB`.

    `used_tres_mins`: decayed usage per association id and per QoS name in TRES-minutes
    (the fairshare state's usage; GrpTRESMins compares with it, as Slurm's usage_tres_raw);
    `used_wall_mins`: the same for GrpWall."""

    def __init__(self, db: AssocDB, cluster: str, *,
                 used_tres_mins: Mapping[int | str, Mapping[str, float]] | None = None,
                 used_wall_mins: Mapping[int | str, float] | None = None,
                 part_qos: Mapping[str, str] | None = None,
                 index: AssocIndex | None = None) -> None:
        self.db = db
        self.part_qos = part_qos or {}  # partition name -> its QOS= (partition QoS)
        self.index = index if index is not None else AssocIndex(db)  # (a pass shares one)
        self.cluster = cluster
        self.assoc: dict[int, Counter] = {}
        self.qos: dict[str, Counter] = {}
        self.qos_user: dict[tuple[str, str], Counter] = {}
        self.used_tres_mins = used_tres_mins or {}
        self.used_wall_mins = used_wall_mins or {}
        self._resolved: dict[tuple[str, str, str | None, str | None], Resolved | None] = {}
        # by (association id, QoS, partition QoS): what `_resolved` entries share
        self._resolved_assoc: dict[tuple[int, str | None, str | None], Resolved] = {}
        # running jobs' remaining TRES-minutes not yet added to their counters' run_mins:
        # (counters, the job's TRES, minutes left), in charging order; added (in that
        # order, so the sums are the same) only when a GrpTRESRunMins limit is checked,
        # and kept only when some association or QoS sets one
        self._run_mins_due: list[tuple[list[Counter], Mapping[str, int], float]] = []
        self._run_mins_read = any(a.limits.grp_tres_run_mins for a in db.assocs.values()) \
            or any(q.limits.grp_tres_run_mins for q in db.qos.values())
        # the counters a job of each (user, account, partition, qos) charges, made once
        self._charged: dict[tuple[str, str, str | None, str | None], list[Counter]] = {}
        # what check_start checks for a job of each (user, account, partition, qos)
        self._start_checks: dict[tuple[str, str, str | None, str | None],
                                 list[_StartLevel] | None] = {}
        # the levels themselves, shared by the groups that check the same one: (scope,
        # QoS name or association id, user for a QoS, the overrides' identity, 0: none)
        self._start_levels: dict[tuple[str, str | int, str, int], _StartLevel] = {}

    # ---- resolution ---------------------------------------------------------
    def resolve(self, job: JobReq) -> Resolved | None:
        key = (job.user, job.account, job.partition, job.qos)
        if key in self._resolved:
            return self._resolved[key]
        a = self.index.job_assoc(self.cluster, job.user, job.account, job.partition)
        r = None
        if a is not None:
            q = self.db.qos.get(job.qos) if job.qos else None
            pname = self.part_qos.get(job.partition or "")
            pq = self.db.qos.get(pname) if pname else None
            if pq is not None and pq is q:
                pq = None  # the same QoS once
            # (jobs in partitions without an association of their own share one)
            same = (a.id, q.name if q is not None else None, pq.name if pq is not None else None)
            r = self._resolved_assoc.get(same)
            if r is None:
                chain = self.index.chain(a)
                pskip = _qos_skip(pq)
                r = self._resolved_assoc[same] = Resolved(
                    a, chain, q, _levels(chain), _merge_skip(_qos_skip(q), pskip), pq, pskip)
        self._resolved[key] = r
        return r

    def _counters(self, r: Resolved, job: JobReq) -> list[Counter]:
        key = (job.user, job.account, job.partition, job.qos)  # what `r` was resolved by
        out = self._charged.get(key)
        if out is None:
            out = [self.assoc.setdefault(a.id, Counter()) for a in r.chain]
            for q, _ in r.qos_levels():
                out.append(self.qos.setdefault(q.name, Counter()))
                out.append(self.qos_user.setdefault((q.name, job.user), Counter()))
            self._charged[key] = out
        return out

    # ---- charging -------------------------------------------------------------
    def add_pending(self, job: JobReq) -> None:
        r = self.resolve(job)
        if r is None:
            return
        for c in self._counters(r, job):
            c.submit += job.submit_count

    def add_running(self, job: JobReq, remaining_min: float | None = None,
                    counted_pending: bool = False) -> None:
        """A running job (or one started in this pass: `start`).  `remaining_min` defaults
        to its time limit (GrpTRESRunMins counts what is left to run)."""
        r = self.resolve(job)
        if r is None:
            return
        left = remaining_min if remaining_min is not None else (job.time_limit_min or 0)
        items = job.tres.items()
        counters = self._counters(r, job)
        for c in counters:
            c.jobs += 1
            if not counted_pending:
                c.submit += 1
            tres = c.tres  # (inlined: 5,000 jobs a pass)
            for k, v in items:
                tres[k] = tres.get(k, 0) + v
        if self._run_mins_read:
            self._run_mins_due.append((counters, job.tres, left))

    def _add_run_mins(self) -> None:
        """Charge the remaining TRES-minutes of the running jobs, in the order they came."""
        for counters, tres, left in self._run_mins_due:
            for c in counters:
                run_mins = c.run_mins
                for k, v in tres.items():
                    run_mins[k] = run_mins.get(k, 0.0) + v * left
        self._run_mins_due.clear()

    def add_running_jobs(self, running: Iterable[tuple[JobReq, float | None]]) -> None:
        """`add_running` for many jobs: the counters are charged once per (user, account,
        partition, QoS) with the group's totals (integer sums: the same counts whatever
        the grouping), the remaining minutes kept per job in their order."""
        groups: dict[tuple[str, str, str | None, str | None],
                     tuple[list[Counter], list[int], dict[str, int]] | None] = {}
        due = self._run_mins_due if self._run_mins_read else None
        for job, remaining_min in running:
            key = (job.user, job.account, job.partition, job.qos)
            if key in groups:
                group = groups[key]
            else:
                r = self.resolve(job)
                group = groups[key] = None if r is None else (self._counters(r, job), [0], {})
            if group is None:
                continue
            counters, count, totals = group
            count[0] += 1
            for k, v in job.tres.items():
                totals[k] = totals.get(k, 0) + v
            if due is not None:
                left = remaining_min if remaining_min is not None else (job.time_limit_min or 0)
                due.append((counters, job.tres, left))
        for group in groups.values():
            if group is None:
                continue
            counters, count, totals = group
            n = count[0]
            for c in counters:
                c.jobs += n
                c.submit += n
                tres = c.tres
                for k, v in totals.items():
                    tres[k] = tres.get(k, 0) + v

    def add_pending_jobs(self, pending: Iterable[JobReq]) -> None:
        """`add_pending` for many jobs, each counter charged once per (user, account,
        partition, QoS)."""
        counts: dict[tuple[str, str, str | None, str | None], list[int]] = {}
        first: list[JobReq] = []
        for job in pending:
            key = (job.user, job.account, job.partition, job.qos)
            count = counts.get(key)
            if count is None:
                counts[key] = [job.submit_count]
                first.append(job)
            else:
                count[0] += job.submit_count
        for job, count in zip(first, counts.values(), strict=True):
            r = self.resolve(job)
            if r is None:
                continue
            for c in self._counters(r, job):
                c.submit += count[0]

    def start(self, job: JobReq) -> None:
        """Charge a job the pass decided to start (it was counted as pending)."""
        self.add_running(job, None, counted_pending=True)

    # ---- checks ---------------------------------------------------------------
    def check_start(self, job: JobReq) -> LimitHit | None:
        key = (job.user, job.account, job.partition, job.qos)
        checks = self._start_checks.get(key, _UNKNOWN)
        if checks is _UNKNOWN:
            checks = self._start_checks[key] = self._start_checks_of(job)
        if checks is None:
            return None  # no association: the submit check (enforce=associations) refuses
        items = None  # (the general check's: made for the first level that needs it)
        for level in checks:
            if level.short:
                hit = level.check_short(job)
            else:
                if level.lim.grp_tres_run_mins and self._run_mins_due:
                    self._add_run_mins()
                if items is None:
                    items = _sorted(job.tres)
                hit = level.check(job, items)
            if hit:
                return hit
        return None

    def _start_checks_of(self, job: JobReq) -> list[_StartLevel] | None:
        """The levels check_start checks for jobs like `job` (the same user, account,
        partition and QoS), in order: the QoS that set limits, then the associations,
        each with its counters (made now: those a start charges) and usage."""
        r = self.resolve(job)
        if r is None:
            return None
        self._counters(r, job)
        out: list[_StartLevel] = []
        made = self._start_levels
        for q, skip in r.limited_qos():
            key: tuple[str, str | int, str, int] = ("QOS", q.name, job.user,
                                                    id(skip) if skip else 0)
            level = made.get(key)
            if level is None:
                level = made[key] = _StartLevel(
                    "QOS", f"qos {q.name}", q.limits, self.qos[q.name],
                    self.qos_user[(q.name, job.user)], self.used_tres_mins.get(q.name, {}),
                    self.used_wall_mins.get(q.name, 0.0), _QOS_USER_COUNTS, skip or {})
            out.append(level)
        for a, where, lim in r.levels:
            key = ("Assoc", a.id, "", id(r.qos_skip) if r.qos_skip else 0)
            level = made.get(key)
            if level is None:
                c = self.assoc[a.id]
                level = made[key] = _StartLevel(
                    "Assoc", where, lim, c, c, self.used_tres_mins.get(a.id, {}),
                    self.used_wall_mins.get(a.id, 0.0), _ASSOC_USER_COUNTS, r.qos_skip)
            out.append(level)
        return out

    def check_submit(self, job: JobReq) -> SubmitRefusal | None:
        """Submit-time limits: the submit counts always; size and time with DenyOnLimit."""
        r = self.resolve(job)
        if r is None:
            return SubmitRefusal(MSG_INVALID_ACCOUNT, ESLURM_INVALID_ACCOUNT)
        items = _sorted(job.tres)
        hit = None
        for q, skip in r.qos_levels():
            hit = self._check_qos(job, items, q, submit=True, skip=skip)
            if hit:
                break
        if hit is None:
            hit = self._check_assocs(job, items, r, submit=True)
        if hit is None:
            return None
        deny = any(q.deny_on_limit for q, _ in r.qos_levels())
        if hit.limit in ("GrpSubmitJobs", "MaxSubmitJobs", "MaxSubmitJobsPerUser") or deny:
            return SubmitRefusal(MSG_ACCOUNTING_POLICY, ESLURM_ACCOUNTING_POLICY, hit)
        return None

    def pending_reason_at_submit(self, job: JobReq) -> LimitHit | None:
        """A per-job limit the job can never pass (it pends with this reason; DenyOnLimit
        refuses it instead: `check_submit`)."""
        r = self.resolve(job)
        if r is None:
            return None
        items = _sorted(job.tres)
        for q, skip in r.qos_levels():
            hit = self._check_qos(job, items, q, submit=True, skip=skip)
            if hit:
                return hit
        return self._check_assocs(job, items, r, submit=True)

    def _check_qos(self, job: JobReq, items: list[tuple[str, int]], q: Qos,
                   submit: bool, skip: Mapping[str, set[str]] | None = None) -> LimitHit | None:
        lim = q.limits
        if lim.empty():
            return None
        if lim.grp_tres_run_mins and self._run_mins_due:
            self._add_run_mins()
        return _check_level(
            "QOS", f"qos {q.name}", lim, job, items, submit,
            grp=self.qos.get(q.name) or _EMPTY,
            mine=self.qos_user.get((q.name, job.user)) or _EMPTY,
            used_mins=self.used_tres_mins.get(q.name, {}),
            used_wall=self.used_wall_mins.get(q.name, 0.0),
            per_user_counts=_QOS_USER_COUNTS, skip=skip or {})

    def _check_assocs(self, job: JobReq, items: list[tuple[str, int]], r: Resolved,
                      submit: bool) -> LimitHit | None:
        for a, where, lim in r.levels:
            if lim.grp_tres_run_mins and self._run_mins_due:
                self._add_run_mins()
            c = self.assoc.get(a.id) or _EMPTY
            hit = _check_level("Assoc", where, lim, job, items, submit, grp=c, mine=c,
                               used_mins=self.used_tres_mins.get(a.id, {}),
                               used_wall=self.used_wall_mins.get(a.id, 0.0),
                               per_user_counts=_ASSOC_USER_COUNTS, skip=r.qos_skip)
            if hit:
                return hit
        return None


_EMPTY = Counter()  # read only: a level nothing is charged to yet
_UNKNOWN: list[_StartLevel] = []  # check_start: a job group not seen yet
# the per-user job counts of each scope: (limit field, sacctmgr's name, a submit count)
_QOS_USER_COUNTS = (("max_jobs_per_user", "MaxJobsPerUser", False),
                    ("max_submit_jobs_per_user", "MaxSubmitJobsPerUser", True))
_ASSOC_USER_COUNTS = (("max_jobs", "MaxJobs", False), ("max_submit_jobs", "MaxSubmitJobs", True))


class _StartLevel:
    """One association or QoS as `check_start` checks it, made once per pass for the jobs
    of one (user, account, partition, QoS): its counters bound, what a QoS overrides
    taken out.  A level with only the common limits (job counts, wall, GrpTRES,
    MaxTRESPerUser) is checked by `check`'s own short path, in `_check_level`'s order
    and with its answers; any other by `_check_level`."""

    __slots__ = ("scope", "where", "lim", "grp", "mine", "used_mins", "used_wall", "counts",
                 "skip", "short", "grp_jobs", "user_jobs", "grp_wall", "max_wall", "tres_limits")

    def __init__(self, scope: str, where: str, lim: Limits, grp: Counter, mine: Counter,
                 used_mins: Mapping[str, float], used_wall: float,
                 counts: tuple[tuple[str, str, bool], ...],
                 skip: Mapping[str, set[str]]) -> None:
        self.scope, self.where, self.lim, self.grp, self.mine = scope, where, lim, grp, mine
        self.used_mins, self.used_wall, self.counts, self.skip = used_mins, used_wall, counts, skip
        self.short = not (lim.min_tres_per_job or lim.max_tres_per_job or lim.max_tres_per_node
                          or lim.max_tres_mins_per_job or lim.grp_tres_mins
                          or lim.grp_tres_run_mins)

        def kept(name: str) -> bool:
            return not (skip and _skip(skip, name))

        self.grp_jobs = lim.grp_jobs if kept("grp_jobs") else None
        # (field, sacctmgr's name, value) of the per-user running job count
        field_name, label, _ = next(c for c in counts if not c[2])
        value = getattr(lim, field_name)
        self.user_jobs = (field_name, label, value) \
            if value is not None and kept("max_jobs") else None
        self.grp_wall = lim.grp_wall if kept("grp_wall") else None
        self.max_wall = lim.max_wall if kept("max_wall") else None
        grp_tres = {name: m for name, m in lim.grp_tres.items()
                    if not (skip and _skip(skip, "grp_tres", name))}
        user_tres = lim.max_tres_per_user
        # (TRES, GrpTRES, MaxTRESPerUser) in the order a job's TRES are checked (_sorted)
        self.tres_limits = [(name, grp_tres.get(name), user_tres.get(name))
                            for name in sorted(set(grp_tres) | set(user_tres), key=_check_order)]

    def check(self, job: JobReq, items: list[tuple[str, int]]) -> LimitHit | None:
        """The general check (`_check_level`); `items`: the job's TRES, `_sorted`."""
        return _check_level(self.scope, self.where, self.lim, job, items, False,
                            grp=self.grp, mine=self.mine, used_mins=self.used_mins,
                            used_wall=self.used_wall, per_user_counts=self.counts,
                            skip=self.skip)

    def check_short(self, job: JobReq) -> LimitHit | None:
        """The check of a level with only the common limits (`short`)."""
        scope, grp = self.scope, self.grp
        if self.grp_jobs is not None and grp.jobs + 1 > self.grp_jobs:
            return LimitHit(COUNT_REASONS[(scope, "grp_jobs")], "GrpJobs", self.where, None, 1,
                            grp.jobs, self.grp_jobs)
        if self.user_jobs is not None:
            field_name, label, most = self.user_jobs
            if self.mine.jobs + 1 > most:
                return LimitHit(COUNT_REASONS[(scope, field_name)], label, self.where, None, 1,
                                self.mine.jobs, most)
        t = job.time_limit_min
        if self.grp_wall is not None and self.used_wall >= self.grp_wall:
            return LimitHit(COUNT_REASONS[(scope, "grp_wall")], "GrpWall", self.where, None,
                            t or 0, self.used_wall, self.grp_wall)
        if self.max_wall is not None and t is not None and t > self.max_wall:
            return LimitHit(COUNT_REASONS[(scope, "max_wall")], "MaxWall", self.where, None, t,
                            0, self.max_wall)
        tres = job.tres
        for name, grp_most, user_most in self.tres_limits:
            value = tres.get(name)
            if value is None:  # (a TRES the job does not ask for)
                continue
            if grp_most is not None:
                used = grp.tres.get(name, 0)
                if used + value > grp_most:
                    return LimitHit(reason_name(scope, "grp", name), "GrpTRES", self.where,
                                    name, value, used, grp_most)
            if user_most is not None:
                used = self.mine.tres.get(name, 0)
                if used + value > user_most:
                    return LimitHit(reason_name(scope, "max_per_user", name),
                                    "MaxTRESPerUser", self.where, name, value, used, user_most)
        return None


def _inherited_max(chain: list[Association]) -> Limits:
    """The user association's own Grp* limits plus every Max* limit, each from the
    nearest association up the chain that sets it."""
    first = chain[0].limits
    out = Limits(grp_tres=dict(first.grp_tres), grp_tres_mins=dict(first.grp_tres_mins),
                 grp_tres_run_mins=dict(first.grp_tres_run_mins), grp_jobs=first.grp_jobs,
                 grp_submit_jobs=first.grp_submit_jobs, grp_wall=first.grp_wall)
    for name in ("max_tres_per_job", "max_tres_per_node", "max_tres_mins_per_job"):
        merged: Tres = {}
        for a in reversed(chain):
            merged.update(getattr(a.limits, name))
        setattr(out, name, merged)
    for name in ("max_jobs", "max_submit_jobs", "max_wall"):
        for a in chain:
            v = getattr(a.limits, name)
            if v is not None:
                setattr(out, name, v)
                break
    return out


def _skip(skip: Mapping[str, set[str]], name: str, tres: str = "*") -> bool:
    s = skip.get(name)
    return bool(s) and (tres in s or "*" in s)  # type: ignore[operator]


def _check_level(scope: str, where: str, lim: Limits, job: JobReq,
                 items: list[tuple[str, int]], submit: bool, *,
                 grp: Counter, mine: Counter, used_mins: Mapping[str, float],
                 used_wall: float, per_user_counts: Iterable[tuple[str, str, bool]],
                 skip: Mapping[str, set[str]]) -> LimitHit | None:
    """One association or QoS: counts, wall, then TRES, in Slurm's order.  At submit
    (`submit`) the running counts are not checked, the submit counts are, and the TRES
    limits are checked against the job alone."""
    def hit(code: str, limit: str, tres: str | None, req: float, used: float,
            allowed: float) -> LimitHit:
        return LimitHit(code, limit, where, tres, req, used, allowed)

    # (skip is empty unless a QoS overrides association limits: `_skip` only then)
    # -- job counts
    if submit:
        if lim.grp_submit_jobs is not None and not (skip and _skip(skip, "grp_submit_jobs")) \
                and grp.submit + job.submit_count > lim.grp_submit_jobs:
            return hit(COUNT_REASONS[(scope, "grp_submit_jobs")], "GrpSubmitJobs", None, job.submit_count,
                       grp.submit, lim.grp_submit_jobs)
        for field_name, label, counts_submit in per_user_counts:
            if not counts_submit:
                continue
            v = getattr(lim, field_name)
            if v is not None and not (skip and _skip(skip, "max_submit_jobs")) \
                    and mine.submit + job.submit_count > v:
                return hit(COUNT_REASONS[(scope, field_name)], label, None, job.submit_count,
                           mine.submit, v)
    else:
        if lim.grp_jobs is not None and not (skip and _skip(skip, "grp_jobs")) \
                and grp.jobs + 1 > lim.grp_jobs:
            return hit(COUNT_REASONS[(scope, "grp_jobs")], "GrpJobs", None, 1, grp.jobs,
                       lim.grp_jobs)
        for field_name, label, counts_submit in per_user_counts:
            if counts_submit:
                continue
            v = getattr(lim, field_name)
            if v is not None and not (skip and _skip(skip, "max_jobs")) and mine.jobs + 1 > v:
                return hit(COUNT_REASONS[(scope, field_name)], label, None, 1, mine.jobs, v)
    # -- wall time
    t = job.time_limit_min
    if not submit and lim.grp_wall is not None and not (skip and _skip(skip, "grp_wall")) \
            and used_wall >= lim.grp_wall:
        return hit(COUNT_REASONS[(scope, "grp_wall")], "GrpWall", None, t or 0, used_wall,
                   lim.grp_wall)
    if lim.max_wall is not None and t is not None and not (skip and _skip(skip, "max_wall")) \
            and t > lim.max_wall:
        return hit(COUNT_REASONS[(scope, "max_wall")], "MaxWall", None, t, 0, lim.max_wall)
    # -- TRES, per job and per node (can never pass: same at submit and at start)
    if lim.min_tres_per_job:
        for name, value in items:
            m = lim.min_tres_per_job.get(name)
            if m is not None and value < m:
                return hit(reason_name(scope, "min_per_job", name), "MinTRESPerJob", name,
                           value, 0, m)
        for name, m in lim.min_tres_per_job.items():
            if name not in job.tres and m > 0:
                return hit(reason_name(scope, "min_per_job", name), "MinTRESPerJob", name, 0,
                           0, m)
    for name, value in items if lim.max_tres_per_job else ():
        m = lim.max_tres_per_job.get(name)
        if m is not None and value > m and not (skip and _skip(skip, "max_tres_per_job", name)):
            return hit(reason_name(scope, "max_per_job", name),
                       "MaxTRESPerJob" if scope == "QOS" else "MaxTRES", name, value, 0, m)
    for name, value in _sorted(job.tres_per_node) if lim.max_tres_per_node else ():
        m = lim.max_tres_per_node.get(name)
        if m is not None and value > m and not (skip and _skip(skip, "max_tres_per_node", name)):
            return hit(reason_name(scope, "max_per_node", name), "MaxTRESPerNode", name, value,
                       0, m)
    if t is not None and lim.max_tres_mins_per_job:
        for name, value in items:
            m = lim.max_tres_mins_per_job.get(name)
            if m is not None and value * t > m and not (skip and _skip(skip, "max_tres_mins_per_job", name)):
                return hit(reason_name(scope, "max_mins_per_job", name), "MaxTRESMins", name,
                           value * t, 0, m)
    # -- TRES, group and per user
    for name, value in items if (lim.grp_tres or lim.max_tres_per_user) else ():
        m = lim.grp_tres.get(name)
        if m is not None and not (skip and _skip(skip, "grp_tres", name)):
            used = 0 if submit else grp.tres.get(name, 0)
            if used + value > m:
                return hit(reason_name(scope, "grp", name), "GrpTRES", name, value, used, m)
        m = lim.max_tres_per_user.get(name)
        if m is not None:
            used = 0 if submit else mine.tres.get(name, 0)
            if used + value > m:
                return hit(reason_name(scope, "max_per_user", name), "MaxTRESPerUser", name,
                           value, used, m)
    if submit or not (lim.grp_tres_mins or lim.grp_tres_run_mins):
        return None
    for name, value in items:
        m = lim.grp_tres_mins.get(name)
        if m is not None and not (skip and _skip(skip, "grp_tres_mins", name)) \
                and used_mins.get(name, 0.0) >= m:
            return hit(reason_name(scope, "grp_mins", name), "GrpTRESMins", name, value,
                       used_mins.get(name, 0.0), m)
        m = lim.grp_tres_run_mins.get(name)
        if m is not None and t is not None and not (skip and _skip(skip, "grp_tres_run_mins", name)):
            used_run = grp.run_mins.get(name, 0.0)
            if used_run + value * t > m:
                return hit(reason_name(scope, "grp_run_mins", name), "GrpTRESRunMins", name,
                           value * t, used_run, m)
    return None


_ORDER = {"cpu": 0, "mem": 1, "energy": 2, "node": 3, "billing": 4}


# the TRES names of a request in checking order, by the names in the request's order
_NAME_ORDER: dict[tuple[str, ...], tuple[str, ...]] = {}


def _check_order(name: str) -> tuple[int, str]:
    return _ORDER.get(name, 9), name


def _sorted(tres: Mapping[str, int]) -> list[tuple[str, int]]:
    """The job's TRES in the order limits check them."""
    names = tuple(tres)
    order = _NAME_ORDER.get(names)
    if order is None:
        if len(_NAME_ORDER) >= 256:
            _NAME_ORDER.clear()
        order = _NAME_ORDER[names] = tuple(sorted(names, key=_check_order))
    return [(name, tres[name]) for name in order]


# ---- submission: which association and QoS a job gets --------------------------------
@dataclass(frozen=True, slots=True)
class SubmitChoice:
    account: str
    qos: str | None
    assoc_id: int


def resolve_submit(db: AssocDB, cluster: str, user: str, account: str | None,
                   partition: str | None, qos: str | None) -> SubmitChoice | SubmitRefusal:
    """The account and QoS a submission runs under (AccountingStorageEnforce=associations):
    the user's default account when none is given; the association's default QoS (else
    `normal` when allowed, else its only QoS) when none is given; Slurm's refusals for an
    unknown user, an account the user has no association with, or a QoS not allowed."""
    u = db.users.get(user)
    if u is None:
        return SubmitRefusal(MSG_INVALID_ACCOUNT, ESLURM_INVALID_ACCOUNT)
    acct = account or u.default_account
    if not acct:
        return SubmitRefusal(MSG_INVALID_ACCOUNT, ESLURM_INVALID_ACCOUNT)
    a = db.job_assoc(cluster, user, acct, partition)
    if a is None:
        return SubmitRefusal(MSG_INVALID_ACCOUNT, ESLURM_INVALID_ACCOUNT)
    allowed = db.effective_qos(a)
    if qos:
        if qos not in db.qos or (allowed and qos not in allowed):
            return SubmitRefusal(MSG_INVALID_QOS, ESLURM_INVALID_QOS)
        return SubmitChoice(acct, qos, a.id)
    default = db.effective_default_qos(a)
    if default is None:
        if "normal" in db.qos and (not allowed or "normal" in allowed):
            default = "normal"
        elif len(allowed) == 1:
            default = allowed[0]
    return SubmitChoice(acct, default, a.id)


def default_time_limit(db: AssocDB, assoc_id: int, qos: str | None) -> int | None:
    """A job submitted without --time gets the smallest MaxWall that applies (QoS first,
    then the nearest association that sets one), in minutes; None when none does."""
    q = db.qos.get(qos) if qos else None
    if q is not None and q.limits.max_wall is not None:
        return q.limits.max_wall
    a = db.assocs.get(assoc_id)
    if a is None:
        return None
    for x in db.chain(a):
        if x.limits.max_wall is not None:
            return x.limits.max_wall
    return None


# ---- from job records -------------------------------------------------------------------
def job_request(job: Any) -> JobReq:
    """A `JobReq` from a job record (model/job.py `Job`, read by attribute): a running job
    by its allocation, a pending one by its request.  Memory in MB, minutes."""
    alloc = job.alloc
    limit_s = int(job.time_limit)
    minutes = None if limit_s < 0 else -(-limit_s // 60)
    if alloc:
        # (one walk over the allocation: a pass makes one of these per running job)
        cpus = mem = gpus = most_cpus = most_mem = most_gpus = 0
        first = True
        for a in alloc:
            c, m, g = a.cpus, a.mem_mb, len(a.gpus)
            cpus += c
            mem += m
            gpus += g
            if first:
                most_cpus, most_mem, most_gpus = c, m, g
                first = False
            else:
                most_cpus = c if c > most_cpus else most_cpus
                most_mem = m if m > most_mem else most_mem
                most_gpus = g if g > most_gpus else most_gpus
        tres = {"cpu": cpus, "mem": mem, "node": len(alloc)}
        per_node = {"cpu": most_cpus, "mem": most_mem, "node": 1}
        if gpus:
            tres["gres/gpu"] = gpus
            per_node["gres/gpu"] = most_gpus
        pending_tasks = None
    else:
        nodes = max(1, int(job.num_nodes or 1))
        tasks = max(1, int(job.num_tasks or 1))
        # -O: one task's CPUs per node (slurmctld's min_cpus), whatever the task count
        one_per_node = getattr(job, "overcommit", False) and not job.gpus_per_task
        cpus = (nodes if one_per_node else tasks) \
            * max(1, int(job.cpus_per_task or 1))
        cpus = max(cpus, nodes)
        mem_node = job.mem_per_node
        mem_cpu = job.mem_per_cpu
        mem = (mem_node * nodes if mem_node else (mem_cpu * cpus if mem_cpu else 0))
        gpus = int(job.gpus or 0) or int(job.gpus_per_node or 0) * nodes \
            or int(job.gpus_per_task or 0) * tasks
        tres = {"cpu": cpus, "node": nodes}
        if mem:
            tres["mem"] = int(mem)
        per_node = {"cpu": -(-cpus // nodes), "node": 1}
        if mem:
            per_node["mem"] = int(mem_node or -(-int(mem) // nodes))
        if gpus:
            tres["gres/gpu"] = gpus
            per_node["gres/gpu"] = -(-gpus // nodes)
        pending_tasks = job.array_tasks
    return JobReq(int(job.job_id), str(job.user), str(job.account),
                  str(job.partition) or None, str(job.qos) or None, tres, per_node, minutes,
                  len(pending_tasks) if pending_tasks else 1)


# what `job_request` reads of a pending job's size (`PendingRequests._pending_request`)
_SizeKey = tuple[Any, Any, Any, Any, Any, Any, Any, Any, Any, Any]
_SizeOf = tuple[Mapping[str, int], Mapping[str, int], int | None]


class PendingRequests(Mapping[int, JobReq]):
    """The pending jobs' `job_request`s by job id, each made when first asked for: a pass's
    limits gate asks only about the jobs that reach it (not those waiting on a dependency
    or a hold), so the others cost nothing.  `jobs`: the pending jobs by id, as the pass
    found them; a held job has no request.  Jobs of one size (the fields `job_request`
    reads of it) share their TRES and minutes, made once (read only, as a JobReq's are)."""

    __slots__ = ("_jobs", "_made", "_sizes")

    def __init__(self, jobs: Mapping[int, Any]) -> None:
        self._jobs = jobs
        self._made: dict[int, JobReq | None] = {}
        self._sizes: dict[_SizeKey, _SizeOf] = {}

    def get(self, job_id: int, default: Any = None) -> Any:
        made = self._made
        if job_id in made:
            req = made[job_id]
        else:
            job = self._jobs.get(job_id)
            if job is None or job.held:
                req = made[job_id] = None
            elif job.alloc:
                req = made[job_id] = job_request(job)
            else:
                req = made[job_id] = self._pending_request(job)
        return default if req is None else req

    def _pending_request(self, job: Any) -> JobReq:
        """`job_request` of a job without an allocation, its size made once per size."""
        key = (job.time_limit, job.num_nodes, job.num_tasks, job.cpus_per_task,
               job.mem_per_node, job.mem_per_cpu, job.gpus, job.gpus_per_node,
               job.gpus_per_task, getattr(job, "overcommit", False))
        size = self._sizes.get(key)
        if size is None:
            whole = job_request(job)
            size = self._sizes[key] = (whole.tres, whole.tres_per_node, whole.time_limit_min)
        tres, per_node, minutes = size
        tasks = job.array_tasks
        return JobReq(int(job.job_id), str(job.user), str(job.account),
                      str(job.partition) or None, str(job.qos) or None, tres, per_node, minutes,
                      len(tasks) if tasks else 1)

    def __getitem__(self, job_id: int) -> JobReq:
        req = self.get(job_id)
        if req is None:
            raise KeyError(job_id)
        return req  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[int]:
        return (i for i, j in self._jobs.items() if not j.held)

    def __len__(self) -> int:
        return sum(1 for j in self._jobs.values() if not j.held)


def build_ledger(db: AssocDB, cluster: str, *, running: Iterable[tuple[JobReq, float | None]],
                 pending: Iterable[JobReq],
                 used_tres_mins: Mapping[int | str, Mapping[str, float]] | None = None,
                 used_wall_mins: Mapping[int | str, float] | None = None,
                 part_qos: Mapping[str, str] | None = None,
                 index: AssocIndex | None = None) -> LimitLedger:
    """The ledger of one pass: running jobs with their remaining minutes, pending jobs
    (for the submit counts), decayed usage (fairshare.tres_minutes of the usage state)."""
    led = LimitLedger(db, cluster, used_tres_mins=used_tres_mins, used_wall_mins=used_wall_mins,
                      part_qos=part_qos, index=index)
    led.add_running_jobs(running)
    led.add_pending_jobs(pending)
    return led


# ---- AccountingStorageEnforce ---------------------------------------------------------------
ENFORCE_WORDS = ("associations", "limits", "qos", "safe", "wckeys", "nojobs", "nosteps", "all")


def parse_enforce(text: str | None) -> frozenset[str]:
    """slurm.conf AccountingStorageEnforce: `limits` implies `associations`; `safe` implies
    `limits` and `associations`; `qos` implies `associations`; `all` is everything but
    nojobs/nosteps.  Unknown words raise ValueError (the controller refuses the config)."""
    out: set[str] = set()
    for w in (text or "").lower().replace(" ", "").split(","):
        if not w or w == "none" or w == "0":
            continue
        if w not in ENFORCE_WORDS:
            raise ValueError(f"Invalid AccountingStorageEnforce option: {w}")
        if w == "all":
            out |= {"associations", "limits", "qos", "safe", "wckeys"}
        else:
            out.add(w)
    if out & {"limits", "safe", "qos"}:
        out.add("associations")
    if "safe" in out:
        out.add("limits")
    return frozenset(out)
