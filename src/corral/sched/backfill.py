"""One scheduling pass: priority order, then (conservative) backfill.

Pending jobs are taken in order of (partition PriorityTier desc, priority desc, submit time,
job id).  A job starts when it fits now without delaying any hold.  The first job of a
partition that cannot start is planned: the earliest time it fits, computed from the end
times of running jobs (and of jobs started earlier in this pass) and from the holds already
made; its resources are held from then on (a *hold*: the pass's plan, not a Slurm
reservation).  Lower-priority jobs may start now only if they leave every hold intact: they
end before it begins, or they use resources it does not need.  A job without a time limit
never ends, so it can only take resources no hold needs.  Later blocked jobs are planned
too, up to a budget (`max_planned`); past it they are not planned and show reason Priority.

Cost: a failed request is remembered by its shape (same partition and request), so
thousands of identical jobs cost one node scan; single-node searches use per-partition
indexes ordered by the best-fit key; planning walks only the nodes' own event lists (a
node's runs of fit for a share serve plans of any duration until the node changes), and a
single-node plan looks only at nodes whose earliest fit by releases alone (a lower bound,
cached per node until a job starts there) can beat the best start found so far; a
multi-node plan sweeps the nodes' feasible starts as they come in lower-bound order and
stops at the answer, so nodes free only later cost nothing.  Between passes (`_Kept`,
taken by one pass at a time) the nodes are kept: a node is refilled from its view only
when the view changed (compared by value) or the last pass started a job on it, and the
lower bounds (before they are raised to `now`), the plans' node lists and the static
reasons are kept until a node changes size or usability; each pass decides as one that
built everything afresh (tests/unit/test_sched_kept.py).  In the simulator's passes
(`Snapshot.starts_only`) a job is planned only while some later job fits now, found by
trying the later jobs ahead (`_may_start_from`; tests/unit/test_sched_starts_only.py).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from heapq import heappop, heappush
from operator import itemgetter
from typing import Any, Protocol

from corral.model.job import NodeAlloc
from corral.model.node import Partition
from corral.model.reasons import PendingReason, ReasonCode, reason

from .features import Constraint, ConstraintError, parse_constraint
from .preempt import Candidate, PreemptPolicy, Victim, choose_on_node
from .select import (
    NodeLike,
    Request,
    allocate,
    idle_copy,
    make_request,
    natural_key,
    select_nodes,
)
from .snapshot import INFINITE_TIME, NodeView, PendingView, Placement, RunningView, Snapshot

PARTITION_INACTIVE = ReasonCode.PARTITION_INACTIVE
PARTITION_CONFIG = ReasonCode.PARTITION_CONFIG
_NEVER_HERE = (ReasonCode.PARTITION_CONFIG, ReasonCode.PARTITION_NODE_LIMIT,
               ReasonCode.BAD_CONSTRAINTS)
DEFAULT_MAX_PLANNED = 64

# Event deltas on a node: (time, cpus, mem, gpus, jobs, exclusive jobs)
_Event = tuple[float, int, int, int, int, int]


class _Node:
    """A node's state during one pass: free resources now, and what changes later."""

    __slots__ = (
        "name", "cpus", "mem", "gpus", "free_cpus", "free_mem", "free_gpus", "usable",
        "weight", "job_count", "exclusive", "rank", "key", "releases",
        "holds", "events", "static_key", "part_names", "plan_cache", "features",
        "gpu_type", "tmp_disk", "fit_cache", "sorted_releases",
    )

    name: str
    cpus: int
    mem: int
    gpus: int
    free_cpus: int
    free_mem: int
    free_gpus: list[int]
    usable: bool
    weight: int
    job_count: int
    exclusive: bool
    tmp_disk: int

    def __init__(self, v: NodeView, rank: int) -> None:
        self.name = v.name
        self.cpus = v.cpus
        self.mem = v.mem
        self.gpus = v.gpus
        self.exclusive = v.exclusive
        self.free_cpus = 0 if v.exclusive else v.free_cpus
        self.free_mem = 0 if v.exclusive else v.free_mem
        self.free_gpus = [] if v.exclusive else sorted(v.free_gpus)
        self.usable = v.usable
        self.weight = v.weight
        self.job_count = v.job_count
        self.features = v.features
        self.gpu_type = v.gpu_type
        self.tmp_disk = v.tmp_disk
        self.rank = rank
        self.part_names: tuple[str, ...] = ()  # the partitions it belongs to
        self.key: tuple[int, tuple[int, int, int]] | None = None
        self.releases: list[_Event] = []  # resources coming back when jobs end
        self.holds: list[tuple[float, float, int, int, int, bool]] = []  # planned jobs' resources
        self.events: list[_Event] | None = None  # releases and holds, sorted
        # the runs of time a share fits (_fit_runs) by (cpus, mem, gpus, whole), for jobs
        # of any duration; valid until the node changes (a hold, a start) or `now` does
        self.plan_cache: dict[tuple[Any, ...], list[tuple[float, float]]] = {}
        # earliest fit by releases alone, by (cpus, mem, gpus, whole), before it is raised
        # to `now` (-inf: fits on what is free): a lower bound of any plan's start here,
        # valid while the free resources and releases are the same (holds do not change
        # it, nor does `now`), so a node's answers outlive the pass (_Kept)
        self.fit_cache: dict[tuple[int, int, int, bool], float] = {}
        self.sorted_releases: list[_Event] | None = None
        self.static_key = (v.gpus, v.cpus, v.weight, rank)

    def refill(self, v: NodeView) -> None:
        """Made again from `v`, a view of the same node of the same size, weight and
        features (what __init__ sets from a view's other fields, and no holds, no
        releases, nothing cached)."""
        x = self.exclusive = v.exclusive
        self.free_cpus = 0 if x else v.free_cpus
        self.free_mem = 0 if x else v.free_mem
        self.free_gpus = [] if x else sorted(v.free_gpus)
        self.usable = v.usable
        self.job_count = v.job_count
        self.releases = []
        self.holds = []
        self.events = None
        self.plan_cache = {}
        self.fit_cache = {}
        self.sorted_releases = None

    def index_key(self) -> tuple[int, tuple[int, int, int]] | None:
        if not self.usable or self.exclusive or self.free_cpus <= 0:
            return None
        return len(self.free_gpus), (self.free_cpus, self.weight, self.rank)

    def event_list(self) -> list[_Event]:
        if self.events is None:
            ev = list(self.releases)
            for start, end, c, m, g, whole in self.holds:
                if whole:
                    c, m, g = self.cpus, self.mem, self.gpus
                ev.append((start, -c, -m, -g, 1, 0))
                if end != INFINITE_TIME:
                    ev.append((end, c, m, g, -1, 0))
            ev.sort(key=_TIME)
            self.events = ev
        return self.events


_TIME = itemgetter(0)  # an event's time

_NAME_ORDER: dict[tuple[str, ...], list[str]] = {}


def _natural_order(names: tuple[str, ...]) -> list[str]:
    """The node names in natural order, remembered: a cluster's nodes rarely change, and
    sorting them every pass cost more than the rest of setting the pass up."""
    found = _NAME_ORDER.get(names)
    if found is None:
        if len(_NAME_ORDER) > 8:
            _NAME_ORDER.clear()
        found = _NAME_ORDER[names] = sorted(names, key=natural_key)
    return found


# whether a plain request fits on a partition's idle sample (_Pass._fits_idle), by the
# request and the sample's nodes: a pure function's answers, kept across passes
_FITS_IDLE: dict[tuple[Any, ...], bool] = {}


# make_request's answers by (job shape, DefMemPerCPU): a pure function's, kept across passes
_REQUESTS: dict[tuple[Any, ...], Request] = {}


def _request(job: PendingView, shape: tuple[Any, ...], def_mem: int) -> Request:
    """make_request(job, def_mem), `shape` being every field of `job` it reads."""
    key = (shape, def_mem)
    found = _REQUESTS.get(key)
    if found is None:
        if len(_REQUESTS) >= 4096:
            _REQUESTS.clear()
        found = _REQUESTS[key] = make_request(job, def_mem)
    return found


# (lower bound, best-fit key, node, cpus, mem, gpus) of one node for one request
_Bound = tuple[float, tuple[int, int, int, int], _Node, int, int, int]


class _Bounds:
    __slots__ = ("order", "entry", "share", "seen")

    def __init__(self, order: list[_Bound], entry: dict[int, _Bound],
                 share: dict[int, tuple[_Node, int, int, int]], seen: int) -> None:
        self.order = order  # by (bound, best-fit key)
        self.entry = entry  # node rank -> its place in `order`
        self.share = share  # node rank -> (node, cpus, mem, gpus) the request asks of it
        self.seen = seen  # starts of the pass already reflected


