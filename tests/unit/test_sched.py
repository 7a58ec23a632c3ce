"""Scheduling policy: priority, node selection (GPU packing) and backfill."""

from __future__ import annotations

import random

import pytest

from corral.model.job import Job, JobState, NodeAlloc, Reason
from corral.model.node import Partition
from corral.sched.backfill import PARTITION_CONFIG, PARTITION_INACTIVE, schedule
from corral.sched.pipeline import ClusterSnapshot, SchedParams, run_pass
from corral.sched.priority import (
    PriorityFactors,
    PriorityWeights,
    job_priority,
    multifactor,
)
from corral.sched.select import fits_ever, select_nodes
from corral.sched.snapshot import INFINITE_TIME, NodeView, PendingView, RunningView, Snapshot

NOW = 1_000_000.0


def node(name: str, cpus: int = 64, mem: int = 200_000, gpus: int = 8, *, part: str = "debug",
         usable: bool = True, weight: int = 1) -> NodeView:
    return NodeView(name=name, cpus=cpus, mem=mem, gpus=gpus, free_cpus=cpus, free_mem=mem,
                    free_gpus=list(range(gpus)), usable=usable, weight=weight, partitions=(part,))


def nodes(n: int, **kw: object) -> list[NodeView]:
    return [node(f"node-{i}", **kw) for i in range(1, n + 1)]  # type: ignore[arg-type]


def job(job_id: int, **kw: object) -> PendingView:
    kw.setdefault("priority", 100)
    kw.setdefault("submit_time", NOW - 1000 + job_id)
    kw.setdefault("partition", "debug")
    return PendingView(job_id=job_id, **kw)  # type: ignore[arg-type]


def occupy(views: dict[str, NodeView], job_id: int, allocs: list[NodeAlloc], end: float,
           exclusive: bool = False) -> RunningView:
    """Mark `allocs` as held on the node views and return the running job."""
    for a in allocs:
        v = views[a.node]
        v.free_cpus -= a.cpus
        v.free_mem -= a.mem_mb
        v.free_gpus = [g for g in v.free_gpus if g not in a.gpus]
        v.job_count += 1
        v.exclusive = v.exclusive or exclusive
    return RunningView(job_id=job_id, end_time=end, alloc=allocs, exclusive=exclusive)


def snap(views: list[NodeView], pending: list[PendingView], running: list[RunningView] | None = None,
         partitions: list[Partition] | None = None, **kw: object) -> Snapshot:
    parts = partitions or [Partition(name="debug", nodes=[v.name for v in views])]
    return Snapshot(now=NOW, nodes={v.name: v for v in views}, partitions={p.name: p for p in parts},
                    running=running or [], pending=pending, **kw)  # type: ignore[arg-type]


def started(dec: object) -> dict[int, list[NodeAlloc]]:
    return dict(dec.starts)  # type: ignore[attr-defined]


# ---- priority -------------------------------------------------------------------------

def test_priority_age_and_partition() -> None:
    p = job_priority(NOW - 3.5 * 86400, NOW, partition_job_factor=1, max_partition_job_factor=2,
                     weight_age=1000, max_age_s=7 * 86400, weight_partition=1000)
    assert p == 500 + 500


def test_priority_age_caps_at_max_age_and_nice_subtracts() -> None:
    p = job_priority(NOW - 30 * 86400, NOW, partition_job_factor=1, max_partition_job_factor=1,
                     weight_age=1000, max_age_s=7 * 86400, weight_partition=0, nice=100)
    assert p == 900


def test_priority_at_least_one() -> None:
    assert job_priority(NOW, NOW, partition_job_factor=1, max_partition_job_factor=1,
                        weight_age=0, max_age_s=0, weight_partition=0) == 1
    assert job_priority(NOW, NOW, partition_job_factor=1, max_partition_job_factor=1,
                        weight_age=0, max_age_s=0, weight_partition=10, nice=50) == 1


def test_priority_other_factors_are_weighted() -> None:
    w = PriorityWeights(fairshare=2000, qos=100)
    assert multifactor(w, PriorityFactors(fairshare=0.25, qos=1.0)) == 600


# ---- select ---------------------------------------------------------------------------

