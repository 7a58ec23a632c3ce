"""Backfill's scheduling-quality levers (sched/levers.py): the order in which unprotected
jobs are tried (SJBF by limit or by prediction, largest first), holds for large jobs only,
and that none of them moves a hold."""

from __future__ import annotations

from corral.controller.core.settings import sched_params
from corral.model.config import parse_config
from corral.model.job import NodeAlloc
from corral.model.node import Partition
from corral.sched.backfill import schedule
from corral.sched.levers import Levers, parse_levers
from corral.sched.snapshot import NodeView, PendingView, RunningView, Snapshot
from corral.sim.engine import Simulator
from corral.sim.generate import gpu_cluster_conf
from corral.sim.trace import TraceJob

NOW = 1_700_000_000.0
EASY = 0  # bf_job_part_count_reserve=1: only the first blocked job is planned


def node(name: str, free_gpus: int) -> NodeView:
    return NodeView(name, 64, 512_000, 8, 64 - 4 * (8 - free_gpus), 512_000,
                    list(range(free_gpus)), True, partitions=("gpu",),
                    job_count=0 if free_gpus == 8 else 1)


def job(job_id: int, gpus: int, limit: int, priority: int, user: str = "u") -> PendingView:
    return PendingView(job_id, priority, NOW - 100, "gpu", user=user, num_tasks=1,
                       cpus_per_task=4, gpus_per_node=gpus, mem_per_node=1000,
                       time_limit=limit)


def snap(nodes: dict[str, NodeView], running: list[RunningView], pending: list[PendingView],
         levers: Levers, predicted: dict[str, float] | None = None) -> Snapshot:
    return Snapshot(NOW, nodes, {"gpu": Partition("gpu", list(nodes))}, running, pending,
                    levers=levers, predicted_runtime=predicted or {})


def one_busy_node() -> tuple[dict[str, NodeView], list[RunningView]]:
    """Node a: 6 of 8 GPUs busy until NOW + 1000, so a 2-GPU hole until then."""
    nodes = {"a": node("a", 2)}
    return nodes, [RunningView(1, NOW + 1000, [NodeAlloc("a", 24, 0, [2, 3, 4, 5, 6, 7])])]


def test_settings_parse() -> None:
    assert parse_levers("") == Levers()
    got = parse_levers("bf_interval=30,corral_bf_order=predicted,corral_bf_reserve_min_gpus=8")
    assert (got.order, got.reserve_min_gpus, got.plan_predictions) == ("predicted", 8, False)
    assert got.history_depth(0) == 2 and got.history_depth(5) == 5
    assert parse_levers("corral_predict_runtime=2").plan_predictions
    assert parse_levers("corral_bf_order=sideways").order == "priority"
    conf = "SchedulerParameters=corral_bf_order=limit\n" + gpu_cluster_conf(1, 8)
    assert sched_params(parse_config(conf)).levers.order == "limit"


def test_shortest_limit_first_takes_the_hole_and_keeps_the_hold() -> None:
    # head (8 GPUs) waits for node a at NOW + 1000; two 2-GPU jobs fit the hole before it,
    # the higher-priority one with a longer limit: only one can have the hole
    pending = [job(10, 8, 3600, 300), job(11, 2, 900, 200), job(12, 2, 300, 100)]
    for order, started in (("priority", 11), ("limit", 12)):
        nodes, running = one_busy_node()
        placed = schedule(snap(nodes, running, pending, Levers(order)), max_planned=EASY)
        assert [cid for cid, _ in placed.starts] == [started], order
        assert placed.planned[10] == (NOW + 1000, ["a"]), order