class _PartIndex:
    """Usable nodes of a partition with free CPUs, bucketed by free GPU count and sorted by
    (free CPUs, weight, name rank) inside a bucket: best-fit order without a full sort."""

    __slots__ = ("buckets", "levels")

    def __init__(self) -> None:
        self.buckets: dict[int, list[tuple[int, int, int]]] = {}
        self.levels: list[int] = []

    def copy(self) -> _PartIndex:
        out = _PartIndex()
        out.buckets = {level: list(bucket) for level, bucket in self.buckets.items()}
        out.levels = list(self.levels)
        return out

    def add(self, key: tuple[int, tuple[int, int, int]]) -> None:
        level, entry = key
        bucket = self.buckets.get(level)
        if bucket is None:
            bucket = self.buckets[level] = []
            insort(self.levels, level)
        insort(bucket, entry)

    def remove(self, key: tuple[int, tuple[int, int, int]]) -> None:
        level, entry = key
        bucket = self.buckets[level]
        del bucket[bisect_left(bucket, entry)]

    def ordered(self, by_rank: list[_Node], min_gpus: int, min_cpus: int,
                skip: frozenset[str]) -> Iterator[NodeLike]:
        probe = (min_cpus,)
        for level in self.levels:
            if level < min_gpus:
                continue
            bucket = self.buckets[level]
            for i in range(bisect_left(bucket, probe), len(bucket)):
                node = by_rank[bucket[i][2]]
                if node.name not in skip:
                    yield node


def _fits_profile(node: _Node, cpus: int, mem: int, gpus: int, whole: bool,
                  now: float, end: float) -> bool:
    """Would taking (cpus, mem, gpus) on `node` from now until `end` leave every
    hold on it whole?  Only hold starts lower what is free, so the check runs at now and
    at each event before `end`."""
    c, m, g, j, x = node.free_cpus, node.free_mem, len(node.free_gpus), node.job_count, int(node.exclusive)
    nc, nm, ng, nj = _needs(node, cpus, mem, gpus, whole)  # (_good, inlined)
    for t, dc, dm, dg, dj, dx in node.event_list():
        if t > now:
            if t >= end:
                break
            if not (x <= 0 and j <= nj and c >= nc and m >= nm and g >= ng):
                return False
        c += dc
        m += dm
        g += dg
        j += dj
        x += dx
    return x <= 0 and j <= nj and c >= nc and m >= nm and g >= ng


_NO_JOB_LIMIT = 1 << 62  # (a job count no node reaches: only a whole-node job needs 0)


def _needs(node: _Node, cpus: int, mem: int, gpus: int, whole: bool
           ) -> tuple[int, int, int, int]:
    """What `_good` asks of the free resources, as (cpus, mem, gpus, most jobs there)."""
    if whole:
        return node.cpus, node.mem, node.gpus, 0
    return cpus, mem, gpus, _NO_JOB_LIMIT


def _fit_runs(node: _Node, cpus: int, mem: int, gpus: int, whole: bool,
              now: float) -> list[tuple[float, float]]:
    """The maximal runs [a, b) of time from `now` on during which the job's share fits on
    `node` (b = INFINITE_TIME for the last if it never stops fitting).  Fit turns true only
    when resources come back (a release or a hold's end), so run starts are event times.
    Independent of the job's duration, so one answer serves every job of the same share
    until the node changes (`_spans`)."""
    c, m, g, j, x = node.free_cpus, node.free_mem, len(node.free_gpus), node.job_count, int(node.exclusive)
    nc, nm, ng, nj = _needs(node, cpus, mem, gpus, whole)  # (_good, inlined)
    events = node.event_list()
    monotone = not node.holds  # without holds resources only come back
    i, n = 0, len(events)
    while i < n and events[i][0] <= now:
        _, dc, dm, dg, dj, dx = events[i]
        c += dc
        m += dm
        g += dg
        j += dj
        x += dx
        i += 1
    good = x <= 0 and j <= nj and c >= nc and m >= nm and g >= ng
    if good and monotone:
        return [(now, INFINITE_TIME)]
    out: list[tuple[float, float]] = []
    run_start = now
    while i < n:
        t = events[i][0]
        while i < n and events[i][0] == t:
            _, dc, dm, dg, dj, dx = events[i]
            c += dc
            m += dm
            g += dg
            j += dj
            x += dx
            i += 1
        now_good = x <= 0 and j <= nj and c >= nc and m >= nm and g >= ng
        if good and not now_good:
            out.append((run_start, t))
        elif now_good and not good:
            run_start = t
            if monotone:
                return [(t, INFINITE_TIME)]
        good = now_good
    if good:
        out.append((run_start, INFINITE_TIME))
    return out


def _spans(runs: list[tuple[float, float]], duration: float) -> list[tuple[float, float]]:
    """Closed intervals [a, b] of start times at which a job of `duration` fits for its
    whole duration, from the node's `_fit_runs`."""
    return [(a, b if b == INFINITE_TIME else b - duration) for a, b in runs
            if b == INFINITE_TIME or a + duration <= b]


def _earliest_fit(node: _Node, cpus: int, mem: int, gpus: int, whole: bool,
                  now: float) -> float:
    at = _earliest_fit_raw(node, cpus, mem, gpus, whole)
    return at if at > now else now


def _earliest_fit_raw(node: _Node, cpus: int, mem: int, gpus: int, whole: bool) -> float:
    """The earliest time the job fits on `node` counting only the releases of running jobs
    (holds ignored), or INFINITE_TIME.  Holds only take resources away for a while, so no
    plan can start the job here earlier: a lower bound of `_fit_runs`' first start.
    Releases only give resources back, so once it fits it keeps fitting: the answer is
    the time of the release after which it first fits (`now` for one already past).
    `_earliest_fit_raw`: the same before it is raised to `now` (-inf: it fits now)."""
    key = (cpus, mem, gpus, whole)
    at = node.fit_cache.get(key)
    if at is None:
        c, m, g, j, x = node.free_cpus, node.free_mem, len(node.free_gpus), node.job_count, int(node.exclusive)
        nc, nm, ng, nj = _needs(node, cpus, mem, gpus, whole)  # (_good, inlined)
        at = INFINITE_TIME
        if x <= 0 and j <= nj and c >= nc and m >= nm and g >= ng:
            at = _FITS_NOW
        else:
            releases = node.sorted_releases
            if releases is None:
                releases = node.sorted_releases = sorted(node.releases)
            for t, dc, dm, dg, dj, dx in releases:
                c += dc
                m += dm
                g += dg
                j += dj
                x += dx
                if x <= 0 and j <= nj and c >= nc and m >= nm and g >= ng:
                    at = t
                    break
        node.fit_cache[key] = at
    return at


_FITS_NOW = float("-inf")
_LAST_KEY = (INFINITE_TIME,)  # after every best-fit key (of ints)


class _NodeCandidates:
    """A node's running jobs as candidates for one (preemptor QoS, partition), with what
    is derived from them, kept until a victim leaves the node."""

    __slots__ = ("items", "split", "chosen")

    def __init__(self, items: list[tuple[Candidate, bool, bool]]) -> None:
        self.items = items
        # whole-node request -> (stuck, candidates, forced, cheapest candidate's cost)
        self.split: dict[bool, tuple[bool, list[Candidate], list[Candidate],
                                     tuple[float, float] | None]] = {}
        # (free, need, whole-node request) -> choose_on_node's answer
        self.chosen: dict[tuple[tuple[int, int, int], tuple[int, int, int], bool],
                          tuple[tuple[float, float], list[int]] | None] = {}


def _split_candidates(items: list[tuple[Candidate, bool, bool]], whole: bool
                      ) -> tuple[bool, list[Candidate], list[Candidate],
                                 tuple[float, float] | None]:
    """(stuck, optional victims, victims that must go, the cheapest optional one's cost):
    a job that must go (exclusive, or any for a whole-node request) but may not is stuck."""
    cands: list[Candidate] = []
    forced: list[Candidate] = []
    for item, may, exclusive in items:
        must = exclusive or whole
        if must and not may:
            return True, [], [], None
        if may:
            (forced if must else cands).append(item)
    return False, cands, forced, min((x[0] for x in cands), default=None)


def _made_of(v: NodeView) -> tuple[Any, ...]:
    """What a `_Node` is made of (its view's fields; the GPU list itself, compared by
    value: a caller may change a view in place between passes)."""
    return (v.cpus, v.mem, v.gpus, v.free_cpus, v.free_mem, list(v.free_gpus), v.usable,
            v.weight, v.job_count, v.exclusive, v.features, v.gpu_type, v.tmp_disk)


