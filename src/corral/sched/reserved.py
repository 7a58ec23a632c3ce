"""Node selection and backfill with advanced reservations (model/reservation.py).

Eligibility has already kept back the jobs whose reservation is not active and the jobs a
maintenance reservation stops.  Here:

1. the jobs of each active reservation are placed first, on its nodes only (a pass of
   `sched.backfill.schedule` over those nodes, other reservations' windows held, but for
   a reservation other than a maintenance one sharing the nodes at the same time
   (OVERLAP): its nodes are this one's too until this one ends).  Preemption works there as outside, among the jobs running
   on its nodes; what its preemptors take beyond their victims' resources is taken for the
   scopes after it;
2. every other job is placed by one pass over all nodes in which each reservation's nodes
   are held whole for its window (`Snapshot.blocked`): a job may use a reserved node only
   if its time limit ends before the reservation starts, which is how backfill fills the
   time before a reservation.

Pure, like the rest of the pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from corral.model.job import NodeAlloc
from corral.model.reservation import Reservation

from .backfill import DEFAULT_MAX_PLANNED, BackfillMemo, Gate, schedule
from .snapshot import INFINITE_TIME, NodeView, PendingView, Placement, RunningView, Snapshot


def blocked_windows(reservations: Sequence[Reservation],
                    now: float) -> list[tuple[str, float, float]]:
    """(node, start, end) of every reservation's current or next window."""
    out: list[tuple[str, float, float]] = []
    for r in reservations:
        start, end = r.window(now)
        if end > now:
            out.extend((n, start, end) for n in r.nodes)
    return out


def _held_for(r: Reservation, reservations: Sequence[Reservation], now: float,
              mine: dict[str, NodeView]) -> tuple[tuple[str, float, float], ...]:
    """The other reservations' windows on `r`'s nodes, held whole for `r`'s jobs.  Where a
    reservation shares them at the same time (one made with OVERLAP), its nodes are `r`'s
    too until `r` ends: only the part of its window after that is held; a maintenance
    window is held whole."""
    end = r.window(now)[1]
    out: list[tuple[str, float, float]] = []
    for other in reservations:
        if other.name == r.name:
            continue
        s, e = other.window(now)
        if e <= now:
            continue
        if "MAINT" not in other.flags:
            s = max(s, end)
        if e > s:
            out.extend((n, s, e) for n in other.nodes if n in mine)
    return tuple(out)


def _taken(v: NodeView, a: NodeAlloc, exclusive: bool) -> NodeView:
    """The node after a start made in this pass."""
    used = set(a.gpus)
    return replace(v, free_cpus=v.free_cpus - a.cpus, free_mem=v.free_mem - a.mem_mb,
                   free_gpus=[g for g in v.free_gpus if g not in used],
                   job_count=v.job_count + 1, exclusive=v.exclusive or exclusive)


def _claimed(v: NodeView, a: NodeAlloc, freed: tuple[int, int], exclusive: bool) -> NodeView:
    """The node after a preemptor placed on it in this pass: beyond what its victims free
    there (`freed`: cpus, memory), it takes free resources, which no later scope may use
    (a SUSPEND preemptor starts at once on them)."""
    cpus, mem = freed
    used = set(a.gpus)
    return replace(v, free_cpus=max(0, v.free_cpus - max(0, a.cpus - cpus)),
                   free_mem=max(0, v.free_mem - max(0, a.mem_mb - mem)),
                   free_gpus=[g for g in v.free_gpus if g not in used],
                   job_count=v.job_count + 1, exclusive=v.exclusive or exclusive)


def _claim(snap: Snapshot, nodes: dict[str, NodeView], running: Sequence[RunningView],
           views: dict[int, PendingView], placed: Placement) -> None:
    """A reservation's preemptors' claims on its nodes, for the scopes after it (another
    reservation sharing them): the free resources they take beyond their victims'."""
    policy = snap.preempt
    by_id = {r.job_id: r for r in running}
    for cid, allocs, victims in placed.preemptions:
        for a in allocs:
            cpus = mem = 0
            for r in (by_id[v] for v in victims if v in by_id):
                keeps = policy is not None and policy.keeps_memory(r.qos, r.partition)
                for x in r.alloc:
                    if x.node == a.node:
                        cpus += x.cpus
                        mem += 0 if keeps else x.mem_mb
            if a.node in nodes:
                nodes[a.node] = _claimed(nodes[a.node], a, (cpus, mem), views[cid].exclusive)


def _merge(into: Placement, placed: Placement) -> None:
    into.starts.extend(placed.starts)
    into.reasons.update(placed.reasons)
    into.planned.update(placed.planned)
    into.preemptions.extend(placed.preemptions)
    into.preempt_seconds += placed.preempt_seconds


def schedule_reserved(snap: Snapshot, reservations: Sequence[Reservation], *,
                      max_planned: int = DEFAULT_MAX_PLANNED,
                      priorities: dict[int, int] | None = None,
                      gate: Gate | None = None,
                      timer: Callable[[], float] | None = None,
                      memo: BackfillMemo | None = None) -> Placement:
    now = snap.now
    nodes = dict(snap.nodes)
    running = list(snap.running)
    out = Placement()
    by_resv: dict[str, list[PendingView]] = {}
    others: list[PendingView] = []
    for job in snap.pending:
        if job.reservation:
            by_resv.setdefault(job.reservation, []).append(job)
        else:
            others.append(job)
    for r in reservations:
        jobs = by_resv.get(r.name)
        if not jobs or not r.active(now):
            continue
        mine = {n: nodes[n] for n in r.nodes if n in nodes}
        held = _held_for(r, reservations, now, mine)
        placed = schedule(replace(snap, nodes=mine, running=running, pending=jobs,
                                  blocked=held),
                          max_planned=max_planned, priorities=priorities, gate=gate,
                          timer=timer, memo=memo, scope=f"reservation {r.name}")
        _merge(out, placed)
        views = {j.job_id: j for j in jobs}
        for cid, allocs in placed.starts:
            job = views[cid]
            for a in allocs:
                nodes[a.node] = _taken(nodes[a.node], a, job.exclusive)
            end = INFINITE_TIME if job.time_limit < 0 else now + job.time_limit
            running.append(RunningView(cid, end, allocs, job.exclusive))
        _claim(snap, nodes, running, views, placed)
    if others:
        _merge(out, schedule(replace(snap, nodes=nodes, running=running, pending=others,
                                     blocked=tuple(blocked_windows(reservations, now))),
                             max_planned=max_planned, priorities=priorities, gate=gate,
                             timer=timer, memo=memo))
    return out
