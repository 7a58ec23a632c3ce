"""Backfill keeps its nodes between passes (sched/backfill.py `_Kept`, in the caller's
`BackfillMemo`): a pass that reuses the last pass's nodes decides exactly as a pass that
builds them afresh, whatever changed in between: starts, ends, views changed in place, a drained or reweighted node, time
limits, new jobs, time."""

from __future__ import annotations

import random

from corral.model.node import Partition
from corral.sched import backfill
from corral.sched.backfill import schedule
from corral.sched.snapshot import INFINITE_TIME, NodeView, PendingView, RunningView, Snapshot
from tests.unit.sched_cluster import end_jobs, start_jobs


def _views(n: int) -> dict[str, NodeView]:
    return {f"n{i}": NodeView(f"n{i}", 16, 64_000, 8, 16, 64_000, list(range(8)), True,
                              partitions=("gpu",)) for i in range(1, n + 1)}


def _facts(placed: backfill.Placement) -> tuple[object, ...]:
    return (sorted((j, repr(a)) for j, a in placed.starts),
            sorted((j, r.text()) for j, r in placed.reasons.items()),
            sorted(placed.planned.items()))


def test_kept_nodes_decide_as_fresh_ones() -> None:
    rng = random.Random(7)
    views = _views(6)
    part = Partition(name="gpu", nodes=list(views))
    running: list[RunningView] = []
    pending: list[PendingView] = []
    now = 1_000_000.0
    next_id = 1
    memo = backfill.BackfillMemo()
    survived = 0
    for step in range(120):
        now += rng.choice((0, 1, 30, 600))
        for _ in range(rng.randint(0, 3)):
            gpus = rng.choice((1, 2, 4, 8, 16, 48))  # (48: every node, NODES_DOWN if drained)
            nodes = -(-gpus // 8)
            limit = rng.choice((60, 600, 3600, -1))
            pending.append(PendingView(next_id, rng.randint(1, 50), now, "gpu",
                                       num_nodes=nodes, num_tasks=nodes,
                                       gpus_per_node=min(gpus, 8), cpus_per_task=2,
                                       mem_per_node=4000, time_limit=limit))
            next_id += 1
        end_jobs(views, running, [r for r in running if r.end_time <= now or rng.random() < 0.05])
        if running and rng.random() < 0.3:  # a time limit changed: releases move
            i = rng.randrange(len(running))
            r = running[i]
            if r.end_time != INFINITE_TIME:
                running[i] = RunningView(r.job_id, r.end_time + rng.choice((-300, 900)), r.alloc)
        if step % 40 == 20:  # a node drained, in place, and back later
            views["n3"].usable = not views["n3"].usable
        if step % 50 == 25:  # a node's weight changed, in place
            views["n5"].weight = 1 + step % 7
        snap = Snapshot(now=now, nodes=views, partitions={"gpu": part}, running=running,
                        pending=pending)
        kept = memo.scopes.get("")
        before = list(kept.by_rank) if kept is not None else []
        got = schedule(snap, memo=memo)
        survived += sum(a is b for a, b in zip(memo.scopes[""].by_rank, before, strict=False))
        fresh = schedule(snap)  # (built afresh: no memo)
        assert _facts(got) == _facts(fresh), f"step {step}"
        start_jobs(views, pending, running, got, now)
    assert survived > 0  # (the nodes were kept, not built afresh every pass)


def test_starts_only_starts_the_same_jobs() -> None:
    """The simulator's passes (`Snapshot.starts_only`) leave out the holds that could hold
    back no later start: the same starts and reasons as a full pass, fewer plans."""
    rng = random.Random(11)
    views = _views(6)
    part = Partition(name="gpu", nodes=list(views))
    running: list[RunningView] = []
    pending: list[PendingView] = []
    now = 1_000_000.0
    next_id = 1
    left_out = 0
    for step in range(150):
        now += rng.choice((0, 30, 600, 1800))
        for _ in range(rng.randint(0, 4)):
            gpus = rng.choice((1, 1, 2, 4, 8, 16))
            nodes = -(-gpus // 8)
            pending.append(PendingView(next_id, rng.randint(1, 50), now, "gpu",
                                       num_nodes=nodes, num_tasks=nodes,
                                       gpus_per_node=min(gpus, 8), cpus_per_task=2,
                                       mem_per_node=4000,
                                       time_limit=rng.choice((60, 600, 3600, 7200, -1))))
            next_id += 1
        end_jobs(views, running, [r for r in running if r.end_time <= now])
        full = schedule(Snapshot(now=now, nodes=views, partitions={"gpu": part},
                                 running=running, pending=pending))
        lean = schedule(Snapshot(now=now, nodes=views, partitions={"gpu": part},
                                 running=running, pending=pending, starts_only=True))
        assert lean.starts == full.starts, f"step {step}"
        assert _facts(lean)[1] == _facts(full)[1], f"step {step}"
        assert set(lean.planned) <= set(full.planned)
        left_out += len(full.planned) - len(lean.planned)
        start_jobs(views, pending, running, full, now)
    assert left_out > 0  # (some holds were left out)
