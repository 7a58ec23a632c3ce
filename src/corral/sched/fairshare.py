"""Fairshare, pure: usage charging, decay, reset, and the fairshare factor.

- Usage is charged per TRES and as *billing* (TRESBillingWeights: a GPU-second costs what
  the admin says; without weights billing is the CPU count, as in Slurm), times the QoS
  UsageFactor, to the job's association and every ancestor (an account's usage is its
  subtree's), and to its QoS.
- Decay follows priority_multifactor.c: D = 1 - 0.693 / PriorityDecayHalfLife (seconds);
  accumulated usage is multiplied by D**elapsed, and a job's run of `delta` seconds adds
  `delta * D**delta` × TRES (× billing for the raw usage).
- PriorityUsageResetPeriod (NONE, NOW, DAILY, WEEKLY, MONTHLY, QUARTERLY, YEARLY) zeroes the
  usage at the next boundary after the last reset (`next_reset`, in UTC: Corral's times are
  UTC; Slurm uses the controller's local time).
- The factor: Fair Tree (the default since Slurm 19.05; fair_tree.html and fair_tree.c:
  Level FS = S / U among siblings, depth-first ranking, ties as documented) or classic
  (PriorityFlags=NO_FAIR_TREE; classic_fair_share.html: F = 2**(-UE/S)).

Nothing here reads a clock: `now` is always passed in.
"""

from __future__ import annotations

import calendar
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from corral.model.assoc import ROOT, SHARES_PARENT, AssocDB, Association, AssocIndex
from corral.model.tres import TresError, normalize_name

RESET_PERIODS = ("NONE", "NOW", "DAILY", "WEEKLY", "MONTHLY", "QUARTERLY", "YEARLY")


# ---- billing ----------------------------------------------------------------------
def parse_billing_weights(text: str) -> dict[str, float]:
    """`CPU=1.0,Mem=0.25G,GRES/gpu=2.0` → weights per unit (memory per MB: a `G` suffix
    means per GB, as slurm.conf(5) says)."""
    out: dict[str, float] = {}
    if not text or not text.strip():
        return out
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep:
            raise TresError(f"Invalid TRESBillingWeights '{text}'")
        key = normalize_name(name)
        v = value.strip()
        scale = 1.0
        if v and v[-1].upper() in "KMGTP":
            scale = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0 ** 2,
                     "P": 1024.0 ** 3}[v[-1].upper()]
            v = v[:-1]
        try:
            w = float(v)
        except ValueError:
            raise TresError(f"Invalid TRESBillingWeights '{text}'") from None
        out[key] = w / scale if key == "mem" else w
    return out


def billing(tres: Mapping[str, float], weights: Mapping[str, float],
            max_tres: bool = False) -> float:
    """A job's billable TRES.  No weights: its CPUs.  PriorityFlags=MAX_TRES: the largest
    weighted node TRES (cpu, mem, gres) plus the weighted global ones."""
    if not weights:
        return float(tres.get("cpu", 0))
    if not max_tres:
        return sum(tres.get(k, 0) * w for k, w in weights.items())
    node_part = 0.0
    rest = 0.0
    for k, w in weights.items():
        v = tres.get(k, 0) * w
        if k in ("cpu", "mem") or k.startswith("gres/"):
            node_part = max(node_part, v)
        else:
            rest += v
    return node_part + rest


# ---- decay and reset ----------------------------------------------------------------
def decay_rate(half_life_s: float) -> float:
    """Slurm's per-second decay factor D (1 when decay is off)."""
    if half_life_s <= 0:
        return 1.0
    return 1.0 - 0.693 / half_life_s


def decayed(value: float, elapsed_s: float, half_life_s: float) -> float:
    if elapsed_s <= 0:
        return value
    return value * decay_rate(half_life_s) ** elapsed_s


def run_charge(delta_s: float, half_life_s: float) -> float:
    """Seconds of running charged for a run of `delta_s` (Slurm: delta * D**delta)."""
    if delta_s <= 0:
        return 0.0
    return delta_s * decay_rate(half_life_s) ** delta_s