def test_a_prediction_orders_but_never_makes_a_job_fit() -> None:
    # job 11's user runs 30 s jobs, but its limit (1200 s) passes the head's start: it may
    # not backfill on the prediction; then job 12 (its user's jobs run 60 s) is tried
    # before job 13 (limit 300 s, but its user's jobs run 250 s), which priority order
    # and shortest-limit order would start
    pending = [job(10, 8, 3600, 300), job(11, 2, 1200, 250, user="quick"),
               job(13, 2, 300, 200, user="slow"), job(12, 2, 900, 100, user="fast")]
    predicted = {"quick": 30.0, "fast": 60.0, "slow": 250.0}
    for order, started in (("priority", 13), ("limit", 13), ("predicted", 12)):
        nodes, running = one_busy_node()
        placed = schedule(snap(nodes, running, pending,
                               Levers(order, plan_predictions=False), predicted),
                          max_planned=EASY)
        assert [cid for cid, _ in placed.starts] == [started], order
        assert placed.planned[10] == (NOW + 1000, ["a"]), order


def test_largest_first_fills_the_most_gpus() -> None:
    pending = [job(10, 8, 3600, 300), job(11, 1, 300, 200), job(12, 2, 300, 100)]
    nodes, running = one_busy_node()
    placed = schedule(snap(nodes, running, pending, Levers("largest")), max_planned=EASY)
    assert [cid for cid, _ in placed.starts] == [12]


def test_holds_only_for_large_jobs() -> None:
    # both nodes busy; behind the head, a 1-GPU and an 8-GPU job: with a budget of three
    # holds, the 1-GPU job gets none when only jobs of 8 GPUs or more may hold
    def busy(name: str) -> NodeView:
        return node(name, 0)

    def running() -> list[RunningView]:
        return [RunningView(1, NOW + 1000, [NodeAlloc("a", 32, 0, list(range(8)))]),
                RunningView(2, NOW + 2000, [NodeAlloc("b", 32, 0, list(range(8)))])]

    pending = [job(10, 8, 3600, 300), job(11, 1, 3600, 200), job(12, 8, 3600, 100)]
    for levers, planned in ((Levers(), {10, 11, 12}),
                            (Levers(reserve_min_gpus=8), {10, 12}),
                            (Levers("limit", reserve_min_gpus=8), {10, 12})):
        placed = schedule(snap({"a": busy("a"), "b": busy("b")}, running(), pending, levers),
                          max_planned=2)
        assert set(placed.planned) == planned, levers
        assert placed.reasons[11].code.name == "PRIORITY"


def test_the_simulator_runs_every_order() -> None:
    jobs = [TraceJob(i * 10.0, 300 + 50 * (i % 4), 1200, cpus=4 * g, gpus=g, mem_mb=1000,
                     user=f"u{i % 3}") for i, g in enumerate([8, 2, 1, 4, 8, 1, 2, 16] * 3)]
    for order in ("priority", "limit", "predicted", "largest"):
        conf = (f"SchedulerParameters=bf_job_part_count_reserve=1,corral_bf_order={order}\n"
                + gpu_cluster_conf(2, 8))
        result = Simulator(parse_config(conf), jobs).run()
        assert all(r.end is not None and r.state == "COMPLETED" for r in result.records), order


def test_predictions_for_the_order_alone_never_move_the_plan() -> None:
    # one node of 8 GPUs (tests/unit/test_predict.py's case): with EASY++ carol's 4-GPU job
    # backfills at 220 s on her prediction; ordering by predictions keeps the plan made
    # with limits, so she waits for bob as without predictions
    one = gpu_cluster_conf(1, 8)
    jobs = [TraceJob(0, 100, 1000, 4, 4, user="alice"),
            TraceJob(0, 50, 1200, 4, 4, user="carol"),
            TraceJob(200, 900, 1000, 4, 4, user="alice"),
            TraceJob(210, 100, 1000, 8, 8, user="bob"),
            TraceJob(220, 50, 1200, 4, 4, user="carol")]

    def sim(params: str) -> Simulator:
        s = Simulator(parse_config(f"SchedulerParameters={params}\n" + one), jobs)
        s.run()
        return s

    order = sim("bf_job_part_count_reserve=1,corral_bf_order=predicted")
    plain = sim("bf_job_part_count_reserve=1")
    easy_pp = sim("bf_job_part_count_reserve=1,corral_predict_runtime=2")
    assert order.ctl.core.passes.history.mean("carol") == 50  # the order's history is kept
    assert [r.start for r in order.records] == [r.start for r in plain.records]
    assert order.records[4].start == 1200 and easy_pp.records[4].start == 220