class _Kept:
    """The nodes of the last pass (`_Pass._reuse`): the same nodes and partitions
    (`structure`) give the same ranks, memberships and partition lists, and most nodes
    are as the last pass found them, so most of the pass's setup can be kept."""

    __slots__ = ("structure", "by_rank", "nodes", "part_nodes", "index", "made", "keys",
                 "changed", "plan_members", "raw_bounds", "touched", "static")

    def __init__(self, structure: tuple[Any, ...], by_rank: list[_Node],
                 nodes: dict[str, _Node], part_nodes: dict[str, list[_Node]],
                 index: dict[str, _PartIndex], made: list[tuple[Any, ...]],
                 keys: list[tuple[int, tuple[int, int, int]] | None]) -> None:
        self.structure = structure
        self.by_rank = by_rank
        self.nodes = nodes
        self.part_nodes = part_nodes
        self.index = index  # each partition's index as the pass starts (the pass copies it)
        self.made = made  # by rank: what the node was made of (_made_of)
        self.keys = keys  # by rank: its key in `index`
        self.changed: set[int] = set()  # ranks of the nodes the last pass changed
        # _Pass._plan_nodes' answers and the raw lower bounds over them (_RawBounds, by the
        # answer's id), and the static reasons: valid while no node is made again or
        # changes usable
        self.plan_members: dict[tuple[str, Request, int], list[tuple[_Node, int, int, int]]] = {}
        self.raw_bounds: dict[int, _RawBounds] = {}
        # per pass since they were made, the ranks whose earliest fits may have changed
        self.touched: list[set[int]] = []
        # _Pass._static_reason's answers by job shape, with the partition's limits
        self.static: dict[tuple[Any, ...], tuple[tuple[Any, ...], PendingReason | None]] = {}

    def forget_plans(self) -> None:
        self.plan_members.clear()
        self.raw_bounds.clear()
        self.touched.clear()
        self.static.clear()


class _RawBounds:
    """The nodes of a `_plan_nodes` answer with their raw earliest fit
    (`_earliest_fit_raw`), in order of (raw fit, best-fit key), as of the start of the
    pass `upto` counts to; brought up to date by the ranks touched since."""

    __slots__ = ("fits", "order", "entry", "share", "upto")

    def __init__(self, fits: list[tuple[_Node, int, int, int]], order: list[_Bound],
                 entry: dict[int, _Bound], share: dict[int, tuple[_Node, int, int, int]],
                 upto: int) -> None:
        self.fits = fits  # (kept alive: it is known by its id)
        self.order = order
        self.entry = entry
        self.share = share
        self.upto = upto


class BackfillMemo:
    """What backfill keeps between one caller's passes (the core's `Passes`, which the
    simulator drives too): the last pass's nodes (`_Kept`) per scope — the whole cluster
    (""), each reservation's nodes — taken by the next pass over the same scope and given
    back by it.  Owned by the caller, so `schedule()` stays a function of its arguments
    (the kept nodes are checked against the snapshot by value: a pass decides as one
    built afresh); without a memo a pass builds everything afresh."""

    __slots__ = ("scopes",)

    def __init__(self) -> None:
        self.scopes: dict[str, _Kept] = {}


class Gate(Protocol):
    """The limits stage as backfill sees it (sched/limits.py LimitGate)."""

    def check(self, cid: int) -> PendingReason | None: ...
    def started(self, cid: int) -> None: ...


