"""The limits stage: association and QoS limits counted inside the pass.

`LimitGate` wraps one pass's `limits_check.LimitLedger` (running jobs, pending submit
counts, decayed usage).  Backfill asks it about each candidate in priority order, just
before trying to place it, and tells it about each start, so a job started earlier in
the same pass counts against the limits of the next ones.  A job over a limit waits with
Slurm's reason (AssocGrpGRES, QOSMaxJobsPerUserLimit, …) and reserves nothing: as in
Slurm, it does not hold back lower-priority jobs, and it starts in the first pass after
the limit allows it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from corral.model.assoc import AssocDB, AssocIndex
from corral.model.reasons import PendingReason, ReasonCode

from .fairshare import UsageState
from .limits_check import JobReq, LimitHit, LimitLedger, build_ledger


@dataclass(frozen=True, slots=True)
class PolicySnapshot:
    """What the pass knows of accounting: the association tree (immutable), what
    AccountingStorageEnforce enforces, each pending job's request and each running job's
    request with its remaining minutes, and the decayed usage per association / QoS."""

    db: AssocDB
    cluster: str
    enforce: frozenset[str] = frozenset()
    pending: Mapping[int, JobReq] = field(default_factory=dict)
    running: tuple[tuple[JobReq, float | None], ...] = ()
    used_tres_mins: Mapping[int | str, Mapping[str, float]] = field(default_factory=dict)
    usage: UsageState | None = None  # decayed usage: the fairshare factor reads it
    fair_tree: bool = True  # PriorityFlags without NO_FAIR_TREE
    part_qos: Mapping[str, str] = field(default_factory=dict)  # partition -> its QOS=

    @property
    def limits_enforced(self) -> bool:
        return "limits" in self.enforce


class LimitGate:
    """One pass's limit checks; candidate ids may be array-task ids (`tasks`: candidate
    id -> its record's id)."""

    def __init__(self, ledger: LimitLedger, reqs: Mapping[int, JobReq],
                 tasks: Mapping[int, int] | None = None) -> None:
        self.ledger = ledger
        self.reqs = reqs
        self.tasks = tasks or {}
        # the reason of each distinct hit, shared (jobs stopped by one full limit mostly
        # hit it alike)
        self._reasons: dict[LimitHit, PendingReason] = {}

    def _req(self, cid: int) -> JobReq | None:
        return self.reqs.get(self.tasks.get(cid, cid))

    def check(self, cid: int) -> PendingReason | None:
        req = self.reqs.get(self.tasks.get(cid, cid))  # (_req, inlined: every candidate)
        if req is None:
            return None
        hit = self.ledger.check_start(req)
        if hit is None:
            return None
        why = self._reasons.get(hit)
        if why is None:
            why = self._reasons[hit] = PendingReason(ReasonCode.LIMIT, label=hit.code,
                                                     note=hit.explain())
        return why

    def started(self, cid: int) -> None:
        req = self._req(cid)
        if req is not None:
            self.ledger.start(req)


def limit_gate(policy: PolicySnapshot | None, tasks: Mapping[int, int] | None = None,
               candidates: Iterable[int] = (), index: AssocIndex | None = None
               ) -> LimitGate | None:
    """The pass's gate, or None when limits are not enforced (nothing to check).
    `index`: the pass's index over `policy.db`, if it has one."""
    if policy is None or not policy.limits_enforced:
        return None
    # (the pending jobs' submit counts are not charged: only submission checks read them)
    ledger = build_ledger(policy.db, policy.cluster, running=policy.running, pending=(),
                          used_tres_mins=policy.used_tres_mins, part_qos=policy.part_qos,
                          index=index)
    return LimitGate(ledger, policy.pending, tasks)