def test_gpu_packing_fills_one_node_first() -> None:
    views = nodes(4, gpus=4)
    by_name = {v.name: v for v in views}
    placed = []
    for i in range(4):
        allocs = select_nodes(job(i, gpus_per_node=1), views, 1024)
        assert allocs is not None
        occupy(by_name, i, allocs, INFINITE_TIME)
        placed.append((allocs[0].node, allocs[0].gpus))
    assert {n for n, _ in placed} == {"node-1"}
    assert sorted(g for _, gs in placed for g in gs) == [0, 1, 2, 3]


def test_gpu_packing_prefers_node_with_fewest_free_gpus_that_fit() -> None:
    views = nodes(3, gpus=8)
    by_name = {v.name: v for v in views}
    occupy(by_name, 1, [NodeAlloc("node-2", 1, 0, [0, 1, 2, 3, 4, 5])], INFINITE_TIME)  # 2 free
    occupy(by_name, 2, [NodeAlloc("node-3", 1, 0, [0, 1, 2, 3])], INFINITE_TIME)  # 4 free
    a = select_nodes(job(9, gpus_per_node=2), views, 0)
    assert a is not None and a[0].node == "node-2" and a[0].gpus == [6, 7]
    a = select_nodes(job(9, gpus_per_node=3), views, 0)
    assert a is not None and a[0].node == "node-3" and a[0].gpus == [4, 5, 6]


def test_cpu_job_avoids_nodes_with_free_gpus() -> None:
    views = [node("gpu-1", gpus=8), node("cpu-1", gpus=0), node("gpu-2", gpus=8)]
    a = select_nodes(job(1, cpus_per_task=4), views, 0)
    assert a is not None and a[0].node == "cpu-1"
    # A GPU node whose GPUs are all taken is as good as a CPU node.
    views = [node("gpu-1", gpus=2), node("gpu-2", gpus=2)]
    by_name = {v.name: v for v in views}
    occupy(by_name, 1, [NodeAlloc("gpu-2", 1, 0, [0, 1])], INFINITE_TIME)
    a = select_nodes(job(2), views, 0)
    assert a is not None and a[0].node == "gpu-2"


def test_best_fit_then_weight_then_name() -> None:
    views = nodes(3, gpus=0)
    views[1].weight = 0
    a = select_nodes(job(1), views, 0)
    assert a is not None and a[0].node == "node-2"
    views[1].weight = 1
    by_name = {v.name: v for v in views}
    occupy(by_name, 1, [NodeAlloc("node-3", 60, 0)], INFINITE_TIME)
    a = select_nodes(job(2, cpus_per_task=4), views, 0)
    assert a is not None and a[0].node == "node-3"
    a = select_nodes(job(3, cpus_per_task=5), views, 0)
    assert a is not None and a[0].node == "node-1"


def test_natural_name_order() -> None:
    views = [node("node-10", gpus=0), node("node-9", gpus=0)]
    a = select_nodes(job(1), views, 0)
    assert a is not None and a[0].node == "node-9"


def test_memory_rules() -> None:
    views = nodes(1, gpus=0)
    a = select_nodes(job(1, num_tasks=2, cpus_per_task=2), views, 1024)
    assert a is not None and (a[0].cpus, a[0].mem_mb) == (4, 4096)
    a = select_nodes(job(1, num_tasks=2, cpus_per_task=2, mem_per_cpu=500), views, 1024)
    assert a is not None and a[0].mem_mb == 2000
    a = select_nodes(job(1, mem_per_node=4096), views, 1024)
    assert a is not None and a[0].mem_mb == 4096
    a = select_nodes(job(1, mem_per_node=0), views, 1024)
    assert a is not None and a[0].mem_mb == 200_000
    a = select_nodes(job(1), views, 0)
    assert a is not None and a[0].mem_mb == 0
    assert select_nodes(job(1, mem_per_node=300_000), views, 0) is None
    # --mem=0 needs all of the node's memory free.
    views[0].free_mem -= 1
    assert select_nodes(job(1, mem_per_node=0), views, 0) is None


def test_multi_node_per_node_gpus_and_tasks() -> None:
    views = nodes(4, gpus=8)
    a = select_nodes(job(1, num_nodes=2, cpus_per_task=4, mem_per_node=4096, gpus_per_node=2), views, 0)
    assert a is not None
    assert [x.node for x in a] == ["node-1", "node-2"]
    assert all(x.cpus == 4 and x.mem_mb == 4096 and x.gpus == [0, 1] for x in a)
    a = select_nodes(job(2, num_nodes=2, num_tasks=4, ntasks_per_node=2, gpus_per_task=1), views, 0)
    assert a is not None and [(x.cpus, len(x.gpus)) for x in a] == [(2, 2), (2, 2)]


