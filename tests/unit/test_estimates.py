"""controller.estimates: each job's first estimated start against its actual start, alone and
fed by the scheduling passes of the in-process harness."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from corral.controller.estimates import StartEstimates, quantile
from corral.controller.harness import Harness
from corral.controller.jobs import JobEvent, JobEventKind
from corral.controller.metrics import Metrics
from corral.controller.usage import UsageBook
from corral.model.job import Job, JobState


def _job(job_id: int, start: float | None = None, array: int | None = None) -> Job:
    return Job(job_id=job_id, name="j", user="u", uid=1000, gid=1000, account="a",
               partition="p", state=JobState.RUNNING, submit_time=0.0, start_time=start,
               array_job_id=array)


def _event(kind: JobEventKind, job: Job) -> JobEvent:
    return JobEvent(kind, job, JobState.PENDING, job.state, 0.0)


def test_quantile_interpolates() -> None:
    assert math.isnan(quantile([], 0.5))
    assert quantile([4.0], 0.9) == 4.0
    assert quantile([0.0, 10.0], 0.5) == 5.0
    assert quantile([float(i) for i in range(11)], 0.9) == 9.0


def test_only_the_first_estimate_counts() -> None:
    est = StartEstimates()
    est.planned({1: (100.0, ["n1"]), 2: (200.0, ["n2"])})
    est.planned({1: (150.0, ["n1"]), 2: (180.0, ["n2"]), 3: (300.0, [])})
    assert est.on_job(_event(JobEventKind.STARTED, _job(1, 160.0))) is None
    est.on_job(_event(JobEventKind.STARTED, _job(2, 170.0)))
    assert list(est.errors) == [60.0, -30.0]  # against 100 and 200, not 150 and 180
    assert est.count == 2 and est.abs_sum == 90.0
    assert est.quantiles() == {0.5: 45.0, 0.9: 57.0}
    assert est.bias() == 15.0
    assert est.first == {3: 300.0}


def test_unplanned_ended_and_requeued_jobs() -> None:
    est = StartEstimates()
    est.on_job(_event(JobEventKind.STARTED, _job(5, 10.0)))  # never estimated: not counted
    est.planned({6: (50.0, []), 7: (60.0, []), 8: (float("inf"), [])})
    assert 8 not in est.first  # "never" is no estimate
    est.on_job(_event(JobEventKind.ENDED, _job(6)))  # cancelled while pending
    est.on_job(_event(JobEventKind.REQUEUED, _job(7)))
    assert est.count == 0 and est.first == {}
    est.planned({7: (90.0, [])})  # estimated anew after its requeue
    est.on_job(_event(JobEventKind.STARTED, _job(7, 95.0)))
    assert list(est.errors) == [5.0]
    assert math.isnan(StartEstimates().quantiles()[0.5])


def test_array_tasks_take_the_arrays_estimate_once() -> None:
    est = StartEstimates()
    est.planned({10: (100.0, [])})
    est.on_job(_event(JobEventKind.STARTED, _job(11, 130.0, array=10)))
    est.on_job(_event(JobEventKind.STARTED, _job(12, 130.0, array=10)))
    assert list(est.errors) == [30.0]


def test_window_keeps_the_latest() -> None:
    est = StartEstimates(window=3)
    for i in range(5):
        est.planned({i: (0.0, [])})
        est.started(i, None, float(i))
    assert list(est.errors) == [2.0, 3.0, 4.0] and est.count == 5 and est.abs_sum == 10.0


CONF = """\
ClusterName=t
NodeName=n1 CPUs=2 RealMemory=1000
PartitionName=debug Nodes=n1 Default=YES MaxTime=INFINITE
"""


@pytest.fixture
def h() -> Iterator[Harness]:
    with Harness(CONF) as harness:
        yield harness


def test_passes_feed_the_estimates_and_the_metrics_show_them(h: Harness) -> None:
    m = Metrics(h.ctl, UsageBook(h.ctl))
    first = h.submit(cpus_per_task=2, time_limit=600)  # seconds
    h.tick()
    assert h.job(first).state is JobState.RUNNING
    waiting = h.submit(cpus_per_task=2, time_limit=600)
    h.tick()
    planned = m.estimates.first[waiting]
    assert planned == pytest.approx(h.job(first).start_time + 600, abs=1)  # type: ignore[operator]
    h.advance(120)
    h.end(first)  # it ends 8 minutes before its limit: the estimate was late by that
    h.tick()
    job = h.job(waiting)
    assert job.state is JobState.RUNNING
    err = job.start_time - planned  # type: ignore[operator]
    assert err < -400
    fams = {f.name: f for f in text_string_to_metric_families(m.render("scheduler").decode())}
    summary = fams["corral_start_estimate_error_seconds"]
    got = {(s.name, s.labels.get("quantile")): s.value for s in summary.samples}
    assert got[("corral_start_estimate_error_seconds_count", None)] == 1
    assert got[("corral_start_estimate_error_seconds", "0.5")] == pytest.approx(-err)
    assert got[("corral_start_estimate_error_seconds", "0.9")] == pytest.approx(-err)
    assert fams["corral_start_estimate_bias_seconds"].samples[0].value == pytest.approx(err)
