"""The simulator's lean pass (`Snapshot.starts_only`, sched/backfill.py `_may_start_from`)
stops planning once no later job can start now: a later job is tried early and a failure
remembered for its shape (nodes only fill and holds only grow in such a pass).  It must
start exactly the jobs a full pass starts, with the same reasons, whatever the mix: one
shape with many time limits (a shorter job of a failed shape may still backfill), several
shapes, multi-node jobs, two partitions over shared nodes, and planned durations from
predictions (EASY++)."""

from __future__ import annotations

import random

import pytest

from corral.model.node import Partition
from corral.sched import backfill
from corral.sched.backfill import schedule
from corral.sched.snapshot import NodeView, PendingView, RunningView, Snapshot
from tests.unit.sched_cluster import end_jobs, start_jobs


def _facts(placed: backfill.Placement) -> tuple[object, ...]:
    return (sorted((j, repr(a)) for j, a in placed.starts),
            sorted((j, r.text()) for j, r in placed.reasons.items()))


@pytest.mark.parametrize("seed,predict", [(3, False), (5, False), (8, True)])
def test_lean_pass_starts_what_a_full_pass_starts(seed: int, predict: bool) -> None:
    rng = random.Random(seed)
    views = {f"g{i}": NodeView(f"g{i}", 32, 256_000, 8, 32, 256_000, list(range(8)), True,
                               partitions=("gpu", "all")) for i in range(1, 7)}
    parts = {"gpu": Partition(name="gpu", nodes=list(views)),
             "all": Partition(name="all", nodes=list(views), priority_tier=2)}
    running: list[RunningView] = []
    pending: list[PendingView] = []
    now = 2_000_000.0
    next_id = 1
    planned_full = planned_lean = 0
    for step in range(120):
        now += rng.choice((0, 60, 600, 1800))
        for _ in range(rng.randint(0, 6)):
            gpus = rng.choice((1, 1, 2, 2, 4, 8, 16))  # (few shapes, as in a GPU trace)
            nodes = -(-gpus // 8)
            pending.append(PendingView(
                next_id, rng.randint(1, 40), now, rng.choice(("gpu", "gpu", "all")),
                num_nodes=nodes, num_tasks=nodes, gpus_per_node=min(gpus, 8),
                cpus_per_task=4 * min(gpus, 8), mem_per_node=16_000 * min(gpus, 8),
                time_limit=rng.choice((60, 300, 600, 1200, 3600, 7200, -1)),
                user=f"u{rng.randrange(4)}"))
            next_id += 1
        end_jobs(views, running, [r for r in running if r.end_time <= now or rng.random() < 0.1])
        predicted = {f"u{i}": float(rng.choice((120, 900, 5000))) for i in range(4)} \
            if predict else {}
        full, lean = (schedule(Snapshot(now=now, nodes=views, partitions=parts,
                                        running=running, pending=pending,
                                        predicted_runtime=predicted, starts_only=lean))
                      for lean in (False, True))
        assert _facts(lean) == _facts(full), f"step {step}"
        planned_full += len(full.planned)
        planned_lean += len(lean.planned)
        start_jobs(views, pending, running, full, now)
    assert planned_lean < planned_full  # (the lean pass did leave holds out)
