"""Node selection for one job (Slurm's select/cons_tres with CR_Core_Memory).

A job asks for `num_nodes` nodes, `num_tasks` tasks of `cpus_per_task` CPUs, memory
(per node, per CPU, or the partition/cluster DefMemPerCPU) and GPUs (per node, per task,
or a total for the job).  Among the nodes that fit, the best fit wins: fewest free GPUs,
then fewest free CPUs, then lower weight, then node name.  So 1-GPU jobs fill one node
before opening the next, and CPU-only jobs go to GPU-less or GPU-full nodes first, keeping
idle GPUs for the jobs that need them.

The same allocation core (`allocate`) serves `select_nodes` here and the indexed search in
`backfill`, so both place jobs identically.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from corral.model.job import NodeAlloc

from .features import ConstraintError, parse_constraint, pick_counted
from .snapshot import NodeView, PendingView


class NodeLike(Protocol):
    """What selection reads of a node: `NodeView`, or backfill's working copy of one."""

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
    features: tuple[str, ...]
    tmp_disk: int
    gpu_type: str | None


# (node, cpus, mem, gpus, whole_node) -> may the job take this much here?  Backfill uses it
# to keep reservations of waiting jobs intact.
ExtraCheck = Callable[[NodeLike, int, int, int, bool], bool]


