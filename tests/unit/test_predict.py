"""Run-time predictions from users' recent jobs (sched/predict.py, EASY++), how the core
feeds them (controller/core/passes.py) and what the pass does with them."""

from __future__ import annotations

import pytest

from corral.controller import reservations as resv_ctl
from corral.controller.core.settings import sched_params
from corral.controller.harness import Harness
from corral.model.config import parse_config
from corral.model.job import JobState, NodeAlloc
from corral.model.node import Partition
from corral.sched.backfill import schedule
from corral.sched.predict import (
    RuntimeHistory,
    counts,
    expected_end,
    parse_depth,
    predicted_run,
)
from corral.sched.snapshot import INFINITE_TIME, NodeView, PendingView, RunningView, Snapshot
from corral.sim.engine import EPOCH, Simulator
from corral.sim.generate import gpu_cluster_conf
from corral.sim.trace import TraceJob

ONE_NODE = gpu_cluster_conf(1, 8)
NOW = 1_700_000_000.0
PREDICT = "SchedulerParameters=corral_predict_runtime=2\n"


def test_mean_of_the_users_last_jobs() -> None:
    h = RuntimeHistory(2)
    assert h.mean("alice") is None
    h.record("alice", 100)
    assert h.mean("alice") == 100
    h.record("alice", 300)
    h.record("bob", 50)
    assert h.mean("alice") == 200
    h.record("alice", 500)  # only the last two count
    assert h.mean("alice") == 400
    assert h.means(["alice", "bob", "carol", "alice"]) == {"alice": 400, "bob": 50}


def test_depth_zero_keeps_nothing_and_resize_keeps_the_latest() -> None:
    off = RuntimeHistory(0)
    off.record("alice", 100)
    assert off.mean("alice") is None
    h = RuntimeHistory(3)
    for run in (10, 20, 60):
        h.record("alice", run)
    h.resize(1)
    assert h.mean("alice") == 60
    h.resize(0)
    assert h.mean("alice") is None


def test_prediction_never_exceeds_the_limit() -> None:
    assert predicted_run(1000, 200) == 200
    assert predicted_run(100, 200) == 100
    assert predicted_run(1000, None) == 1000  # no history: the limit
    assert predicted_run(-1, 200) == INFINITE_TIME  # no limit: never predicted to end
    assert predicted_run(INFINITE_TIME, 200) == INFINITE_TIME


def test_a_job_that_outlives_its_prediction_is_expected_at_its_limit() -> None:
    assert expected_end(1000, 600, 100, now=1050) == 1100
    assert expected_end(1000, 600, 100, now=1100) == 1600  # prediction passed: the limit
    assert expected_end(1000, 600, 100, now=1200) == 1600
    assert expected_end(1000, 600, None, now=1050) == 1600
    assert expected_end(1000, 0, 100, now=1050) == INFINITE_TIME


def test_only_jobs_that_finished_on_their_own_count() -> None:
    assert counts("COMPLETED") and counts("FAILED") and counts("TIMEOUT")
    assert not counts("CANCELLED") and not counts("PREEMPTED") and not counts("NODE_FAIL")


def test_setting_is_read_from_scheduler_parameters() -> None:
    assert parse_depth("") == 0
    assert parse_depth("bf_interval=30,corral_predict_runtime=3") == 3
    assert parse_depth("corral_predict_runtime=x") == 0
    assert sched_params(parse_config(PREDICT + ONE_NODE)).predict_runtime == 2
    assert sched_params(parse_config(ONE_NODE)).predict_runtime == 0


def _sim(conf: str, jobs: list[TraceJob]) -> Simulator:
    sim = Simulator(parse_config(conf), jobs)
    sim.run()
    return sim


def test_core_learns_run_times_from_ended_jobs() -> None:
    jobs = [TraceJob(0, 100, 1000, 4, 4, user="alice"),
            TraceJob(0, 300, 1000, 4, 4, user="alice"),
            TraceJob(0, 50, 1000, 4, 4, user="bob")]
    on = _sim(PREDICT + ONE_NODE, jobs)
    assert on.ctl.core.passes.history.mean("alice") == pytest.approx(200)
    assert on.ctl.core.passes.history.mean("bob") == pytest.approx(50)
    off = _sim(ONE_NODE, jobs)
    assert off.ctl.core.passes.history.mean("alice") is None