def next_reset(period: str, last_reset: float, now: float) -> float | None:
    """When usage is next zeroed after `last_reset` (priority_multifactor.c _next_reset);
    None for NONE (and NOW, which resets once, at once)."""
    p = period.upper()
    if p in ("NONE", "NOW"):
        return None
    tm = time.gmtime(last_reset)
    midnight = calendar.timegm((tm.tm_year, tm.tm_mon, tm.tm_mday, 0, 0, 0))
    day = 86400
    if p == "DAILY":
        t = midnight + day
        while t + day < now:
            t += day
        return float(t)
    if p == "WEEKLY":
        wday = (tm.tm_wday + 1) % 7  # Slurm's tm_wday: Sunday is 0
        t = midnight + day * (7 - wday)
        while t + 7 * day < now:
            t += 7 * day
        return float(t)
    year, mon = tm.tm_year, tm.tm_mon  # mon 1..12
    if p == "MONTHLY":
        year, mon = (year + 1, 1) if mon == 12 else (year, mon + 1)
    elif p == "QUARTERLY":
        nxt = next((m for m in (4, 7, 10) if mon < m), None)
        year, mon = (year, nxt) if nxt else (year + 1, 1)
    elif p == "YEARLY":
        year, mon = year + 1, 1
    else:
        raise ValueError(f"Invalid PriorityUsageResetPeriod {period}")
    return float(calendar.timegm((year, mon, 1, 0, 0, 0)))


# ---- usage state --------------------------------------------------------------------
@dataclass(slots=True)
class Usage:
    """Decayed usage of one association (its own jobs) or QoS: billing-seconds (Slurm's
    usage_raw), TRES-seconds per TRES (usage_tres_raw) and wall seconds (grp_used_wall)."""

    raw: float = 0.0
    tres: dict[str, float] = field(default_factory=dict)
    wall: float = 0.0

    def scaled(self, f: float) -> Usage:
        return Usage(self.raw * f, {k: v * f for k, v in self.tres.items()}, self.wall * f)