@dataclass(frozen=True, slots=True)
class Request:
    """A job's request, normalised; hashable, so identical requests share one key."""

    num_nodes: int
    tasks: int
    tasks_per_node: int  # tasks on every node; 0 = spread `tasks` over the nodes
    cpus_per_task: int
    mem_per_node: int | None  # MB; 0 = all of each node's memory; None = per CPU
    mem_per_cpu: int  # MB, used when mem_per_node is None; 0 = no memory accounting
    gpus_per_node: int  # includes the job's share of a total `--gpus` count
    gpus_per_task: int
    gpus_total: int
    exclusive: bool
    req_nodes: tuple[str, ...]
    exc_nodes: frozenset[str]
    # -n without -N: all tasks on one node if one can hold them, else as many nodes as
    # they need, up to this many (0 = exactly num_nodes)
    max_nodes: int = 0
    constraint: str | None = None  # --constraint (sched.features)
    # --mincpus (Slurm's pn_min_cpus): CPUs allocated on every node at least (cons_tres
    # _cpus_to_use), so a node must have that many free
    min_cpus: int = 0
    gpu_type: str | None = None  # GPUs of this type only
    min_tmp_disk: int = 0  # --tmp: MB of TmpDisk a node must have
    # --gpus-per-node alone (gpus_per_node less the share of a --gpus total); a job
    # without -N spreads its --gpus total over as many nodes as it needs (`max_nodes`)
    gpus_per_node_own: int = 0

    @property
    def filters_nodes(self) -> bool:
        """Some nodes can never hold it, whatever runs there (see `node_may`)."""
        return bool(self.min_cpus or self.min_tmp_disk or self.gpu_type)

    def node_may(self, node: NodeLike) -> bool:
        """Whether `node` is one this job may ever use, by what it is rather than by what is
        free: CPUs for --mincpus, TmpDisk for --tmp, GPUs of the asked type."""
        return (node.cpus >= self.min_cpus and node.tmp_disk >= self.min_tmp_disk
                and (not self.gpu_type or node.gpu_type == self.gpu_type))

    @property
    def gpu_spread(self) -> bool:
        """A --gpus total without -N: as many nodes as the GPUs need."""
        return bool(self.max_nodes and self.gpus_total)

    def spread_over(self, k: int) -> Request:
        """This request on `k` nodes, its tasks (and a --gpus total) shared out."""
        share = -(-self.gpus_total // k) if self.gpus_total else 0
        return replace(self, num_nodes=k, tasks_per_node=0, tasks=max(self.tasks, k),
                       gpus_per_node=self.gpus_per_node_own + share)

    def most_nodes(self) -> int:
        """The most nodes this job may get (a job without -N: one per task, or per GPU
        of a --gpus total)."""
        if not self.max_nodes:
            return self.num_nodes
        return max(self.num_nodes, min(max(self.tasks, self.gpus_total), self.max_nodes))

    def demand(self, node: NodeLike, tasks: int) -> tuple[int, int, int]:
        """CPUs, MB and GPUs this job asks of `node` with `tasks` tasks there."""
        cpus = max(tasks * self.cpus_per_task, self.min_cpus)
        if self.mem_per_node is not None:
            mem = node.mem if self.mem_per_node == 0 else self.mem_per_node
        else:
            mem = self.mem_per_cpu * cpus
        return cpus, mem, self.gpus_per_node + self.gpus_per_task * tasks

    def node_independent_demand(self, tasks: int) -> tuple[int, int, int] | None:
        """demand() when it does not depend on the node (all but --mem=0), else None."""
        if self.mem_per_node == 0:
            return None
        cpus = max(tasks * self.cpus_per_task, self.min_cpus)
        mem = self.mem_per_node if self.mem_per_node is not None else self.mem_per_cpu * cpus
        return cpus, mem, self.gpus_per_node + self.gpus_per_task * tasks

    def min_cpus_per_node(self) -> int:
        # a job that may spread (max_nodes) may take as little as one task on a node
        per_node = (1 if self.max_nodes else self.tasks_per_node or 1) * self.cpus_per_task
        return max(per_node, self.min_cpus)

    def min_gpus_per_node(self) -> int:
        if self.gpu_spread:  # one GPU of the total may be all a node gives
            return self.gpus_per_node_own + 1
        per_node = 1 if self.max_nodes else self.tasks_per_node or 1
        return self.gpus_per_node + self.gpus_per_task * per_node


# the most nodes a job without -N may spread over (Slurm: the partition's MaxNodes)
FLEXIBLE_MAX_NODES = 1 << 30


def make_request(job: PendingView, def_mem_per_cpu: int) -> Request:
    req_nodes = tuple(dict.fromkeys(job.req_nodes))
    num_nodes = max(job.num_nodes, len(req_nodes), 1)
    tasks = max(job.num_tasks, 1)
    # (a --gpus total with --gpus-per-task keeps its node count)
    flexible = not job.nodes_fixed and not req_nodes and not (job.gpus and job.gpus_per_task)
    if flexible and job.ntasks_per_node:
        # -n8 --ntasks-per-node=4 without -N: the node count follows
        num_nodes = max(num_nodes, -(-tasks // job.ntasks_per_node))
        flexible = False
    if job.ntasks_per_node:
        per_node = job.ntasks_per_node
    elif num_nodes == 1:
        per_node = tasks
    elif tasks <= num_nodes:
        per_node = 1  # Slurm runs at least one task on every node
    else:
        per_node = 0
    if job.mem_per_node is not None:
        mem_per_node: int | None = job.mem_per_node
        mem_per_cpu = 0
    else:
        mem_per_node = None
        mem_per_cpu = job.mem_per_cpu if job.mem_per_cpu is not None else max(def_mem_per_cpu, 0)
    # A total GPU count is spread evenly; every node must be able to hold the larger share.
    share = -(-job.gpus // num_nodes) if job.gpus > 0 else 0
    return Request(
        num_nodes=num_nodes,
        tasks=max(tasks, num_nodes) if not job.ntasks_per_node else per_node * num_nodes,
        tasks_per_node=per_node,
        cpus_per_task=max(job.cpus_per_task, 1),
        mem_per_node=mem_per_node,
        mem_per_cpu=mem_per_cpu,
        gpus_per_node=job.gpus_per_node + share,
        gpus_per_task=job.gpus_per_task,
        gpus_total=job.gpus,
        exclusive=job.exclusive,
        req_nodes=req_nodes,
        exc_nodes=frozenset(job.exc_nodes),
        # each node takes one task at least (and, where the tasks do not need more nodes,
        # one GPU of a --gpus total)
        max_nodes=(min(job.max_nodes or FLEXIBLE_MAX_NODES, max(tasks, job.gpus))
                   if flexible else 0),
        constraint=job.constraint or None,
        min_cpus=job.min_cpus or 0,
        gpu_type=job.gpu_type if job.gpu_type and (
            job.gpus or job.gpus_per_node or job.gpus_per_task) else None,
        min_tmp_disk=job.min_tmp_disk or 0,
        gpus_per_node_own=job.gpus_per_node,
    )


_DIGITS = re.compile(r"(\d+)")


_NATURAL: dict[str, tuple[object, ...]] = {}


def natural_key(name: str) -> tuple[object, ...]:
    """node-2 before node-10.  Remembered per name: node names are few and every
    selection sorts by them."""
    found = _NATURAL.get(name)
    if found is None:
        if len(_NATURAL) >= 65536:
            _NATURAL.clear()
        found = _NATURAL[name] = tuple(int(p) if p.isdigit() else p
                                       for p in _DIGITS.split(name))
    return found


def best_fit_key(node: NodeLike) -> tuple[object, ...]:
    return (len(node.free_gpus), node.free_cpus, node.weight, natural_key(node.name))


def fits_now(node: NodeLike, cpus: int, mem: int, gpus: int, whole: bool) -> bool:
    """Fits in the node's free resources right now (usable is the caller's filter)."""
    if node.exclusive:
        return False
    if whole:
        return (
            node.job_count == 0
            and node.free_cpus >= node.cpus
            and node.free_mem >= node.mem
            and len(node.free_gpus) >= node.gpus
            and cpus <= node.cpus
            and mem <= node.mem
            and gpus <= node.gpus
        )
    return node.free_cpus >= cpus and node.free_mem >= mem and len(node.free_gpus) >= gpus


def _task_capacity(req: Request, node: NodeLike, extra: ExtraCheck | None) -> int:
    """Most tasks of a spread job this node can take now (0 = none)."""
    cpt = req.cpus_per_task
    if req.exclusive:
        c, m, g = req.demand(node, 1)
        if not fits_now(node, c, m, g, True):
            return 0
        cap = node.cpus // cpt
        if req.gpus_per_task:
            cap = min(cap, (node.gpus - req.gpus_per_node) // req.gpus_per_task)
        if req.mem_per_node is None and req.mem_per_cpu:
            cap = min(cap, node.mem // (req.mem_per_cpu * cpt))
        if cap >= 1 and extra is not None and not extra(node, node.cpus, node.mem, node.gpus, True):
            return 0
        return max(cap, 0)
    cap = node.free_cpus // cpt
    if req.mem_per_node is None:
        if req.mem_per_cpu:
            cap = min(cap, node.free_mem // (req.mem_per_cpu * cpt))
    elif req.demand(node, 1)[1] > node.free_mem:
        return 0
    free_g = len(node.free_gpus) - req.gpus_per_node
    if free_g < 0:
        return 0
    if req.gpus_per_task:
        cap = min(cap, free_g // req.gpus_per_task)
    if cap >= 1 and req.min_cpus:
        # --mincpus: one task still takes that many CPUs (and their memory)
        c, m, _ = req.demand(node, 1)
        if c > node.free_cpus or m > node.free_mem:
            return 0
    if cap < 1 or extra is None:
        return max(cap, 0)
    c, m, g = req.demand(node, cap)
    if extra(node, c, m, g, False):
        return cap
    # Largest task count the reservations leave room for (the check is monotone in tasks).
    lo, hi = 0, cap - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        c, m, g = req.demand(node, mid)
        if extra(node, c, m, g, False):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _distribute(total: int, caps: list[int]) -> list[int] | None:
    """Tasks per node: an even spread (what the launcher assumes) when every node can take
    it, else one per node and the rest filling nodes in order, as Slurm does."""
    n = len(caps)
    if total < n or sum(caps) < total:
        return None
    base, extra = divmod(total, n)
    even = [base + (1 if i < extra else 0) for i in range(n)]
    if all(e <= c for e, c in zip(even, caps, strict=True)):
        return even
    counts = [1] * n
    left = total - n
    for i, cap in enumerate(caps):
        add = min(cap - 1, left)
        counts[i] += add
        left -= add
    return counts


def allocate(
    req: Request,
    required: Sequence[NodeLike],
    ordered: Iterable[NodeLike],
    extra: ExtraCheck | None = None,
) -> list[NodeAlloc] | None:
    """Pick nodes and build the allocation (see `_allocate`), honouring the job's
    --constraint, --mincpus and --tmp: each alternative of a [a|b] set is tried in turn,
    and counted features (a*2) pick their nodes first."""
    if req.filters_nodes:
        def ok(n: NodeLike) -> bool:  # (--mincpus: that many free now, too)
            return n.free_cpus >= req.min_cpus and req.node_may(n)

        if not all(ok(n) for n in required):
            return None
        ordered = (n for n in ordered if ok(n))
    if req.max_nodes:
        # -n without -N: on one node when one can hold the tasks, else spread over as
        # many as needed (the node order is replayed, not searched twice)
        first, again = itertools.tee(ordered)
        out = _allocate_constrained(replace(req, max_nodes=0), required, first, extra)
        if out is not None or req.max_nodes <= req.num_nodes:
            return out
        if req.gpu_spread:
            return _allocate_constrained(req, required, list(again), extra)
        # As few nodes as will do: the roomiest first (best fit among equals)
        spread = replace(req, tasks_per_node=0)
        nodes = list(again)
        caps = {n.name: _task_capacity(spread, n, extra) for n in nodes}
        nodes.sort(key=lambda n: -caps[n.name])
        return _allocate_constrained(spread, required, nodes, extra)
    return _allocate_constrained(req, required, ordered, extra)


def _allocate_constrained(
    req: Request,
    required: Sequence[NodeLike],
    ordered: Iterable[NodeLike],
    extra: ExtraCheck | None = None,
) -> list[NodeAlloc] | None:
    if not req.constraint:
        return _allocate(req, required, ordered, extra)
    try:
        con = parse_constraint(req.constraint)
    except ConstraintError:
        return None
    cands = list(ordered)
    for alt in con.alternatives:
        if any(not alt.node_ok(n.features) for n in required):
            continue
        pool = [n for n in cands if alt.node_ok(n.features)]
        if not alt.counts:
            out = _allocate(req, required, pool, extra)
        else:
            usable = [n for n in pool if _can_take_one(req, n, extra)]
            limit = max(req.num_nodes, req.max_nodes)
            picked = pick_counted(alt, [*required, *usable], limit)
            if picked is None:
                continue
            req_k = list({n.name: n for n in [*required, *picked]}.values())
            names = {n.name for n in req_k}
            sub = replace(req, num_nodes=max(req.num_nodes, len(req_k)))
            out = _allocate(sub, req_k, [n for n in pool if n.name not in names], extra)
        if out is not None:
            return out
    return None


def _can_take_one(req: Request, node: NodeLike, extra: ExtraCheck | None) -> bool:
    if req.tasks_per_node:
        c, m, g = req.demand(node, req.tasks_per_node)
        return fits_now(node, c, m, g, req.exclusive) and (
            extra is None or extra(node, c, m, g, req.exclusive))
    return _task_capacity(req, node, extra) >= 1


def _allocate(
    req: Request,
    required: Sequence[NodeLike],
    ordered: Iterable[NodeLike],
    extra: ExtraCheck | None = None,
) -> list[NodeAlloc] | None:
    """Pick nodes and build the allocation.  `required` are the job's --nodelist nodes (all
    usable and permitted); `ordered` yields the other candidates in best-fit order, already
    filtered to usable, permitted, not excluded nodes.  `extra` vetoes a node/amount."""
    if req.gpu_spread:
        return _allocate_gpu_spread(req, required, ordered, extra)
    k = req.num_nodes
    req_names = {n.name for n in required}
    chosen: list[NodeLike] = []
    if req.tasks_per_node:
        t = req.tasks_per_node

        whole = req.exclusive
        # The common case, worth a fast path: the demand is the same on every node.
        fixed = None if whole else req.node_independent_demand(t)

        def ok(node: NodeLike) -> bool:
            if fixed is not None:
                c, m, g = fixed
                if node.exclusive or node.free_cpus < c or node.free_mem < m \
                        or len(node.free_gpus) < g:
                    return False
                return extra is None or extra(node, c, m, g, False)
            c, m, g = req.demand(node, t)
            if not fits_now(node, c, m, g, whole):
                return False
            if extra is None:
                return True
            if whole:
                return extra(node, node.cpus, node.mem, node.gpus, True)
            return extra(node, c, m, g, False)

        for node in required:
            if not ok(node):
                return None
            chosen.append(node)
        if len(chosen) < k:
            for node in ordered:
                if node.name in req_names or not ok(node):
                    continue
                chosen.append(node)
                if len(chosen) == k:
                    break
            else:
                return None
        counts = [t] * len(chosen)
    else:
        caps: list[int] = []
        for node in required:
            cap = _task_capacity(req, node, extra)
            if cap < 1:
                return None
            chosen.append(node)
            caps.append(cap)
        # Walk the best-fit order; when the fullest nodes are too small together, swap the
        # smallest one picked for a roomier one, until the tasks fit.  A job without -N
        # takes nodes until its tasks fit (up to `max_nodes`).
        need = k - len(chosen)
        most = max(need, req.max_nodes - len(chosen))
        want = req.tasks - sum(caps)
        pool: list[tuple[NodeLike, int]] = []
        pool_sum = 0
        if most > 0 and (need > 0 or want > 0):
            for node in ordered:
                if node.name in req_names:
                    continue
                cap = _task_capacity(req, node, extra)
                if cap < 1:
                    continue
                if len(pool) < most:
                    pool.append((node, cap))
                    pool_sum += cap
                else:
                    low = min(range(most), key=lambda i: pool[i][1])
                    if cap <= pool[low][1]:
                        continue
                    pool_sum += cap - pool[low][1]
                    del pool[low]
                    pool.append((node, cap))
                if len(pool) >= need and pool_sum >= want:
                    break
            if len(pool) < need:
                return None
        for node, cap in pool:
            chosen.append(node)
            caps.append(cap)
        dist = _distribute(req.tasks, caps)
        if dist is None:
            return None
        counts = dist
    return _build(req, chosen, counts)


def _gpu_room(req: Request, node: NodeLike, extra: ExtraCheck | None) -> int:
    """How many GPUs of a --gpus total `node` can take now with one task (0 = none)."""
    own = req.gpus_per_node_own
    if req.exclusive:
        room = node.gpus - own
        c, m, _ = req.demand(node, 1)
        if room < 1 or not fits_now(node, c, m, node.gpus, True):
            return 0
        if extra is not None and not extra(node, node.cpus, node.mem, node.gpus, True):
            return 0
        return room
    room = len(node.free_gpus) - own
    c, m, _ = req.demand(node, 1)
    if room < 1 or c > node.free_cpus or m > node.free_mem or node.exclusive:
        return 0
    if extra is not None:
        # the most GPUs the reservations leave room for (the check is monotone in GPUs)
        while room >= 1 and not extra(node, c, m, own + room, False):
            room -= 1
    return room


def _allocate_gpu_spread(
    req: Request,
    required: Sequence[NodeLike],
    ordered: Iterable[NodeLike],
    extra: ExtraCheck | None,
) -> list[NodeAlloc] | None:
    """A --gpus total without -N that no single node can hold: as few nodes as will do,
    those with the most free GPUs first, each taking as many of the GPUs as it has free
    while leaving one for each node after it (Slurm's _set_job_bits1), and one task at
    least."""
    total = req.gpus_total
    most = req.max_nodes
    own = req.gpus_per_node_own
    per_task = replace(req, tasks_per_node=0, gpus_per_node=own)
    picked: list[tuple[NodeLike, int]] = []
    for node in required:
        room = _gpu_room(req, node, extra)
        if room < 1:
            return None
        picked.append((node, room))
    req_names = {n.name for n in required}
    others = []
    for node in ordered:
        if node.name in req_names:
            continue
        room = _gpu_room(req, node, extra)
        if room >= 1:
            others.append((node, room))
    others.sort(key=lambda nr: -nr[1])  # stable: best fit among equals

    def caps_for(nodes: list[tuple[NodeLike, int]]) -> list[int]:
        return [_task_capacity(replace(per_task, gpus_per_node=own + room), n, extra)
                for n, room in nodes]

    got = sum(room for _, room in picked)
    caps: list[int] = []
    it = iter(others)
    while True:
        if len(picked) >= req.num_nodes and got >= total:
            caps = caps_for(picked)
            if sum(caps) >= max(req.tasks, len(picked)) and all(caps):
                break
        nxt = next(it, None)
        if nxt is None or len(picked) >= most:
            return None
        picked.append(nxt)
        got += nxt[1]
    k = len(picked)
    counts = _distribute(max(req.tasks, k), caps)
    if counts is None:
        return None
    out: list[NodeAlloc] = []
    left = total
    for i, ((node, room), t) in enumerate(zip(picked, counts, strict=True)):
        # (more nodes than GPUs, for the tasks: the first ones take none)
        take = max(0, min(room, left - (k - 1 - i)))
        left -= take
        free = sorted(node.free_gpus)
        if req.exclusive:
            out.append(NodeAlloc(node.name, node.cpus, node.mem, free))
            continue
        c, m, _ = per_task.demand(node, t)
        out.append(NodeAlloc(node.name, c, m, free[:own + take]))
    return out


def _build(req: Request, chosen: list[NodeLike], counts: list[int]) -> list[NodeAlloc]:
    out: list[NodeAlloc] = []
    k = len(chosen)
    # The total --gpus count: an even spread, the first nodes taking the remainder.
    share = -(-req.gpus_total // k) if req.gpus_total else 0
    base, rem = divmod(req.gpus_total, k) if req.gpus_total else (0, 0)
    for i, (node, t) in enumerate(zip(chosen, counts, strict=True)):
        free = sorted(node.free_gpus)
        if req.exclusive:
            out.append(NodeAlloc(node.name, node.cpus, node.mem, free))
            continue
        c, m, g = req.demand(node, t)
        if req.gpus_total:
            g = g - share + base + (1 if i < rem else 0)
        out.append(NodeAlloc(node.name, c, m, free[:g]))
    return out


def _in_partition(job: PendingView, node: NodeLike) -> bool:
    parts = getattr(node, "partitions", ())
    return not job.partition or job.partition in parts


def select_nodes(
    job: PendingView, nodes: list[NodeView], def_mem_per_cpu: int
) -> list[NodeAlloc] | None:
    """Where `job` can start now on `nodes`, or None.  Only usable nodes that list the job's
    partition in `NodeView.partitions` are considered (all of them when job.partition is "")."""
    req = make_request(job, def_mem_per_cpu)
    by_name = {n.name: n for n in nodes}
    required: list[NodeLike] = []
    for name in req.req_nodes:
        node = by_name.get(name)
        if node is None or not node.usable or not _in_partition(job, node) or name in req.exc_nodes:
            return None
        required.append(node)
    candidates = [
        n for n in nodes
        if n.usable and not n.exclusive and n.name not in req.exc_nodes and _in_partition(job, n)
    ]
    candidates.sort(key=best_fit_key)
    return allocate(req, required, candidates)


def idle_copy(node: NodeView, *, usable: bool = True) -> NodeView:
    """The node as it would be with no jobs on it."""
    return NodeView(
        name=node.name, cpus=node.cpus, mem=node.mem, gpus=node.gpus,
        free_cpus=node.cpus, free_mem=node.mem, free_gpus=list(range(node.gpus)),
        usable=usable, weight=node.weight, partitions=node.partitions,
        features=node.features, job_count=0, exclusive=False, gpu_type=node.gpu_type,
        tmp_disk=node.tmp_disk,
    )


def idle_allocation(job: PendingView, nodes: list[NodeView],
                    def_mem_per_cpu: int) -> list[NodeAlloc] | None:
    """Where `job` would run if all `nodes` were idle and up (Slurm's submit-time test,
    select_nodes(test_only)); its length is what Slurm shows of a pending job's node
    count (node_cnt_wag)."""
    return select_nodes(job, [idle_copy(n) for n in nodes], def_mem_per_cpu)


def fits_ever(job: PendingView, nodes: list[NodeView], def_mem_per_cpu: int) -> bool:
    """Could `job` run on `nodes` if all were idle and up?  False means Slurm's
    "Requested node configuration is not available"."""
    return idle_allocation(job, nodes, def_mem_per_cpu) is not None