def test_running_jobs_are_expected_at_their_prediction_and_never_killed_early() -> None:
    # alice's first job runs 100 s of a 1000 s limit; her second is predicted to run 100 s
    # too, but runs 500 s: it ends COMPLETED at 500 s, not stopped at its prediction
    jobs = [TraceJob(0, 100, 1000, 8, 8, user="alice"),
            TraceJob(200, 500, 1000, 8, 8, user="alice")]
    sim = Simulator(parse_config(PREDICT + ONE_NODE), jobs, exact=True)  # probes run
    seen: list[float] = []
    passes = sim.ctl.core.passes

    def probe(at: float) -> None:
        snap = passes.snapshot(EPOCH + at)
        seen.extend(r.end_time - EPOCH for r in snap.running)

    sim.push(EPOCH + 250, 2, lambda: probe(250))  # before the prediction's end (300 s)
    sim.push(EPOCH + 400, 2, lambda: probe(400))  # after it: the limit (1200 s)
    result = sim.run()
    assert seen == [pytest.approx(300), pytest.approx(1200)]
    second = result.records[1]
    assert second.state == "COMPLETED"
    assert second.end is not None and second.start is not None
    assert second.end - second.start == pytest.approx(500)


def test_pending_jobs_are_planned_with_their_users_prediction() -> None:
    # one node of 8 GPUs.  alice's 4-GPU job runs from 200 s (limit 1000 s, predicted 100 s
    # from her last job); bob's 8-GPU job waits for it; carol's 4-GPU job (limit 1200 s,
    # her last job ran 50 s) can backfill only if it ends before bob's planned start
    jobs = [TraceJob(0, 100, 1000, 4, 4, user="alice"),
            TraceJob(0, 50, 1200, 4, 4, user="carol"),
            TraceJob(200, 900, 1000, 4, 4, user="alice"),
            TraceJob(210, 100, 1000, 8, 8, user="bob"),
            TraceJob(220, 50, 1200, 4, 4, user="carol")]
    on = _sim(PREDICT + ONE_NODE, jobs).records
    off = _sim(ONE_NODE, jobs).records
    # with time limits: bob is planned at alice's limit (1200 s), carol's 1200 s would
    # delay him, so she waits for him (1100 + 100 s)
    assert off[4].start == pytest.approx(1200)
    # with predictions: bob is planned at 300 s, carol's predicted 50 s fit before
    assert on[4].start == pytest.approx(220)
    # alice runs past her prediction to her own end; bob then starts as before
    assert on[2].state == off[2].state == "COMPLETED"
    assert on[3].start == off[3].start == pytest.approx(1100)


def test_backfill_plans_a_candidate_for_its_users_prediction() -> None:
    nodes = {"n1": NodeView("n1", 8, 8000, 8, 4, 4000, [4, 5, 6, 7], True,
                            partitions=("gpu",), job_count=1)}
    parts = {"gpu": Partition("gpu", nodes=["n1"])}
    running = [RunningView(1, NOW + 300, [NodeAlloc("n1", 4, 4000, [0, 1, 2, 3])])]
    head = PendingView(2, 100, NOW, "gpu", user="bob", gpus_per_node=8, time_limit=1000)
    small = PendingView(3, 90, NOW, "gpu", user="carol", gpus_per_node=4, time_limit=1200)

    def starts(predicted: dict[str, float]) -> list[int]:
        snap = Snapshot(now=NOW, nodes=nodes, partitions=parts, running=running,
                        pending=[head, small], predicted_runtime=predicted)
        return [cid for cid, _ in schedule(snap).starts]

    assert starts({}) == []  # 1200 s would delay bob's start at 300 s
    assert starts({"carol": 100}) == [3]
    assert starts({"carol": 5000}) == []  # a prediction over the limit: the limit
    assert starts({"bob": 10}) == []  # another user's history says nothing of carol


PREDICT_CONF = """\
ClusterName=t
SchedulerParameters=corral_predict_runtime=2
NodeName=n[1-2] CPUs=4 RealMemory=4000 Gres=gpu:2
PartitionName=debug Nodes=n[1-2] Default=YES MaxTime=INFINITE
"""


def test_no_prediction_lets_a_job_run_into_a_reservation_window() -> None:
    with Harness(PREDICT_CONF) as h:
        first = h.submit(time_limit=7200)
        h.tick()
        h.advance(60)
        h.end(first)
        user = h.job(first).user
        assert h.ctl.core.passes.history.mean(user) == pytest.approx(60)
        busy = h.submit(time_limit=100_000, cpus_per_task=4, req_nodes=["n2"])
        h.tick()
        assert h.job(busy).state is JobState.RUNNING
        now = h.clock()
        h.call(resv_ctl.create, h.ctl, h.who(0),
               {"name": "maint", "start": now + 3600, "duration": 7200, "nodes": "n1",
                "users": "root", "flags_add": ["MAINT"]})
        # only n1 is free: predicted 60 s, the job would end long before its window; by
        # its limit it would not, so it waits
        long = h.submit(time_limit=7200)
        short = h.submit(time_limit=1800)
        h.tick()
        assert h.job(long).state is JobState.PENDING
        assert h.job(short).state is JobState.RUNNING and h.job(short).alloc[0].node == "n1"