def test_total_gpus_spread_over_nodes() -> None:
    views = nodes(2, gpus=4)
    a = select_nodes(job(1, num_nodes=2, num_tasks=2, gpus=3), views, 0)
    assert a is not None and sorted(len(x.gpus) for x in a) == [1, 2]
    assert select_nodes(job(1, gpus=5), views, 0) is None
    a = select_nodes(job(1, gpus=4), views, 0)
    assert a is not None and a[0].gpus == [0, 1, 2, 3]


def test_tasks_spread_every_node_gets_one() -> None:
    views = nodes(2, cpus=8, gpus=0)
    by_name = {v.name: v for v in views}
    occupy(by_name, 1, [NodeAlloc("node-2", 6, 0)], INFINITE_TIME)  # node-2: 2 free CPUs
    a = select_nodes(job(1, num_nodes=2, num_tasks=8), views, 0)
    assert a is not None
    cpus = {x.node: x.cpus for x in a}
    assert cpus == {"node-2": 2, "node-1": 6}
    assert select_nodes(job(1, num_nodes=2, num_tasks=11), views, 0) is None
    # An even spread where it fits.
    a = select_nodes(job(1, num_nodes=2, num_tasks=4), nodes(2, cpus=8, gpus=0), 0)
    assert a is not None and [x.cpus for x in a] == [2, 2]


def test_exclusive_takes_whole_idle_nodes() -> None:
    views = nodes(3, cpus=16, mem=1000, gpus=2)
    by_name = {v.name: v for v in views}
    occupy(by_name, 1, [NodeAlloc("node-1", 1, 10)], INFINITE_TIME)
    a = select_nodes(job(2, exclusive=True, num_nodes=2), views, 100)
    assert a is not None
    assert [(x.node, x.cpus, x.mem_mb, x.gpus) for x in a] == [
        ("node-2", 16, 1000, [0, 1]), ("node-3", 16, 1000, [0, 1])]
    assert select_nodes(job(3, exclusive=True, num_nodes=3), views, 100) is None


def test_req_and_exc_nodes_and_usable_and_partition() -> None:
    views = nodes(4, gpus=0)
    a = select_nodes(job(1, req_nodes=("node-3",)), views, 0)
    assert a is not None and [x.node for x in a] == ["node-3"]
    a = select_nodes(job(1, num_nodes=2, req_nodes=("node-4",)), views, 0)
    assert a is not None and [x.node for x in a] == ["node-4", "node-1"]
    a = select_nodes(job(1, exc_nodes=("node-1", "node-2")), views, 0)
    assert a is not None and a[0].node == "node-3"
    assert select_nodes(job(1, req_nodes=("node-1",), exc_nodes=("node-1",)), views, 0) is None
    views[0].usable = False
    a = select_nodes(job(1), views, 0)
    assert a is not None and a[0].node == "node-2"
    assert select_nodes(job(1, req_nodes=("node-1",)), views, 0) is None
    assert select_nodes(job(1, partition="other"), views, 0) is None


def test_fits_ever() -> None:
    views = nodes(4, gpus=8)
    busy = {v.name: v for v in views}
    for i, v in enumerate(views):
        occupy(busy, i, [NodeAlloc(v.name, 64, 0, list(range(8)))], INFINITE_TIME)
    views[0].usable = False
    assert fits_ever(job(1, gpus_per_node=8, num_nodes=4), views, 1024)
    assert not fits_ever(job(1, gpus_per_node=9), views, 1024)
    assert not fits_ever(job(1, mem_per_node=300_000), views, 1024)
    assert not fits_ever(job(1, num_nodes=5), views, 1024)
    assert not fits_ever(job(1, cpus_per_task=65), views, 1024)
    assert fits_ever(job(1, num_tasks=256), views, 0) is False  # one node by default
    assert fits_ever(job(1, num_nodes=4, num_tasks=256), views, 0)


# ---- backfill -------------------------------------------------------------------------

def test_all_fit_start_in_priority_order() -> None:
    views = nodes(2, cpus=4, gpus=0)
    pend = [job(1, priority=1), job(2, priority=5, cpus_per_task=4), job(3, priority=3, cpus_per_task=4)]
    dec = schedule(snap(views, pend))
    assert [j for j, _ in dec.starts] == [2, 3]
    assert dec.reason_texts == {1: Reason.RESOURCES}