class _Pass:
    gate: Gate | None = None
    timer: Callable[[], float] | None = None  # measures the preemption checks

    def __init__(self, snap: Snapshot, max_planned: int,
                 priorities: dict[int, int] | None = None, kept: _Kept | None = None) -> None:
        self.snap = snap
        self.now = snap.now
        self.max_planned = max_planned
        self.priorities = priorities
        self.decision = Placement()
        self._most_free: dict[str, tuple[int, int, int]] = {}
        names = _natural_order(tuple(snap.nodes))
        views = snap.nodes
        parts = snap.partitions
        # what the nodes' ranks and partitions are made of
        structure = (tuple(names), tuple([(p.name, tuple(p.nodes)) for p in parts.values()]),
                     tuple([views[name].partitions for name in names]))
        releases: dict[str, list[_Event]] = {}
        found = releases.get
        for r in snap.running:
            end = r.end_time
            if end == INFINITE_TIME:
                continue
            x = -1 if r.exclusive else 0
            for a in r.alloc:
                event = (end, a.cpus, a.mem_mb, len(a.gpus), -1, x)
                got = found(a.node)
                if got is None:
                    releases[a.node] = [event]
                else:
                    got.append(event)
        if kept is not None and kept.structure == structure:
            self._reuse(kept, names, releases)
        else:
            self._build(names, structure, releases)
        # [reservations hook] advanced reservations' node windows (sched/reserved.py) are
        # held whole, so a job fits on such a node only if it ends before the window.
        self.windows: dict[str, list[tuple[float, float]]] = {}  # (preemption skips them)
        for name, start, end in snap.blocked:
            if name in self.nodes:
                self.nodes[name].holds.append((start, end, 0, 0, 0, True))
                self.windows.setdefault(name, []).append((start, end))
        self.index = {p: idx.copy() for p, idx in self._kept.index.items()}
        self.requests: dict[tuple[Any, ...], Request] = {}
        self.failed_now: dict[tuple[Any, ...], float] = {}  # shape -> shortest duration that failed
        self.plan_failed: dict[tuple[Any, ...], float] = {}
        self.static: dict[tuple[Any, ...], PendingReason | None] = {}
        self.planned_count = 0
        # (_plan_nodes' answers depend on what the nodes are, not on what is free: kept)
        self._plan_members = self._kept.plan_members
        # nodes a job started on in this pass, in order: the lower bounds to refresh
        self._started_on: list[_Node] = []
        # [preemption hook] running jobs by node, when preemption is on (sched/preempt.py)
        self.preempt = snap.preempt if snap.preempt is not None and snap.preempt.active \
            else None
        self.running_on: dict[str, list[RunningView]] = {}
        self._victims: dict[int, tuple[Victim, tuple[float, float]]] = {}
        # (preemptor QoS, partition) -> node -> its running jobs as candidates
        self._node_candidates: dict[tuple[str, str], dict[str, _NodeCandidates]] = {}
        # request shapes (with the QoS) for which no victims made room: the pass only
        # takes resources, so they will not later in it either
        self._preempt_failed: set[tuple[Any, ...]] = set()
        if self.preempt is not None:
            for r in snap.running:
                for a in r.alloc:
                    self.running_on.setdefault(a.node, []).append(r)
        # plans' candidates in order of lower bound, per member list (kept alive in
        # _plan_members, so its id is stable); see _bounds_of
        self._bounds: dict[int, _Bounds] = {}
        self._groups: dict[tuple[str, str], list[list[NodeView]]] = {}
        # job shapes that no node can take now (_may_start_from)
        self._never_now: set[tuple[Any, ...]] = set()
        # the nodes where the job _may_start_from found fits now (None: not tried)
        self._may_start_on: set[str] | None = None
        self._group_sigs: dict[tuple[str, str, int], tuple[tuple[Any, ...], ...]] = {}

    # ---- the nodes' state, kept between passes ---------------------------------------
    def _build(self, names: list[str], structure: tuple[Any, ...],
               releases: dict[str, list[_Event]]) -> None:
        snap = self.snap
        views = snap.nodes
        self.by_rank = [_Node(views[name], i) for i, name in enumerate(names)]
        self.nodes = {n.name: n for n in self.by_rank}
        for node in self.by_rank:
            node.releases = releases.get(node.name) or []
        # A node belongs to a partition listed on the node or naming the node.
        members: dict[str, dict[str, _Node]] = {p: {} for p in snap.partitions}
        for p in snap.partitions.values():
            for name in p.nodes:
                if name in self.nodes:
                    members[p.name][name] = self.nodes[name]
        for v in views.values():
            for p_name in v.partitions:
                if p_name in members:
                    members[p_name][v.name] = self.nodes[v.name]
        self.part_nodes = {p: sorted(m.values(), key=lambda n: n.rank) for p, m in members.items()}
        index: dict[str, _PartIndex] = {}
        of_node: dict[int, list[str]] = {}
        for p_name, plist in self.part_nodes.items():
            index[p_name] = _PartIndex()
            for node in plist:
                of_node.setdefault(node.rank, []).append(p_name)
        for node in self.by_rank:
            node.part_names = tuple(of_node.get(node.rank, ()))
            node.key = node.index_key()
            if node.key is not None:
                for p_name in node.part_names:
                    index[p_name].add(node.key)
        self._kept = _Kept(structure, self.by_rank, self.nodes, self.part_nodes, index,
                           [_made_of(views[name]) for name in names],
                           [n.key for n in self.by_rank])

    def _reuse(self, kept: _Kept, names: list[str], releases: dict[str, list[_Event]]) -> None:
        """The last pass's nodes, for the same nodes and partitions: a node is made again
        only if its view changed or the last pass changed it (a start, a victim); the
        others lose the last pass's holds and plans but keep their earliest fits while
        their releases are the same; the partitions' indexes (as at the pass's start) are
        mended for the nodes made again."""
        views = self.snap.nodes
        by_rank = kept.by_rank
        made = kept.made
        keys = kept.keys
        index = kept.index
        changed = kept.changed
        empty: list[_Event] = []
        remade = False
        touched: set[int] = set()  # ranks whose earliest fits may have changed
        for i, name in enumerate(names):
            v = views[name]
            node = by_rank[i]
            # (_made_of inlined, the GPU list compared where it is)
            was = made[i]
            if i in changed or was != (
                    v.cpus, v.mem, v.gpus, v.free_cpus, v.free_mem, v.free_gpus, v.usable,
                    v.weight, v.job_count, v.exclusive, v.features, v.gpu_type, v.tmp_disk):
                now_made = _made_of(v)
                touched.add(i)
                if was[:3] == now_made[:3] and was[7] == now_made[7] \
                        and was[10:] == now_made[10:]:  # (the same size, weight, features)
                    fresh = node
                    fresh.refill(v)
                    if was[6] != now_made[6]:  # (usable: which nodes plans may use)
                        remade = True
                else:
                    fresh = _Node(v, i)
                    fresh.part_names = node.part_names
                    by_rank[i] = kept.nodes[name] = fresh
                    remade = True
                fresh.releases = releases.get(name) or []
                key = fresh.key = fresh.index_key()
                old = keys[i]
                if key != old:
                    for p_name in node.part_names:
                        idx = index[p_name]
                        if old is not None:
                            idx.remove(old)
                        if key is not None:
                            idx.add(key)
                    keys[i] = key
                made[i] = now_made
                continue
            if node.holds:
                node.holds = []
            node.events = None
            if node.plan_cache:
                node.plan_cache = {}
            mine = releases.get(name) or empty
            if mine != node.releases:
                node.releases = mine if mine is not empty else []
                node.sorted_releases = None
                node.fit_cache = {}
                touched.add(i)
        self.by_rank = by_rank
        self.nodes = kept.nodes
        self.part_nodes = kept.part_nodes
        if remade:
            for p_name, plist in self.part_nodes.items():
                self.part_nodes[p_name] = [by_rank[n.rank] for n in plist]
            kept.forget_plans()
        else:
            if touched:
                kept.touched.append(touched)
            if len(kept.touched) > 256 or len(kept.plan_members) > 256 \
                    or len(kept.static) > 1024:
                kept.forget_plans()
        self._kept = kept

    def kept(self) -> _Kept:
        """The nodes for the next pass, with those this one changed marked."""
        kept = self._kept
        kept.changed = {n.rank for n in self._started_on}
        return kept

    # ---- starting jobs now ----------------------------------------------------------
    def try_start(self, req: Request, part: str, end: float) -> list[NodeAlloc] | None:
        if part not in self.index:
            return None
        required: list[NodeLike] = []
        for name in req.req_nodes:
            node = self.nodes.get(name)
            if node is None or not node.usable or part not in node.part_names \
                    or name in req.exc_nodes:
                return None
            required.append(node)
        now = self.now

        def extra(node: Any, c: int, m: int, g: int, whole: bool) -> bool:
            return not node.holds or _fits_profile(node, c, m, g, whole, now, end)

        min_cpus = req.cpus_per_task if req.exclusive else req.min_cpus_per_node()
        min_gpus = 0 if req.exclusive else req.min_gpus_per_node()
        ordered = self.index[part].ordered(self.by_rank, min_gpus, min_cpus, req.exc_nodes)
        return allocate(req, required, ordered, extra)

    def commit(self, allocs: list[NodeAlloc], end: float, exclusive: bool) -> None:
        self._started_on.extend(self.nodes[a.node] for a in allocs)
        for a in allocs:
            node = self.nodes[a.node]
            node.free_cpus -= a.cpus
            node.free_mem -= a.mem_mb
            if a.gpus:
                taken = set(a.gpus)
                node.free_gpus = [i for i in node.free_gpus if i not in taken]
            node.job_count += 1
            if exclusive:
                node.exclusive = True
            if end != INFINITE_TIME:
                node.releases.append((end, a.cpus, a.mem_mb, len(a.gpus), -1, -int(exclusive)))
                node.events = None
            node.plan_cache.clear()
            node.fit_cache.clear()
            node.sorted_releases = None
            self._reindex(node)

    def _reindex(self, node: _Node) -> None:
        new = node.index_key()
        if new == node.key:
            return
        for p_name in node.part_names:
            idx = self.index[p_name]
            if node.key is not None:
                idx.remove(node.key)
            if new is not None:
                idx.add(new)
        node.key = new

    # ---- preemption (sched/preempt.py) ------------------------------------------
    def try_preempt(self, job: PendingView, req: Request, end: float,
                    prune: bool = True) -> tuple[list[NodeAlloc], list[int]] | None:
        """Where `job` would start now if some running jobs it may preempt were gone, and
        which: per node the cheapest victims that make room (`choose_on_node`), the nodes
        whose victims cost least first.  The victims' resources go to `job` in this pass
        (no later job takes them); holds of planned jobs are not protected from it.
        For a one-node job, a node whose cheapest possible set cannot beat the best found
        is skipped (`prune`); if the best then does not take the job, all are tried."""
        policy = self.preempt
        assert policy is not None
        now = self.now
        k = req.num_nodes
        per_node = req.tasks_per_node or -(-req.tasks // k)
        options: list[tuple[tuple[float, float], int, _Node, list[int]]] = []
        con = _constraint(req)
        key = (job.qos, job.partition)
        per_node_cands = self._node_candidates.get(key)
        if per_node_cands is None:
            per_node_cands = self._node_candidates[key] = {}
        best: tuple[float, float] | None = None
        pruned = False
        fixed = None if req.exclusive else req.node_independent_demand(per_node)
        whole = req.exclusive
        windows = self.windows
        for node in self.part_nodes.get(job.partition, ()):
            if not node.usable or node.name in req.exc_nodes \
                    or (con is not None and not con.node_may(node.features)) \
                    or (req.filters_nodes and not req.node_may(node)):
                continue
            if windows and any(s < end and now < e for s, e in windows.get(node.name, ())):
                continue  # [quality] a reservation's node, in its window: not this job's
            need = (node.cpus, node.mem, node.gpus) if whole \
                else fixed if fixed is not None else req.demand(node, per_node)
            if need[0] > node.cpus or need[1] > node.mem or need[2] > node.gpus:
                continue
            here = per_node_cands.get(node.name)
            if here is None:
                here = per_node_cands[node.name] = _NodeCandidates(
                    self._candidates_on(node, job, policy, now))
            split = here.split.get(whole)
            if split is None:
                split = here.split[whole] = _split_candidates(here.items, whole)
            stuck, cands, forced, cheapest = split
            if stuck or (not cands and not forced):
                continue
            if prune and k == 1 and best is not None and cheapest is not None \
                    and not forced and cheapest >= best:
                pruned = True  # even its cheapest victim costs as much as the best node
                continue
            free = (0 if node.exclusive and not forced else node.free_cpus,
                    0 if node.exclusive and not forced else node.free_mem,
                    0 if node.exclusive and not forced else len(node.free_gpus))
            if node.exclusive and forced:
                free = (node.cpus - sum(x[1] for x in forced),
                        node.mem - sum(x[2] for x in forced),
                        node.gpus - sum(x[3] for x in forced))
            # (the same need on the same free resources: the same answer, for jobs of
            # one shape asking in turn)
            asked = (free, need, whole)
            if asked in here.chosen:
                got = here.chosen[asked]
            else:
                got = here.chosen[asked] = choose_on_node(free, need, cands, forced)
            if got is None or not got[1]:
                continue
            options.append((got[0], node.rank, node, got[1]))
            if best is None or got[0] < best:
                best = got[0]
        if len(options) < k:
            return self.try_preempt(job, req, end, prune=False) if pruned else None
        options.sort(key=lambda o: (o[0], o[1]))
        n = k
        while True:  # the cheapest k nodes almost always do; more only if they do not
            chosen = options[:n]
            views = [self._freed_view(node, ids) for _, _, node, ids in chosen]
            allocs = allocate(req, [v for v in views if v.name in req.req_nodes],
                              [v for v in views if v.name not in req.req_nodes])
            if allocs is not None:
                used = {a.node for a in allocs}
                victims = list(dict.fromkeys(i for _, _, node, ids in chosen
                                             if node.name in used for i in ids))
                self._remove_victims(victims)
                return allocs, victims
            if n >= len(options):
                return self.try_preempt(job, req, end, prune=False) if pruned else None
            n = min(2 * n, len(options))

    def _candidates_on(self, node: _Node, job: PendingView, policy: PreemptPolicy,
                       now: float) -> list[tuple[Candidate, bool, bool]]:
        """The running jobs on `node` as (candidate, may `job`'s QoS and partition preempt
        it, exclusive); kept for the pass until a victim leaves the node."""
        out: list[tuple[Candidate, bool, bool]] = []
        for r in self.running_on.get(node.name, ()):
            victim, cost = self._victim(r)
            may = policy.may_preempt(job.qos, job.partition, victim, now)
            a = next(x for x in r.alloc if x.node == node.name)
            mem = 0 if policy.keeps_memory(r.qos, r.partition) else a.mem_mb
            out.append(((cost, a.cpus, mem, len(a.gpus), r.job_id), may, r.exclusive))
        return out

    def _victim(self, r: RunningView) -> tuple[Victim, tuple[float, float]]:
        """A running job as preemption weighs it, and its cost (made once per pass)."""
        found = self._victims.get(r.job_id)
        if found is None:
            v = Victim(r.job_id, r.qos, r.partition, r.start_time,
                       sum(len(x.gpus) for x in r.alloc), sum(x.cpus for x in r.alloc),
                       r.stopping, r.lent)
            found = self._victims[r.job_id] = (v, v.cost(self.now))
        return found

    def _kept_memory(self, r: RunningView, a: NodeAlloc) -> int:
        """What a victim keeps of its memory on a node: all of it when it is suspended."""
        keeps = self.preempt is not None and self.preempt.keeps_memory(r.qos, r.partition)
        return a.mem_mb if keeps else 0

    def _freed_view(self, node: _Node, victim_ids: list[int]) -> NodeView:
        c, m, g = node.free_cpus, node.free_mem, list(node.free_gpus)
        jobs, exclusive = node.job_count, node.exclusive
        for r in self.running_on.get(node.name, ()):
            if r.job_id not in victim_ids:
                continue
            for a in r.alloc:
                if a.node == node.name:
                    kept = self._kept_memory(r, a)
                    if r.exclusive:
                        exclusive = False
                        c, m, g = node.cpus, node.mem - kept, list(range(node.gpus))
                    else:
                        c, m, g = c + a.cpus, m + a.mem_mb - kept, g + list(a.gpus)
                    jobs -= 1
        if exclusive:
            c, m, g = 0, 0, []
        return NodeView(node.name, node.cpus, node.mem, node.gpus, c, m, sorted(g), True,
                        node.weight, tuple(node.part_names), tuple(node.features), jobs,
                        exclusive, node.gpu_type, node.tmp_disk)

    def _remove_victims(self, victim_ids: list[int]) -> None:
        """The pass goes on as if the victims were gone (their resources free now)."""
        gone = set(victim_ids)
        for r in self.snap.running:
            if r.job_id not in gone:
                continue
            for a in r.alloc:
                node = self.nodes.get(a.node)
                if node is None:
                    continue
                self.running_on[a.node] = [x for x in self.running_on.get(a.node, ())
                                           if x.job_id != r.job_id]
                kept = self._kept_memory(r, a)
                if r.exclusive:
                    node.exclusive = False
                    node.free_cpus, node.free_mem = node.cpus, node.mem - kept
                    node.free_gpus = list(range(node.gpus))
                else:
                    node.free_cpus += a.cpus
                    node.free_mem += a.mem_mb - kept
                    node.free_gpus = sorted(set(node.free_gpus) | set(a.gpus))
                node.job_count -= 1
                if r.end_time != INFINITE_TIME:
                    ev = (r.end_time, a.cpus, a.mem_mb, len(a.gpus), -1,
                          -1 if r.exclusive else 0)
                    if ev in node.releases:
                        node.releases.remove(ev)
                node.events = None
                node.plan_cache.clear()
                node.fit_cache.clear()
                node.sorted_releases = None
                self._reindex(node)
                self._started_on.append(node)  # its lower bounds are refreshed
                for cands in self._node_candidates.values():
                    cands.pop(a.node, None)
        # what a victim frees beyond the preemptor's need may let a failed shape fit now
        self.failed_now.clear()
        self._preempt_failed.clear()
        self._most_free.clear()

    def _keep_suspended(self, allocs: list[NodeAlloc], victim_ids: list[int]) -> None:
        """SUSPEND victims lend their preemptor only what it uses of their resources: for
        the rest of the pass, what it does not use stays theirs (no later job gets it), as
        the controller's ledger keeps it (controller/cluster.py `lent_parts`)."""
        policy = self.preempt
        assert policy is not None
        ids = set(victim_ids)
        held: dict[str, tuple[int, set[int], int, bool]] = {}  # cpus, gpus, jobs, exclusive
        for r in self.snap.running:
            if r.job_id not in ids or not policy.keeps_memory(r.qos, r.partition):
                continue
            for a in r.alloc:
                c, g, n, x = held.get(a.node, (0, set(), 0, False))
                held[a.node] = (c + a.cpus, g | set(a.gpus), n + 1, x or r.exclusive)
        used = {a.node: a for a in allocs}
        for name, (cpus, gpus, jobs, exclusive) in held.items():
            node = self.nodes.get(name)
            if node is None:
                continue
            p = used.get(name)
            node.job_count += jobs
            if exclusive:
                node.exclusive = True
                node.free_cpus, node.free_mem, node.free_gpus = 0, 0, []
            else:
                node.free_cpus -= cpus - min(cpus, p.cpus if p is not None else 0)
                node.free_gpus = [i for i in node.free_gpus if i not in gpus]
            node.events = None
            node.plan_cache.clear()
            node.fit_cache.clear()
            node.sorted_releases = None
            self._reindex(node)
            self._started_on.append(node)

    # ---- planning (holds) ----------------------------------------------------
    def plan(self, req: Request, part: str, duration: float) -> tuple[float, list[_Node]] | None:
        now = self.now
        members = self.part_nodes.get(part, ())
        con = _constraint(req)
        if req.max_nodes:
            k = _plan_node_count(req, members, con)
            if k > req.num_nodes:
                req = req.spread_over(k)
        k = req.num_nodes
        per_node = req.tasks_per_node or -(-req.tasks // k)
        req_set = set(req.req_nodes)
        starts: dict[str, list[tuple[float, float]]] = {}
        candidates: list[_Node] = []
        fits = self._plan_nodes(req, part, per_node, members, con)
        if not req_set:
            if k == 1:
                return self._plan_one(req, fits, duration)
            return self._plan_many(req, fits, k, duration)
        for node, c, m, g in fits:
            demand = (c, m, g, req.exclusive)
            runs = node.plan_cache.get(demand)
            if runs is None:
                runs = node.plan_cache[demand] = _fit_runs(node, c, m, g, req.exclusive, now)
            spans = _spans(runs, duration)
            if spans:
                starts[node.name] = spans
                candidates.append(node)
        if any(name not in starts for name in req_set):
            return None
        if req_set and k == len(req_set):
            candidates = [self.nodes[name] for name in req_set]
        if k == 1:
            best: tuple[float, tuple[int, int, int, int]] | None = None
            chosen: _Node | None = None
            for node in candidates:
                key = (starts[node.name][0][0], node.static_key)
                if best is None or key < best:
                    best, chosen = key, node
            if chosen is None or best is None:
                return None
            return best[0], [chosen]
        return self._sweep(candidates, starts, k, {self.nodes[name].rank for name in req_set})

    def _sweep(self, candidates: Iterable[_Node], starts: dict[str, list[tuple[float, float]]],
               k: int, req_ranks: set[int]) -> tuple[float, list[_Node]] | None:
        """Sweep the interval ends: the earliest time `k` nodes (all required ones among
        them) are free together, and which."""
        events: list[tuple[float, int, int]] = []
        for node in candidates:
            for a, b in starts[node.name]:
                events.append((a, 0, node.rank))
                events.append((b, 1, node.rank))
        events.sort()
        active: set[int] = set()
        for t, kind, rank in events:
            if kind == 1:
                active.discard(rank)
                continue
            active.add(rank)
            if len(active) >= k and req_ranks <= active:
                if t == INFINITE_TIME:
                    return None
                others = sorted((self.by_rank[r] for r in active if r not in req_ranks),
                                key=lambda n: n.static_key)
                picked = [self.by_rank[r] for r in sorted(req_ranks)] + others
                return t, picked[:k]
        return None

    def _plan_many(self, req: Request, fits: list[tuple[_Node, int, int, int]], k: int,
                   duration: float) -> tuple[float, list[_Node]] | None:
        """A plan on `k` nodes (none required): `_sweep` over every node that could hold
        the request, its events made lazily.  A node's spans start no earlier than its
        lower bound and the bounds come in order, so a node joins the sweep only once the
        sweep reaches its bound: the nodes that are free only after the answer cost
        nothing (the events are taken in `_sweep`'s order, so the answer is the same)."""
        bounds = self._bounds_of(fits, req.exclusive)
        whole = req.exclusive
        now = self.now
        by_rank = self.by_rank
        events: list[tuple[float, int, int]] = []  # a heap of (time, 0 start / 1 end, rank)
        active: set[int] = set()
        i, n = 0, len(bounds)
        while True:
            while i < n and (not events or bounds[i][0] <= events[0][0]):
                at, _, node, c, m, g = bounds[i]
                i += 1
                if not node.holds:  # (only releases: it fits from its lower bound on)
                    heappush(events, (at, 0, node.rank))
                    continue
                demand = (c, m, g, whole)
                runs = node.plan_cache.get(demand)
                if runs is None:
                    runs = node.plan_cache[demand] = _fit_runs(node, c, m, g, whole, now)
                rank = node.rank
                for a, b in runs:  # (_spans, inlined)
                    if b == INFINITE_TIME:
                        heappush(events, (a, 0, rank))
                    elif a + duration <= b:  # (every start is finite: it comes first)
                        heappush(events, (a, 0, rank))
                        heappush(events, (b - duration, 1, rank))
            if not events:
                return None
            t, kind, rank = heappop(events)
            if kind == 1:
                active.discard(rank)
                continue
            active.add(rank)
            if len(active) >= k:
                if t == INFINITE_TIME:
                    return None
                picked = sorted((by_rank[r] for r in active), key=lambda x: x.static_key)
                return t, picked[:k]

    def _plan_nodes(self, req: Request, part: str, per_node: int, members: Iterable[_Node],
                    con: Constraint | None) -> list[tuple[_Node, int, int, int]]:
        """The partition's nodes that could ever hold one node's share of `req`, with that
        share (cpus, mem, gpus): the same for every plan of the request in this pass."""
        key = (part, req, per_node)
        found = self._plan_members.get(key)
        if found is not None:
            return found
        out: list[tuple[_Node, int, int, int]] = []
        fixed = None if req.exclusive else req.node_independent_demand(per_node)
        filtered = req.filters_nodes
        for node in members:
            if not node.usable or node.name in req.exc_nodes:
                continue
            if con is not None and not con.node_may(node.features):
                continue
            if filtered and not req.node_may(node):
                continue
            c, m, g = fixed if fixed is not None else req.demand(node, per_node)
            if c > node.cpus or m > node.mem or g > node.gpus:
                continue
            out.append((node, c, m, g))
        self._plan_members[key] = out
        return out

    def _bounds_of(self, fits: list[tuple[_Node, int, int, int]], whole: bool) -> list[_Bound]:
        """The nodes that could ever hold the request, with their lower bound, in order of
        (bound, best-fit key).  Kept for the pass: after starts, only the nodes they went
        to move in the order."""
        cached = self._bounds.get(id(fits))
        now = self.now
        if cached is None:
            # the raw order kept from the last passes, its nodes touched since moved, then
            # raised to `now` (those that fit by `now` tie there, by best-fit key); the
            # nodes this pass started jobs on are moved below, as after any start
            raw = self._raw_bounds(fits, whole)
            split = bisect_left(raw.order, (now, _LAST_KEY))
            entry = dict(raw.entry)
            ready = [(now, *b[1:]) for b in raw.order[:split]]
            ready.sort()  # (by best-fit key: the keys are unique, nodes never compared)
            for b in ready:
                entry[b[2].rank] = b
            ready.extend(raw.order[split:])
            cached = self._bounds[id(fits)] = _Bounds(ready, entry, raw.share, 0)
        if cached.seen < len(self._started_on):
            order, entry = cached.order, cached.entry
            for node in {n.rank: n for n in self._started_on[cached.seen:]}.values():
                mine = cached.share.get(node.rank)
                if mine is None:
                    continue
                old = entry.pop(node.rank, None)
                if old is not None:  # (best-fit keys are unique: the node is found by them)
                    del order[bisect_left(order, (old[0], old[1]))]
                _, c, m, g = mine
                at = _earliest_fit(node, c, m, g, whole, now)
                if at != INFINITE_TIME:
                    entry[node.rank] = new = (at, node.static_key, node, c, m, g)
                    insort(order, new)
            cached.seen = len(self._started_on)
        return cached.order

    def _raw_bounds(self, fits: list[tuple[_Node, int, int, int]], whole: bool) -> _RawBounds:
        kept = self._kept
        raw = kept.raw_bounds.get(id(fits))
        if raw is None or raw.fits is not fits:
            order: list[_Bound] = []
            entry: dict[int, _Bound] = {}
            share = {node.rank: (node, c, m, g) for node, c, m, g in fits}
            for node, c, m, g in fits:
                at = _earliest_fit_raw(node, c, m, g, whole)
                if at != INFINITE_TIME:
                    entry[node.rank] = (at, node.static_key, node, c, m, g)
                    order.append(entry[node.rank])
            order.sort()  # (by bound, then best-fit key: the keys are unique, nodes never compared)
            raw = kept.raw_bounds[id(fits)] = _RawBounds(fits, order, entry, share,
                                                         len(kept.touched))
            return raw
        if raw.upto < len(kept.touched):
            order, entry, share = raw.order, raw.entry, raw.share
            for rank in set().union(*kept.touched[raw.upto:]):
                mine = share.get(rank)
                if mine is None:
                    continue
                old = entry.pop(rank, None)
                if old is not None:
                    del order[bisect_left(order, (old[0], old[1]))]
                node, c, m, g = mine
                at = _earliest_fit_raw(node, c, m, g, whole)
                if at != INFINITE_TIME:
                    entry[rank] = new = (at, node.static_key, node, c, m, g)
                    insort(order, new)
            raw.upto = len(kept.touched)
        return raw

    def _plan_one(self, req: Request, fits: list[tuple[_Node, int, int, int]],
                  duration: float) -> tuple[float, list[_Node]] | None:
        """A one-node plan: the node with the earliest feasible start (then the best-fit
        static key), looking only at nodes whose lower bound can still beat the best."""
        now = self.now
        whole = req.exclusive
        bounds = self._bounds_of(fits, whole)
        # the best (start, static key) so far, as two names: no tuple made per node
        best_at = INFINITE_TIME
        best_key = (0, 0, 0, 0)  # (read only once a node is chosen)
        chosen: _Node | None = None
        for at, static_key, node, c, m, g in bounds:
            if chosen is not None and (at > best_at or (at == best_at
                                                        and static_key >= best_key)):
                break
            if not node.holds:  # only releases: it fits from its lower bound on
                if chosen is None or at < best_at or (at == best_at and static_key < best_key):
                    best_at, best_key, chosen = at, static_key, node
                continue
            demand = (c, m, g, whole)
            runs = node.plan_cache.get(demand)
            if runs is None:
                runs = node.plan_cache[demand] = _fit_runs(node, c, m, g, whole, now)
            for a, b in runs:  # (_first_start, inlined: every node visited)
                if b == INFINITE_TIME or a + duration <= b:
                    if chosen is None or a < best_at \
                            or (a == best_at and static_key < best_key):
                        best_at, best_key, chosen = a, static_key, node
                    break
        if chosen is None:
            return None
        return best_at, [chosen]

    def hold(self, req: Request, nodes: list[_Node], start: float, duration: float) -> None:
        k = len(nodes) or req.num_nodes
        if req.max_nodes and k != req.num_nodes:
            req = req.spread_over(k)  # as plan() placed it
        per_node = req.tasks_per_node if req.tasks_per_node and k == req.num_nodes \
            else -(-req.tasks // k)
        end = start + duration
        whole = req.exclusive
        for node in nodes:
            c, m, g = req.demand(node, per_node)
            node.holds.append((start, end, c, m, g, whole))
            events = node.events
            if events is not None:  # (event_list's order: after the events at the same time)
                if whole:
                    c, m, g = node.cpus, node.mem, node.gpus
                insort(events, (start, -c, -m, -g, 1, 0), key=_TIME)
                if end != INFINITE_TIME:
                    insort(events, (end, c, m, g, -1, 0), key=_TIME)
            node.plan_cache.clear()

    # ---- why a job waits --------------------------------------------------------------
    def _static_reason(self, shape: tuple[Any, ...], job: PendingView, req: Request,
                       part: Partition) -> PendingReason | None:
        """`static_reason`, kept between passes for a request that is not for whole nodes:
        it then depends only on what the nodes are and which are usable (idle ones are
        whole-node requests' sample), and on the partition's node limits and DefMemPerCPU."""
        if req.exclusive:
            return self.static_reason(job, req, part)
        limits = (part.min_nodes, part.max_nodes, self._def_mem(part))
        kept = self._kept.static
        found = kept.get(shape)
        if found is not None and found[0] == limits:
            return found[1]
        why = self.static_reason(job, req, part)
        kept[shape] = (limits, why)
        return why

    def static_reason(self, job: PendingView, req: Request, part: Partition) -> PendingReason | None:
        """A reason that does not depend on other jobs, or None."""
        members = self.part_nodes.get(part.name, [])
        if req.num_nodes > len(members) or req.num_nodes < part.min_nodes \
                or (part.max_nodes is not None and req.num_nodes > part.max_nodes):
            most = len(members) if part.max_nodes is None else min(len(members), part.max_nodes)
            return reason(ReasonCode.PARTITION_NODE_LIMIT, requested=(("nodes", req.num_nodes),),
                          available=(("nodes", most),), per_node=False)
        def_mem = self._def_mem(part)
        if not self._fits_idle(job, req, part.name, "all", def_mem):
            job_any = replace(job, partition="")
            if job.constraint and select_nodes(replace(job_any, constraint=None),
                                               self._sample(part.name, req, "all"),
                                               def_mem) is not None:
                # only the features are missing (e.g. gone with a reconfigure)
                return reason(ReasonCode.BAD_CONSTRAINTS)
            return reason(PARTITION_CONFIG)
        down = [name for name in req.req_nodes
                if name not in self.snap.nodes or not self.snap.nodes[name].usable]
        if down:
            return reason(ReasonCode.REQ_NODE_NOT_AVAIL, nodes=tuple(down))
        # Slurm counts only idle nodes as available to a whole-node job.
        kind = "idle" if req.exclusive else "usable"
        if not self._fits_idle(job, req, part.name, kind, def_mem):
            return reason(ReasonCode.NODES_DOWN)
        return None

    def resources_reason(self, req: Request, part: str) -> PendingReason:
        """Resources, with what one node must give and the most free on any usable node of
        the partition now (after the starts made earlier in this pass)."""
        per_node = req.tasks_per_node or -(-req.tasks // req.num_nodes)
        demand = req.node_independent_demand(per_node)
        most = self._most_free.get(part)
        if most is None:
            c = m = g = 0
            for node in self.part_nodes.get(part, ()):
                if node.usable and not node.exclusive:  # (max() inlined: every node)
                    if node.free_cpus > c:
                        c = node.free_cpus
                    if node.free_mem > m:
                        m = node.free_mem
                    if len(node.free_gpus) > g:
                        g = len(node.free_gpus)
            most = self._most_free[part] = (c, m, g)
        requested = () if demand is None else (
            ("cpus", demand[0]), ("mem", demand[1]), ("gpus", demand[2]), ("nodes", req.num_nodes))
        return PendingReason(ReasonCode.RESOURCES, requested=requested,
                             available=(("cpus", most[0]), ("mem", most[1]), ("gpus", most[2])))

    def _fits_idle(self, job: PendingView, req: Request, part: str, kind: str,
                   def_mem: int) -> bool:
        """Whether `job` (in any partition) fits on the idle sample of `part`'s
        nodes of one kind, remembered across passes for a plain request: the answer
        depends only on the request and on what the sample's nodes are, which rarely
        changes from one pass to the next."""
        if req.req_nodes or req.exc_nodes or req.constraint or req.gpu_type \
                or req.min_tmp_disk:
            return select_nodes(replace(job, partition=""), self._sample(part, req, kind),
                                def_mem) is not None
        k = req.most_nodes()
        sig = self._group_sigs.get((part, kind, k))
        if sig is None:  # the sample's nodes (_sample), as select_nodes reads them
            sig = self._group_sigs[(part, kind, k)] = tuple(
                (v.name, v.cpus, v.mem, v.gpus, v.weight, v.partitions, v.features,
                 v.gpu_type, v.tmp_disk)
                for group in self._groups_of(part, kind) for v in group[:k])
        j = job  # what select_nodes reads of it (make_request's fields)
        key = ((j.num_nodes, j.max_nodes, j.num_tasks, j.ntasks_per_node, j.cpus_per_task,
                j.mem_per_node, j.mem_per_cpu, j.gpus, j.gpus_per_node, j.gpus_per_task,
                j.exclusive, j.req_nodes, j.exc_nodes, j.nodes_fixed, j.constraint,
                j.min_cpus, j.gpu_type, j.min_tmp_disk), def_mem, sig)
        found = _FITS_IDLE.get(key)
        if found is None:
            if len(_FITS_IDLE) >= 256:  # (a key may name every node of a partition)
                _FITS_IDLE.clear()
            found = _FITS_IDLE[key] = select_nodes(
                replace(job, partition=""), self._sample(part, req, kind), def_mem) is not None
        return found

    def _sample(self, part: str, req: Request, kind: str) -> list[NodeView]:
        """Idle copies of the partition's nodes of one kind ("all", "usable" or "idle" =
        usable with no job).  Whether a job could fit on idle nodes depends only on their
        sizes, so at most `num_nodes` nodes of each size are enough, which keeps this cheap
        when thousands of different requests are checked."""
        special = bool(req.req_nodes or req.exc_nodes or req.constraint or req.gpu_type
                       or req.min_tmp_disk)
        if special:
            return [idle_copy(v) for v in self._views(part, kind) if v.name not in req.exc_nodes]
        # a job without -N may need up to one node per task (or per GPU of a --gpus total)
        k = req.most_nodes()
        return [idle_copy(v) for group in self._groups_of(part, kind) for v in group[:k]]

    def _views(self, part: str, kind: str) -> list[NodeView]:
        views = [self.snap.nodes[n.name] for n in self.part_nodes.get(part, [])]
        if kind != "all":
            idle_only = kind == "idle"
            views = [v for v in views if v.usable
                     and (not idle_only or (v.job_count == 0 and not v.exclusive))]
        return views

    def _groups_of(self, part: str, kind: str) -> list[list[NodeView]]:
        """The partition's nodes of one kind grouped by size (cpus, mem, gpus)."""
        groups = self._groups.get((part, kind))
        if groups is None:
            grouped: dict[tuple[int, int, int], list[NodeView]] = {}
            for v in self._views(part, kind):
                grouped.setdefault((v.cpus, v.mem, v.gpus), []).append(v)
            groups = self._groups[(part, kind)] = list(grouped.values())
        return groups

    def _may_start_from(self, ordered: list[PendingView], first: int) -> int:
        """The position of the first job from `first` on that might start now, or
        len(ordered).  Only in a pass without preemption, where nodes only fill and holds
        only grow, so a job that does not fit now will not fit at its turn either: it is
        tried now (try_start, and its failure remembered in `failed_now` as its turn
        would), and a shape that no node passes try_start's index filter stays so for the
        rest of the pass (`_never_now`); a job at least as long as one of its shape that
        failed (`failed_now`, whose durations only fall) is not tried at all."""
        parts = self.snap.partitions
        never = self._never_now
        failed_now = self.failed_now
        predicted = self.snap.predicted_runtime if self.snap.levers.plan_predictions else None
        now = self.now
        for i in range(first, len(ordered)):
            job = ordered[i]
            index = self.index.get(job.partition)
            part = parts.get(job.partition)
            if index is None or part is None:
                continue
            if job.req_nodes:
                self._may_start_on = None
                return i
            shape = _shape_of(job)
            if shape in never:
                continue
            failed = failed_now.get(shape)
            if failed is not None and _duration(job, predicted) >= failed:
                continue
            req = self.requests.get(shape)
            if req is None:
                req = self.requests[shape] = _request(job, shape, self._def_mem(part))
            if req.req_nodes or req.num_nodes < 1:
                self._may_start_on = None
                return i
            min_cpus = req.cpus_per_task if req.exclusive else req.min_cpus_per_node()
            min_gpus = 0 if req.exclusive else req.min_gpus_per_node()
            if next(index.ordered(self.by_rank, min_gpus, min_cpus, req.exc_nodes),
                    None) is None:
                never.add(shape)
                continue
            duration = _duration(job, predicted)
            allocs = self.try_start(req, job.partition, now + duration)
            if allocs is not None:
                self._may_start_on = {a.node for a in allocs}
                return i
            failed_now[shape] = duration
        return len(ordered)

    def _def_mem(self, part: Partition) -> int:
        return part.def_mem_per_cpu if part.def_mem_per_cpu is not None else self.snap.def_mem_per_cpu

    # ---- the pass -------------------------------------------------------------------
    def run(self) -> Placement:
        snap = self.snap
        now = self.now
        parts = snap.partitions
        dec = self.decision
        prio = self.priorities

        def order(j: PendingView) -> tuple[int, int, float, int]:
            p = parts.get(j.partition)
            pr = j.priority if prio is None else prio.get(j.job_id, j.priority)
            return (-(p.priority_tier if p else 0), -pr, j.submit_time, j.job_id)

        blocked: set[str] = set()
        levers = snap.levers  # [quality] sched/levers.py
        predicted = snap.predicted_runtime if levers.plan_predictions else None
        min_gpus = levers.reserve_min_gpus
        ordered = sorted(snap.pending, key=order)
        # [simulator] only the starts are read: a hold that can hold back no later start
        # is not made (free resources only shrink in a pass without preemption, so once
        # no later job could start, none can for the rest of the pass)
        starts_only = snap.starts_only and self.preempt is None and levers.order == "priority"
        may_start_from = 0  # the first job from which one might still start now
        starts_seen = 0  # starts made when it was found
        recheck = False  # a hold was made where it was found to fit
        for pos, job, may_plan in _walk(ordered, blocked, self, snap):
            part = parts.get(job.partition)
            if part is None or part.state == "DOWN":
                dec.reasons[job.job_id] = reason(ReasonCode.PARTITION_DOWN)
                continue
            if part.state == "INACTIVE":
                dec.reasons[job.job_id] = reason(PARTITION_INACTIVE)
                continue
            if part.max_time != -1 and job.time_limit > part.max_time:
                dec.reasons[job.job_id] = reason(ReasonCode.PARTITION_TIME_LIMIT)
                continue
            if self.gate is not None:
                over = self.gate.check(job.job_id)
                if over is not None:
                    dec.reasons[job.job_id] = over
                    continue
            p_blocked = job.partition in blocked
            if p_blocked and (not snap.backfill or pos >= snap.max_backfill_jobs):
                dec.reasons[job.job_id] = reason(ReasonCode.PRIORITY)
                continue
            shape = _shape_of(job)
            req = self.requests.get(shape)
            if req is None:
                req = self.requests[shape] = _request(job, shape, self._def_mem(part))
            duration = _duration(job, predicted)
            end = now + duration
            failed = self.failed_now.get(shape)
            if failed is None or duration < failed:
                allocs = self.try_start(req, job.partition, end)
                if allocs is not None:
                    self.commit(allocs, end, req.exclusive)
                    self._most_free.pop(job.partition, None)
                    dec.starts.append((job.job_id, allocs))
                    if self.gate is not None:
                        self.gate.started(job.job_id)
                    continue
                self.failed_now[shape] = duration
            if self.preempt is not None and (shape, job.qos) not in self._preempt_failed \
                    and self.preempt.preempts_anyone(job.qos, job.partition):
                if self.timer is None:
                    placed = self.try_preempt(job, req, end)
                else:
                    t0 = self.timer()
                    placed = self.try_preempt(job, req, end)
                    dec.preempt_seconds += self.timer() - t0
                if placed is None:
                    self._preempt_failed.add((shape, job.qos))
                else:
                    allocs, victims = placed
                    self.commit(allocs, end, req.exclusive)
                    self._keep_suspended(allocs, victims)
                    self._most_free.pop(job.partition, None)
                    dec.preemptions.append((job.job_id, allocs, victims))
                    dec.reasons[job.job_id] = self.resources_reason(req, job.partition)
                    if self.gate is not None:
                        self.gate.started(job.job_id)
                    continue
            if shape not in self.static:
                self.static[shape] = self._static_reason(shape, job, req, part)
            why = self.static[shape]
            if why is not None and why.code in _NEVER_HERE:
                # It can never run here, so it holds nothing back.
                dec.reasons[job.job_id] = why
                continue
            first = not p_blocked
            blocked.add(job.partition)
            if why is None:
                why = self.resources_reason(req, job.partition) if first \
                    else reason(ReasonCode.PRIORITY)
            dec.reasons[job.job_id] = why
            if not first and (not snap.backfill or self.planned_count >= self.max_planned
                              or not may_plan or (min_gpus and _gpus(job) < min_gpus)):
                continue
            failed_plan = self.plan_failed.get(shape)
            if failed_plan is not None and duration >= failed_plan:
                continue
            if starts_only:
                if may_start_from <= pos or len(self._started_on) != starts_seen \
                        or recheck:
                    # (else the job found last time still fits where it was found:
                    # nothing started and no hold was made there since)
                    may_start_from = self._may_start_from(ordered, max(may_start_from, pos + 1))
                    starts_seen = len(self._started_on)
                    recheck = False
                if may_start_from >= len(ordered):
                    continue
            if not first:
                self.planned_count += 1
            plan = self.plan(req, job.partition, duration)
            if plan is None:
                self.plan_failed[shape] = duration
                continue
            start, nodes = plan
            self.hold(req, nodes, start, duration)
            dec.planned[job.job_id] = (start, [n.name for n in nodes])
            if starts_only and not recheck:
                where = self._may_start_on
                recheck = where is None or any(n.name in where for n in nodes)
        return dec


def _shape_of(job: PendingView) -> tuple[Any, ...]:
    """Every field of `job` that make_request reads (and its partition): jobs of one shape
    share their request."""
    return (job.partition, job.num_nodes, job.num_tasks, job.ntasks_per_node,
            job.cpus_per_task, job.mem_per_node, job.mem_per_cpu, job.gpus,
            job.gpus_per_node, job.gpus_per_task, job.exclusive, job.req_nodes,
            job.exc_nodes, job.nodes_fixed, job.max_nodes, job.constraint,
            job.min_cpus, job.gpu_type, job.min_tmp_disk)


def _duration(job: PendingView, predicted: Mapping[str, float] | None) -> float:
    """How long the pass plans `job` to run: its time limit, or with `predicted` (the
    predictions, when plans use them) the shorter of that and its user's prediction."""
    duration = INFINITE_TIME if job.time_limit < 0 else float(job.time_limit)
    if predicted and job.user in predicted and duration != INFINITE_TIME:  # [quality]
        duration = min(duration, predicted[job.user])  # EASY++: sched/predict.py
    return duration


def _gpus(job: PendingView) -> int:
    """GPUs a job asks for in all."""
    return max(job.gpus, job.gpus_per_node * job.num_nodes + job.gpus_per_task * job.num_tasks)


def _walk(ordered: list[PendingView], blocked: set[str], p: _Pass, snap: Snapshot
          ) -> Iterator[tuple[int, PendingView, bool]]:
    """[quality] The jobs in the pass's order with their position and whether they may be
    planned (sched/levers.py).  With `corral_bf_order` other than priority, a job of a
    partition already blocked that no hold would protect (the planning budget spent, or
    too small for `corral_bf_reserve_min_gpus`) is put off, and the put-off jobs come
    last, shortest (limit or prediction) or largest (GPUs) first, to start now or wait:
    the holds are made in priority order as before, so the order changes no hold."""
    levers = snap.levers
    if levers.order == "priority":
        for pos, job in enumerate(ordered):
            yield pos, job, True
        return
    predicted = snap.predicted_runtime if levers.order == "predicted" else {}
    min_gpus = levers.reserve_min_gpus
    later: list[tuple[float, int, PendingView]] = []
    for pos, job in enumerate(ordered):
        if job.partition in blocked and (p.planned_count >= p.max_planned
                                         or (min_gpus and _gpus(job) < min_gpus)):
            if levers.order == "largest":
                later.append((-_gpus(job), pos, job))
                continue
            limit = INFINITE_TIME if job.time_limit < 0 else float(job.time_limit)
            guess = predicted.get(job.user) if predicted else None
            later.append((limit if guess is None else min(limit, guess), pos, job))
            continue
        yield pos, job, True
    later.sort(key=lambda x: (x[0], x[1]))
    for _, pos, job in later:
        yield pos, job, False


def _constraint(req: Request) -> Constraint | None:
    if not req.constraint:
        return None
    try:
        return parse_constraint(req.constraint)
    except ConstraintError:
        return None


def _plan_node_count(req: Request, members: Iterable[_Node], con: Constraint | None) -> int:
    """Nodes a plan reserves: the job's count, or for a job without -N as many of the
    partition's largest (matching) nodes as its tasks need."""
    k = req.num_nodes
    if not req.max_nodes:
        return k
    fit = [n for n in members if (con is None or con.node_may(n.features)) and req.node_may(n)]
    used = _largest_first(sorted((n.cpus // req.cpus_per_task for n in fit), reverse=True),
                          req.tasks)
    if req.gpu_spread:
        own = req.gpus_per_node_own
        used = max(used, _largest_first(sorted((n.gpus - own for n in fit), reverse=True),
                                        req.gpus_total))
    return max(k, min(used, req.max_nodes) or 1)


def _largest_first(caps: list[int], need: int) -> int:
    """How many of `caps` (largest first) cover `need`."""
    used = 0
    for cap in caps:
        if need <= 0:
            break
        need -= max(cap, 0)
        used += 1
    return used


def schedule(snap: Snapshot, *, max_planned: int = DEFAULT_MAX_PLANNED,
             priorities: dict[int, int] | None = None, gate: Gate | None = None,
             timer: Callable[[], float] | None = None, memo: BackfillMemo | None = None,
             scope: str = "") -> Placement:
    """One pass over the pending jobs: which start now (and where), why the others wait,
    and when the planned ones are expected to start.  `max_planned` bounds how many jobs
    behind each partition's first blocked job get a hold.  `priorities` (job id →
    priority, from the priority stage) overrides each view's own `priority`.  `gate` (the
    limits stage, sched/limits.py) is asked about each job in priority order just before
    it is placed and told of each start; a job it stops waits with its reason and
    reserves nothing.  `timer`, if given, measures the preemption checks
    (`Placement.preempt_seconds`).  `memo` (the caller's) carries this `scope`'s nodes
    from the pass before to this one and on to the next."""
    # (taken, not shared: a pass running beside this one builds its own nodes)
    p = _Pass(snap, max_planned, priorities,
              memo.scopes.pop(scope, None) if memo is not None else None)
    p.gate = gate
    p.timer = timer
    placed = p.run()
    if memo is not None:
        memo.scopes[scope] = p.kept()
    return placed