@dataclass(slots=True)
class UsageState:
    """What the controller keeps (and stores: `to_dict`) between passes."""

    assoc: dict[int, Usage] = field(default_factory=dict)
    qos: dict[str, Usage] = field(default_factory=dict)
    last_decay: float = 0.0
    last_reset: float = 0.0
    # job id -> the time up to which it has been charged (running jobs)
    charged_to: dict[int, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        def u(x: Usage) -> dict[str, object]:
            return {"raw": x.raw, "tres": x.tres, "wall": x.wall}
        return {"assoc": {str(k): u(v) for k, v in self.assoc.items()},
                "qos": {k: u(v) for k, v in self.qos.items()},
                "last_decay": self.last_decay, "last_reset": self.last_reset,
                "charged_to": {str(k): v for k, v in self.charged_to.items()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, object] | None) -> UsageState:
        if not d:
            return cls()

        def u(x: object) -> Usage:
            assert isinstance(x, dict)
            return Usage(float(x.get("raw", 0.0)),
                         {str(k): float(v) for k, v in dict(x.get("tres", {})).items()},
                         float(x.get("wall", 0.0)))
        assoc = d.get("assoc") or {}
        qos = d.get("qos") or {}
        charged = d.get("charged_to") or {}
        assert isinstance(assoc, dict) and isinstance(qos, dict) and isinstance(charged, dict)
        return cls({int(k): u(v) for k, v in assoc.items()}, {str(k): u(v) for k, v in qos.items()},
                   float(d.get("last_decay", 0.0) or 0.0),  # type: ignore[arg-type]
                   float(d.get("last_reset", 0.0) or 0.0),  # type: ignore[arg-type]
                   {int(k): float(v) for k, v in charged.items()})


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A running job as fairshare charges it."""

    job_id: int
    assoc_id: int
    qos: str | None
    start_time: float
    tres: Mapping[str, int]  # allocated: cpu, mem (MB), node, gres/gpu, …


@dataclass(frozen=True, slots=True)
class FairshareParams:
    half_life_s: float = 7 * 86400.0  # PriorityDecayHalfLife (default 7-0)
    reset_period: str = "NONE"  # PriorityUsageResetPeriod
    billing_weights: Mapping[str, float] = field(default_factory=dict)
    max_tres: bool = False  # PriorityFlags=MAX_TRES
    fair_tree: bool = True  # PriorityFlags=NO_FAIR_TREE turns it off


def advance(state: UsageState, now: float, running: Iterable[RunningJob],
            params: FairshareParams, usage_factor: Mapping[str, float] | None = None,
            partition_weights: Mapping[int, Mapping[str, float]] | None = None) -> UsageState:
    """The state at `now`: decay what was accumulated since `last_decay`, charge the
    running jobs for the time since they were last charged (a job charged for the first
    time from its start), reset at the reset boundary.  Jobs ended since the last call
    must have been passed with their final charge in an earlier call (or be charged with
    `charge_ended`).  `partition_weights`: per job id, its partition's TRESBillingWeights
    when they differ from the cluster's.  Returns a new state."""
    uf = usage_factor or {}
    out = UsageState({k: Usage(v.raw, dict(v.tres), v.wall) for k, v in state.assoc.items()},
                     {k: Usage(v.raw, dict(v.tres), v.wall) for k, v in state.qos.items()},
                     state.last_decay or now, state.last_reset or now, dict(state.charged_to))
    # reset
    if params.reset_period.upper() == "NOW" and state.last_reset == 0.0:
        out.assoc.clear()
        out.qos.clear()
        out.last_reset = now
    else:
        nxt = next_reset(params.reset_period, out.last_reset, now)
        if nxt is not None and now >= nxt:
            out.assoc.clear()
            out.qos.clear()
            out.last_reset = nxt
    # decay what is there
    elapsed = now - out.last_decay
    if elapsed > 0 and params.half_life_s > 0:
        f = decay_rate(params.half_life_s) ** elapsed
        out.assoc = {k: v.scaled(f) for k, v in out.assoc.items()}
        out.qos = {k: v.scaled(f) for k, v in out.qos.items()}
    out.last_decay = now
    # charge the running jobs
    seen: set[int] = set()
    for j in running:
        seen.add(j.job_id)
        since = max(out.charged_to.get(j.job_id, j.start_time), j.start_time)
        delta = now - since
        if delta <= 0:
            continue
        weights = (partition_weights or {}).get(j.job_id, params.billing_weights)
        _charge(out, j, delta, weights, params, uf)
        out.charged_to[j.job_id] = now
    out.charged_to = {k: v for k, v in out.charged_to.items() if k in seen}
    return out


def charge_ended(state: UsageState, job: RunningJob, end_time: float, params: FairshareParams,
                 usage_factor: Mapping[str, float] | None = None) -> None:
    """Charge a job that ended between two `advance` calls for its last stretch (in
    place: the controller calls it when the job ends)."""
    since = max(state.charged_to.pop(job.job_id, job.start_time), job.start_time)
    delta = end_time - since
    if delta > 0:
        _charge(state, job, delta, params.billing_weights, params, usage_factor or {})


def _charge(state: UsageState, j: RunningJob, delta: float, weights: Mapping[str, float],
            params: FairshareParams, uf: Mapping[str, float]) -> None:
    run = run_charge(delta, params.half_life_s)
    factor = uf.get(j.qos, 1.0) if j.qos else 1.0
    if factor < 0:
        factor = 1.0
    run *= factor
    bill = billing(j.tres, weights, params.max_tres)
    u = state.assoc.setdefault(j.assoc_id, Usage())
    u.raw += run * bill
    u.wall += run
    for k, v in j.tres.items():
        u.tres[k] = u.tres.get(k, 0.0) + run * v
    if j.qos:
        q = state.qos.setdefault(j.qos, Usage())
        q.raw += run * bill
        q.wall += run
        for k, v in j.tres.items():
            q.tres[k] = q.tres.get(k, 0.0) + run * v


def tree_usage(db: AssocDB, cluster: str, own: Mapping[int, Usage],
               index: AssocIndex | None = None) -> dict[int, Usage]:
    """Each association's usage including everything below it (Slurm charges parents).
    `index`: one already made over `db` (a pass makes one for all its stages)."""
    out: dict[int, Usage] = {}
    idx = index if index is not None else AssocIndex(db)
    for aid, u in own.items():
        a = db.assocs.get(aid)
        if a is None or a.cluster != cluster:
            continue
        for x in idx.chain(a):
            t = out.setdefault(x.id, Usage())
            t.raw += u.raw
            t.wall += u.wall
            for k, v in u.tres.items():
                t.tres[k] = t.tres.get(k, 0.0) + v
    return out


def tres_minutes(usage: Mapping[int | str, Usage]) -> dict[int | str, dict[str, float]]:
    """TRES-minutes per association / QoS, as limits_check's GrpTRESMins compares."""
    return {k: {t: v / 60.0 for t, v in u.tres.items()} for k, u in usage.items()}


# ---- the factor -------------------------------------------------------------------------
@dataclass(slots=True)
class ShareInfo:
    """One association's line of sshare: raw and normalised shares and usage, effective
    usage, Level FS (Fair Tree) and the fairshare factor (users; accounts: 0)."""

    assoc_id: int
    raw_shares: int
    norm_shares: float = 0.0
    raw_usage: float = 0.0
    norm_usage: float = 0.0
    effective_usage: float = 0.0
    level_fs: float = 0.0
    fairshare: float = 0.0


def _shares(a: Association) -> int:
    return a.shares


def fairshare_factors(db: AssocDB, cluster: str, own_usage: Mapping[int, Usage],
                      fair_tree: bool = True,
                      index: AssocIndex | None = None) -> dict[int, ShareInfo]:
    index = index if index is not None else AssocIndex(db)
    usage = {k: v.raw for k, v in tree_usage(db, cluster, own_usage, index).items()}
    if fair_tree:
        return fair_tree_factors(db, cluster, usage, index)
    return classic_factors(db, cluster, usage, index)


def _siblings_info(db: AssocIndex, cluster: str, usage: Mapping[int, float],
                   out: dict[int, ShareInfo]) -> None:
    """Shares norm (global product), raw and norm usage for every association."""
    root = db.find(cluster, ROOT)
    if root is None:
        return
    total = usage.get(root.id, 0.0)
    out[root.id] = ShareInfo(root.id, root.shares, 1.0, total, 1.0 if total else 0.0, 1.0)
    stack = [root]
    while stack:
        parent = stack.pop()
        kids = db.children(cluster, parent.account)
        level = sum(_shares(k) for k in kids if k.shares != SHARES_PARENT)
        for k in kids:
            raw = usage.get(k.id, 0.0)
            pinfo = out[parent.id]
            if k.shares == SHARES_PARENT:
                ns = pinfo.norm_shares
            else:
                ns = pinfo.norm_shares * (k.shares / level if level else 0.0)
            out[k.id] = ShareInfo(k.id, k.shares, ns, raw, raw / total if total else 0.0)
            if k.user is None:
                stack.append(k)


def fair_tree_factors(db: AssocDB, cluster: str, usage: Mapping[int, float],
                      index: AssocIndex | None = None) -> dict[int, ShareInfo]:
    """The Fair Tree algorithm: Level FS = S / U among siblings (S: shares over the
    siblings' shares; U: usage over the parent's usage), siblings sorted by Level FS
    (users before accounts on ties), depth-first; users ranked in that order, factor =
    rank / number of user associations.  Ties: sibling users with equal Level FS share a
    rank; a user tied with a sibling account gets the rank of that account's first user;
    tied sibling accounts have their children merged."""
    out: dict[int, ShareInfo] = {}
    idx = index if index is not None else AssocIndex(db)
    _siblings_info(idx, cluster, usage, out)
    root = idx.find(cluster, ROOT)
    if root is None:
        return out
    n_users = sum(1 for a in db.assocs.values() if a.cluster == cluster and a.user is not None)
    if n_users == 0:
        return out
    rank = [n_users, n_users]  # [rank, rank-no-ties]

    level_shares: dict[int, int] = {}

    def level_fs(a: Association, parent_id: int, siblings: list[Association],
                 parent_usage: float) -> float:
        if a.shares == SHARES_PARENT:
            return math.inf if a.user is not None else float("nan")
        total_shares = level_shares.get(parent_id)
        if total_shares is None:
            total_shares = sum(s.shares for s in siblings if s.shares != SHARES_PARENT)
            level_shares[parent_id] = total_shares
        s = a.shares / total_shares if total_shares else 0.0
        u = usage.get(a.id, 0.0) / parent_usage if parent_usage else 0.0
        info = out[a.id]
        info.effective_usage = u
        if s == 0:
            return 0.0
        return s / u if u else math.inf

    def visit(siblings: list[Association], account_tied: bool) -> None:
        # each sibling's parent usage (merged lists hold children of several accounts)
        lf: dict[int, float] = {}
        for a in siblings:
            parent = idx.parent_of(a)
            pu = usage.get(parent.id, 0.0) if parent is not None else 0.0
            peers = idx.children(cluster, parent.account) if parent is not None else [a]
            lf[a.id] = level_fs(a, parent.id if parent is not None else -1, peers, pu)
            out[a.id].level_fs = lf[a.id]
        order = sorted(siblings, key=lambda a: (-_sortable(lf[a.id]), a.user is None))
        prev: float | None = None
        i = 0
        while i < len(order):
            a = order[i]
            tied = account_tied if i == 0 else (prev is not None and prev == lf[a.id])
            if a.user is not None:
                if not tied:
                    rank[0] = rank[1]
                out[a.id].fairshare = rank[0] / n_users
                rank[1] -= 1
                i += 1
            else:
                j = i
                while j + 1 < len(order) and order[j + 1].user is None \
                        and lf[order[j + 1].id] == lf[a.id]:
                    j += 1
                merged: list[Association] = []
                for acct in order[i:j + 1]:
                    merged.extend(idx.children(cluster, acct.account))
                if merged:
                    visit(merged, tied)
                i = j + 1
            prev = lf[a.id]

    visit(idx.children(cluster, root.account), False)
    return out


def _sortable(x: float) -> float:
    return -1.0 if math.isnan(x) else x


def classic_factors(db: AssocDB, cluster: str, usage: Mapping[int, float],
                    index: AssocIndex | None = None) -> dict[int, ShareInfo]:
    """Classic fairshare: UE = UA + (UE_parent - UA) * S_child / S_siblings (first tier:
    UE = UA), F = 2**(-UE/S) with S the normalised shares (FairShare=parent: the parent's
    S and UE)."""
    out: dict[int, ShareInfo] = {}
    idx = index if index is not None else AssocIndex(db)
    _siblings_info(idx, cluster, usage, out)
    root = idx.find(cluster, ROOT)
    if root is None:
        return out
    stack = [root]
    while stack:
        parent = stack.pop()
        pinfo = out[parent.id]
        kids = idx.children(cluster, parent.account)
        level = sum(k.shares for k in kids if k.shares != SHARES_PARENT)
        for k in kids:
            info = out[k.id]
            if k.shares == SHARES_PARENT:
                info.effective_usage = pinfo.effective_usage
                info.norm_shares = pinfo.norm_shares
            elif parent.account == ROOT:
                info.effective_usage = info.norm_usage
            else:
                ua = info.norm_usage
                info.effective_usage = ua + (pinfo.effective_usage - ua) * (
                    k.shares / level if level else 0.0)
            if k.user is not None:
                s = info.norm_shares
                info.fairshare = 2 ** (-info.effective_usage / s) if s > 0 else 0.0
            else:
                stack.append(k)
    return out


def job_fairshare_factor(infos: Mapping[int, ShareInfo], assoc_id: int) -> float:
    """The fairshare factor priority/multifactor multiplies by PriorityWeightFairshare."""
    info = infos.get(assoc_id)
    return info.fairshare if info is not None else 0.0


class FairshareView:
    """What the priority stage reads in one pass: the factor of a job's association.
    Build one per PriorityCalcPeriod (or per pass: a Fair Tree run over 500 users costs
    milliseconds) from the committed `AssocDB` and the usage state."""

    def __init__(self, db: AssocDB, cluster: str, state: UsageState,
                 fair_tree: bool = True, index: AssocIndex | None = None) -> None:
        self.index = index if index is not None else AssocIndex(db)
        self.cluster = cluster
        self.infos = fairshare_factors(db, cluster, state.assoc, fair_tree, self.index)

    def factor(self, user: str, account: str, partition: str | None = None) -> float:
        a = self.index.job_assoc(self.cluster, user, account, partition)
        return self.infos[a.id].fairshare if a is not None and a.id in self.infos else 0.0


# ---- usage records (sreport) -------------------------------------------------------------
HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class UsageSpan:
    """A stretch a job ran: [start, end) under an association, with its TRES."""

    assoc_id: int
    start: float
    end: float
    tres: Mapping[str, int]
    billing: float = 0.0


def hourly_records(cluster: str, spans: Iterable[UsageSpan]) -> list[tuple[str, int, float,
                                                                           dict[str, float],
                                                                           float]]:
    """Split spans at hour boundaries: (cluster, assoc id, hour start, TRES-seconds,
    billing-seconds) per association and hour, summed (the store's UsageRecord fields;
    sreport reads them)."""
    acc: dict[tuple[int, float], tuple[dict[str, float], list[float]]] = {}
    for s in spans:
        t = s.start
        while t < s.end:
            hour = math.floor(t / HOUR) * HOUR
            stop = min(s.end, hour + HOUR)
            secs = stop - t
            tres, bill = acc.setdefault((s.assoc_id, hour), ({}, [0.0]))
            for k, v in s.tres.items():
                tres[k] = tres.get(k, 0.0) + v * secs
            bill[0] += s.billing * secs
            t = stop
    return [(cluster, aid, hour, tres, bill[0])
            for (aid, hour), (tres, bill) in sorted(acc.items(), key=lambda kv: (kv[0][1],
                                                                                   kv[0][0]))]