def test_four_one_gpu_jobs_land_on_one_node() -> None:
    views = nodes(4, gpus=4)
    dec = schedule(snap(views, [job(i, gpus_per_node=1) for i in range(1, 5)]))
    s = started(dec)
    assert {a[0].node for a in s.values()} == {"node-1"}
    assert sorted(a[0].gpus[0] for a in s.values()) == [0, 1, 2, 3]


def _blocked_big_job_setup(short_limit: int) -> tuple[Snapshot, float]:
    """Two 4-CPU nodes; node-1 fully busy until NOW+100, node-2 half busy until NOW+200.
    A big job needs both nodes whole; a small job fits in node-2's free half now."""
    views = nodes(2, cpus=4, gpus=0)
    by_name = {v.name: v for v in views}
    running = [occupy(by_name, 10, [NodeAlloc("node-1", 4, 0)], NOW + 100),
               occupy(by_name, 11, [NodeAlloc("node-2", 2, 0)], NOW + 200)]
    pend = [job(1, priority=10, num_nodes=2, num_tasks=8, time_limit=600),
            job(2, priority=1, num_tasks=2, time_limit=short_limit)]
    return snap(views, pend, running), NOW + 200


def test_backfill_short_job_starts_when_it_ends_before_reservation() -> None:
    s, reserved_at = _blocked_big_job_setup(short_limit=150)
    dec = schedule(s)
    assert [j for j, _ in dec.starts] == [2]
    assert dec.reason_texts[1] == Reason.RESOURCES
    assert dec.planned[1] == (reserved_at, ["node-1", "node-2"])


def test_backfill_long_job_waits_when_it_would_delay_reservation() -> None:
    s, reserved_at = _blocked_big_job_setup(short_limit=250)
    dec = schedule(s)
    assert dec.starts == []
    assert dec.reason_texts == {1: Reason.RESOURCES, 2: Reason.PRIORITY}
    assert dec.planned[1] == (reserved_at, ["node-1", "node-2"])
    # ...and it is planned after the big job.
    assert dec.planned[2][0] == reserved_at + 600


def test_unlimited_job_never_backfills_ahead_of_reservation() -> None:
    s, _ = _blocked_big_job_setup(short_limit=-1)
    dec = schedule(s)
    assert dec.starts == []
    assert dec.reason_texts[2] == Reason.PRIORITY


def test_backfill_on_resources_the_reservation_does_not_need() -> None:
    views = nodes(3, cpus=4, gpus=0)
    by_name = {v.name: v for v in views}
    running = [occupy(by_name, 10, [NodeAlloc("node-1", 4, 0)], NOW + 100)]
    pend = [job(1, priority=10, num_nodes=3, num_tasks=3, exclusive=True, time_limit=60),
            job(2, priority=1, time_limit=-1)]
    dec = schedule(snap(views, pend, running))
    # The exclusive job needs all three nodes from NOW+100, so an unlimited job fits nowhere.
    assert dec.starts == []
    assert dec.planned[1][0] == NOW + 100
    pend = [job(1, priority=10, num_nodes=2, num_tasks=2, cpus_per_task=4, time_limit=60,
                req_nodes=("node-1", "node-2")),
            job(2, priority=1, time_limit=-1)]
    dec = schedule(snap(views, pend, running))
    assert started(dec)[2][0].node == "node-3"


def test_jobs_started_in_the_pass_count_for_reservations() -> None:
    views = nodes(1, cpus=4, gpus=0)
    pend = [job(1, priority=10, cpus_per_task=3, time_limit=100),
            job(2, priority=9, cpus_per_task=4, time_limit=100),
            job(3, priority=1, time_limit=50),
            job(4, priority=1, time_limit=200, cpus_per_task=1)]
    dec = schedule(snap(views, pend))
    s = started(dec)
    assert list(s) == [1, 3]  # job 3 ends (NOW+50) before job 2's reservation (NOW+100)
    assert dec.planned[2] == (NOW + 100, ["node-1"])
    assert dec.reason_texts[2] == Reason.RESOURCES and dec.reason_texts[4] == Reason.PRIORITY


def test_no_backfill_is_strict_order() -> None:
    s, _ = _blocked_big_job_setup(short_limit=10)
    s.backfill = False
    dec = schedule(s)
    assert dec.starts == [] and dec.reason_texts[2] == Reason.PRIORITY


