"""Node selection and backfill with advanced reservations (model/reservation.py).

Eligibility has already kept back the jobs whose reservation is not active and the jobs a
maintenance reservation stops.  Here:

1. the jobs of each active reservation are placed first, on its nodes only (a pass of
   `sched.backfill.schedule` over those nodes, other reservations' windows held);
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


def blocked_windows(reservations: Sequence[Reservation], now: float,
                    but: str | None = None) -> list[tuple[str, float, float]]:
    """(node, start, end) of every reservation's current or next window (except `but`)."""
    out: list[tuple[str, float, float]] = []
    for r in reservations:
        if r.name == but:
            continue
        start, end = r.window(now)
        if end > now:
            out.extend((n, start, end) for n in r.nodes)
    return out


def _taken(v: NodeView, a: NodeAlloc, exclusive: bool) -> NodeView:
    """The node after a start made in this pass."""
    used = set(a.gpus)
    return replace(v, free_cpus=v.free_cpus - a.cpus, free_mem=v.free_mem - a.mem_mb,
                   free_gpus=[g for g in v.free_gpus if g not in used],
                   job_count=v.job_count + 1, exclusive=v.exclusive or exclusive)


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
        held = tuple(w for w in blocked_windows(reservations, now, but=r.name) if w[0] in mine)
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
    if others:
        _merge(out, schedule(replace(snap, nodes=nodes, running=running, pending=others,
                                     blocked=tuple(blocked_windows(reservations, now))),
                             max_planned=max_planned, priorities=priorities, gate=gate,
                             timer=timer, memo=memo))
    return out