def test_unplannable_top_job_does_not_block() -> None:
    """Everything running is unlimited: no reservation can be made, so smaller jobs run
    (what Slurm's backfill did with bigexcl in the reference captures)."""
    views = nodes(4, gpus=8)
    by_name = {v.name: v for v in views}
    running = [occupy(by_name, 1, [NodeAlloc("node-1", 1, 1024)], INFINITE_TIME),
               occupy(by_name, 2, [NodeAlloc("node-1", 4, 4096, [0, 1]),
                                   NodeAlloc("node-2", 4, 4096, [0, 1])], INFINITE_TIME)]
    pend = [job(4, num_nodes=4, num_tasks=4, exclusive=True), job(9, time_limit=60), job(8)]
    dec = schedule(snap(views, pend, running, def_mem_per_cpu=1024))
    assert dec.reason_texts[4] == Reason.NODES_DOWN
    assert 4 not in dec.planned
    assert set(started(dec)) == {8, 9}


def test_exclusive_waits_for_idle_nodes_and_gets_a_plan() -> None:
    views = nodes(2, gpus=0)
    by_name = {v.name: v for v in views}
    running = [occupy(by_name, 1, [NodeAlloc("node-1", 1, 0)], NOW + 300)]
    dec = schedule(snap(views, [job(2, num_nodes=2, num_tasks=2, exclusive=True, time_limit=60),
                                job(3, time_limit=600)], running))
    assert dec.reason_texts[2] == Reason.NODES_DOWN
    assert dec.planned[2] == (NOW + 300, ["node-1", "node-2"])
    assert 3 not in started(dec)  # it would overlap the exclusive reservation on both nodes
    dec = schedule(snap(views, [job(2, num_nodes=2, num_tasks=2, exclusive=True, time_limit=60),
                                job(3, time_limit=200)], running))
    assert 3 in started(dec)


def test_exclusive_node_is_not_shared() -> None:
    views = nodes(1, gpus=0)
    by_name = {v.name: v for v in views}
    running = [occupy(by_name, 1, [NodeAlloc("node-1", 64, 200_000)], NOW + 10, exclusive=True)]
    by_name["node-1"].free_cpus = 10  # even if the view claims free CPUs
    dec = schedule(snap(views, [job(2)], running))
    assert dec.starts == [] and dec.planned[2] == (NOW + 10, ["node-1"])


def test_req_and_exc_nodes_in_schedule() -> None:
    views = nodes(3, gpus=0)
    dec = schedule(snap(views, [job(1, req_nodes=("node-3",)), job(2, exc_nodes=("node-1", "node-3"))]))
    s = started(dec)
    assert s[1][0].node == "node-3" and s[2][0].node == "node-2"


def test_req_node_not_available_reason() -> None:
    views = nodes(3, gpus=0)
    views[1].usable = False
    views[2].usable = False
    dec = schedule(snap(views, [job(1, req_nodes=("node-2", "node-3"))]))
    assert dec.reason_texts[1] == "ReqNodeNotAvail, UnavailableNodes:node-[2-3]"


def test_nodes_down_reason() -> None:
    views = nodes(4, gpus=0)
    views[3].usable = False
    dec = schedule(snap(views, [job(1, num_nodes=4, num_tasks=4), job(2)]))
    assert dec.reason_texts[1] == Reason.NODES_DOWN
    assert 1 not in dec.planned
    assert 2 in started(dec)


def test_impossible_jobs_get_partition_reasons_and_block_nothing() -> None:
    views = nodes(4, gpus=8)
    pend = [job(14, num_nodes=10, priority=10), job(15, num_tasks=1000, num_nodes=16, priority=9),
            job(16, gpus_per_node=9, priority=8), job(17, priority=1)]
    parts = [Partition(name="debug", nodes=[v.name for v in views])]
    dec = schedule(snap(views, pend, partitions=parts))
    assert dec.reason_texts[14] == Reason.PARTITION_NODE_LIMIT
    assert dec.reason_texts[15] == Reason.PARTITION_NODE_LIMIT
    assert dec.reason_texts[16] == PARTITION_CONFIG
    assert list(started(dec)) == [17]
    dec = schedule(snap(views, [job(18, num_tasks=257, num_nodes=4)], partitions=parts))
    assert dec.reason_texts[18] == PARTITION_CONFIG


def test_partition_states_and_time_limit() -> None:
    views = nodes(1, gpus=0)
    for state, reason in (("DOWN", Reason.PARTITION_DOWN), ("INACTIVE", PARTITION_INACTIVE)):
        parts = [Partition(name="debug", nodes=["node-1"], state=state)]
        dec = schedule(snap(views, [job(1)], partitions=parts))
        assert dec.starts == [] and dec.reason_texts[1] == reason
    parts = [Partition(name="debug", nodes=["node-1"], state="DRAIN")]
    assert started(schedule(snap(views, [job(1)], partitions=parts)))
    parts = [Partition(name="debug", nodes=["node-1"], max_time=3600)]
    dec = schedule(snap(views, [job(1, time_limit=7200), job(2, time_limit=60)], partitions=parts))
    assert dec.reason_texts[1] == Reason.PARTITION_TIME_LIMIT and list(started(dec)) == [2]


def test_priority_tier_and_shared_nodes() -> None:
    views = [node("node-1", cpus=4, gpus=0, part="low")]
    views[0].partitions = ("low", "high")
    parts = [Partition(name="low", nodes=["node-1"], priority_tier=1),
             Partition(name="high", nodes=["node-1"], priority_tier=5)]
    pend = [job(1, partition="low", priority=1000, cpus_per_task=4),
            job(2, partition="high", priority=1, cpus_per_task=4)]
    dec = schedule(snap(views, pend, partitions=parts))
    assert list(started(dec)) == [2]
    assert dec.reason_texts[1] == Reason.RESOURCES


def test_reservation_in_one_partition_protects_shared_nodes() -> None:
    views = [node("node-1", cpus=4, gpus=0), node("node-2", cpus=4, gpus=0)]
    for v in views:
        v.partitions = ("a", "b")
    by_name = {v.name: v for v in views}
    running = [occupy(by_name, 9, [NodeAlloc("node-1", 4, 0)], NOW + 100)]
    parts = [Partition(name="a", nodes=["node-1", "node-2"], priority_tier=2),
             Partition(name="b", nodes=["node-1", "node-2"])]
    pend = [job(1, partition="a", num_nodes=2, num_tasks=8, time_limit=100),
            job(2, partition="b", num_tasks=4, time_limit=1000),
            job(3, partition="b", num_tasks=4, time_limit=50)]
    dec = schedule(snap(views, pend, running, partitions=parts))
    assert list(started(dec)) == [3]
    assert dec.reason_texts[2] == Reason.RESOURCES  # first blocked job of partition b


def test_same_priority_orders_by_submit_then_id() -> None:
    views = nodes(1, cpus=1, gpus=0)
    pend = [job(5, submit_time=NOW - 10), job(3, submit_time=NOW - 10), job(4, submit_time=NOW - 20)]
    dec = schedule(snap(views, pend))
    assert list(started(dec)) == [4]
    assert dec.reason_texts == {3: Reason.RESOURCES, 5: Reason.PRIORITY}


def test_planned_multi_node_start_uses_end_times() -> None:
    views = nodes(3, cpus=2, gpus=0)
    by_name = {v.name: v for v in views}
    running = [occupy(by_name, 1, [NodeAlloc("node-1", 2, 0)], NOW + 50),
               occupy(by_name, 2, [NodeAlloc("node-2", 2, 0)], NOW + 30),
               occupy(by_name, 3, [NodeAlloc("node-3", 2, 0)], NOW + 90)]
    dec = schedule(snap(views, [job(1, num_nodes=2, num_tasks=4, time_limit=10),
                                job(2, num_nodes=3, num_tasks=6, time_limit=10)], running))
    assert dec.planned[1] == (NOW + 50, ["node-1", "node-2"])
    assert dec.planned[2] == (NOW + 90, ["node-1", "node-2", "node-3"])


def test_gpu_job_plan_and_backfill_of_cpu_job() -> None:
    views = nodes(1, cpus=8, gpus=4)
    by_name = {v.name: v for v in views}
    running = [occupy(by_name, 1, [NodeAlloc("node-1", 2, 0, [0, 1, 2])], NOW + 100)]
    pend = [job(2, priority=5, gpus_per_node=2, time_limit=100), job(3, priority=1, cpus_per_task=6, time_limit=-1)]
    dec = schedule(snap(views, pend, running))
    assert dec.planned[2] == (NOW + 100, ["node-1"])
    assert list(started(dec)) == [3]  # uses CPUs the GPU job does not need


def test_failed_shape_cache_still_lets_shorter_jobs_backfill() -> None:
    s, _ = _blocked_big_job_setup(short_limit=250)
    s.pending.append(job(3, priority=0, num_tasks=2, time_limit=100))
    dec = schedule(s)
    assert list(started(dec)) == [3]
    assert dec.reason_texts[2] == Reason.PRIORITY


def test_max_planned_budget() -> None:
    views = nodes(1, cpus=1, gpus=0)
    by_name = {v.name: v for v in views}
    running = [occupy(by_name, 1, [NodeAlloc("node-1", 1, 0)], NOW + 10)]
    pend = [job(i, time_limit=10) for i in range(2, 12)]
    dec = schedule(snap(views, pend, running), max_planned=3)
    assert sorted(dec.planned) == [2, 3, 4, 5]
    assert [dec.planned[i][0] for i in (2, 3, 4, 5)] == [NOW + 10, NOW + 20, NOW + 30, NOW + 40]
    assert all(dec.reason_texts[i] == Reason.PRIORITY for i in range(3, 12))


def _random_cluster(rng: random.Random) -> tuple[list[NodeView], dict[str, NodeView]]:
    views = [node(f"n{i}", cpus=rng.choice([8, 16]), mem=rng.choice([16000, 32000]),
                  gpus=rng.choice([0, 2, 4])) for i in range(rng.randint(2, 8))]
    by_name = {v.name: v for v in views}
    for v in views:
        if rng.random() < 0.6:
            used_gpus = list(range(rng.randint(0, v.gpus)))
            occupy(by_name, 0, [NodeAlloc(v.name, rng.randint(1, v.cpus), rng.randint(0, v.mem),
                                          used_gpus)], INFINITE_TIME)
    return views, by_name


def _random_job(rng: random.Random, i: int) -> PendingView:
    return job(i, num_nodes=rng.choice([1, 1, 1, 2]), num_tasks=rng.choice([1, 2, 4]),
               cpus_per_task=rng.choice([1, 2, 4]), gpus_per_node=rng.choice([0, 0, 1, 2]),
               mem_per_cpu=rng.choice([None, 500, 2000]), exclusive=rng.random() < 0.1)


@pytest.mark.parametrize("seed", range(40))
def test_schedule_places_like_select_nodes_and_never_overcommits(seed: int) -> None:
    """The indexed search in schedule() picks what select_nodes() picks, job after job."""
    rng = random.Random(seed)
    views, by_name = _random_cluster(rng)
    pend = [_random_job(rng, i) for i in range(1, 15)]
    s = snap(views, pend, def_mem_per_cpu=100)
    initial = {v.name: (v.free_cpus, v.free_mem, list(v.free_gpus)) for v in views}
    dec = schedule(s)
    assert {v.name: (v.free_cpus, v.free_mem, v.free_gpus) for v in views} == initial  # pure
    # Replay in priority order with select_nodes, stopping at the first job that waits
    # (without reservations both must agree up to there).
    replay = {v.name: node(v.name, v.cpus, v.mem, v.gpus) for v in views}
    for v in views:
        r = replay[v.name]
        r.free_cpus, r.free_mem, r.free_gpus = initial[v.name]
        r.job_count = v.job_count
    expected = []
    for pj in sorted(pend, key=lambda j: (-j.priority, j.submit_time, j.job_id)):
        a = select_nodes(pj, list(replay.values()), 100)
        if a is None:
            break
        occupy(replay, pj.job_id, a, INFINITE_TIME, exclusive=pj.exclusive)
        expected.append((pj.job_id, a))
    assert dec.starts[: len(expected)] == expected
    # Whatever started fits in what was free.
    used: dict[str, list[int]] = {v.name: [0, 0] for v in views}
    gpus_used: dict[str, list[int]] = {v.name: [] for v in views}
    for _, allocs in dec.starts:
        for na in allocs:
            used[na.node][0] += na.cpus
            used[na.node][1] += na.mem_mb
            gpus_used[na.node] += na.gpus
    for v in views:
        free_c, free_m, free_g = initial[v.name]
        assert used[v.name][0] <= free_c and used[v.name][1] <= free_m
        assert len(gpus_used[v.name]) == len(set(gpus_used[v.name]))
        assert set(gpus_used[v.name]) <= set(free_g)


# ---- the pipeline (sched/pipeline.py) and its stages -------------------------------------

def _pending_job(job_id: int, **kw: object) -> Job:
    kw.setdefault("partition", "debug")
    kw.setdefault("submit_time", NOW - 100)
    return Job(job_id=job_id, name=str(kw.pop("name", "j")), user="u", uid=1000, gid=1000,
               **kw)  # type: ignore[arg-type]


def _cluster(pending: list[Job], others: list[Job] | None = None, *, n: int = 2,
             part_state: str = "UP", now: float = NOW, **params: object) -> ClusterSnapshot:
    views = nodes(n, gpus=0, cpus=4, mem=8000)
    return ClusterSnapshot(
        now=now, nodes={v.name: v for v in views},
        partitions={"debug": Partition(name="debug", nodes=[v.name for v in views],
                                       state=part_state)},
        running=[], pending=pending, jobs=[*pending, *(others or [])],
        params=SchedParams(**params))  # type: ignore[arg-type]


def test_pipeline_eligibility_reasons_in_slurms_order() -> None:
    jobs = [
        _pending_job(1, held="admin", begin_time=NOW + 60),
        _pending_job(2, begin_time=NOW + 60, dependency="afterok:99"),
        _pending_job(3, dependency="afterok:10"),
        _pending_job(4, dependency="afternotok:11"),
        _pending_job(5, time_limit=-1),
    ]
    ran = Job(job_id=10, name="x", user="u", uid=1, gid=1, state=JobState.RUNNING)
    ok = Job(job_id=11, name="x", user="u", uid=1, gid=1, state=JobState.COMPLETED)
    dec = run_pass(_cluster(jobs, [ran, ok]))
    assert dec.reason_texts == {1: "JobHeldAdmin", 2: "BeginTime", 3: "Dependency",
                                4: "DependencyNeverSatisfied"}
    assert [s.job_id for s in dec.starts] == [5]
    assert dec.priorities[1] == 0 and dec.became_eligible == [5]


def test_pipeline_partition_states() -> None:
    for st, want in (("DOWN", "PartitionDown"), ("INACTIVE", "PartitionInactive")):
        dec = run_pass(_cluster([_pending_job(1)], part_state=st))
        assert dec.starts == [] and dec.reason_texts == {1: want}
    dec = run_pass(_cluster([_pending_job(1)], part_state="DRAIN"))
    assert [s.job_id for s in dec.starts] == [1]  # queued jobs of a DRAIN partition run


def test_pipeline_priority_ages_every_pass() -> None:
    from corral.sched.priority import PriorityParams, PriorityWeights

    prio = PriorityParams(PriorityWeights(age=1000, partition=1000), max_age_s=86400)
    job = _pending_job(1, eligible_time=NOW, cpus_per_task=64, nice=10)  # never fits
    ages = [run_pass(_cluster([job], now=NOW + h * 3600, priority=prio)).priorities[1]
            for h in (0, 6, 12, 24, 48)]
    assert ages == [990, 1240, 1490, 1990, 1990]


def test_pipeline_arrays_expand_and_throttle() -> None:
    meta = _pending_job(7, array_job_id=7, array_tasks=[0, 1, 2, 3, 4], array_max_running=3)
    dec = run_pass(_cluster([meta]))
    assert [(s.job_id, s.array_task_id) for s in dec.starts] == [(7, 0), (7, 1), (7, 2)]
    assert dec.reason_texts == {7: "JobArrayTaskLimit"}
    free = _pending_job(8, array_job_id=8, array_tasks=list(range(20)), cpus_per_task=1)
    dec = run_pass(_cluster([free]))
    assert len(dec.starts) == 8 and dec.reason_texts == {8: "Resources"}


def test_reason_rendering_is_byte_exact() -> None:
    from corral.model.reasons import PendingReason, ReasonCode, from_text

    r = PendingReason(ReasonCode.REQ_NODE_NOT_AVAIL, nodes=("node-2", "node-3"))
    assert r.text() == "ReqNodeNotAvail, UnavailableNodes:node-[2-3]"
    assert from_text(r.text()) == r
    assert PendingReason(ReasonCode.NODES_DOWN).text() == Reason.NODES_DOWN
    assert all(getattr(Reason, c.name) == c.value for c in ReasonCode)
    gpu = PendingReason(ReasonCode.RESOURCES, requested=(("cpus", 8), ("gpus", 8)),
                        available=(("cpus", 64), ("gpus", 6)))
    assert gpu.text() == "Resources"
    assert gpu.explain() == "needs 8 GPUs on one node; the most free on any node is 6"
