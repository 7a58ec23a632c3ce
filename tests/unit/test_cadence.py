"""The pass cadence (controller/cadence.py), and the time limits the controller decides
(controller/lifecycle.py check_time_limits): a batch job reaches TIMEOUT in the harness."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from corral.controller.cadence import MAX_GAP, MIN_GAP, Cadence, CadenceParams
from corral.controller.harness import Harness
from corral.model.config import parse_config
from corral.model.job import JobState

CONF = """\
ClusterName=t
SlurmdTimeout=30
KillWait=7
NodeName=n[1-2] CPUs=4 RealMemory=4000 Gres=gpu:2
PartitionName=debug Nodes=n[1-2] Default=YES
"""


@pytest.fixture
def h() -> Iterator[Harness]:
    with Harness(CONF) as harness:
        yield harness


# ---- the policy ---------------------------------------------------------------------------

def test_triggers_coalesce_into_the_armed_pass() -> None:
    c = Cadence()
    assert c.request(100.0) == 100.0
    assert c.request(100.5) is None and c.request(101.0, delay=3) is None
    c.started(0.0)
    assert c.due is None and c.running


def test_a_trigger_during_a_pass_asks_for_one_more_after_twice_its_duration() -> None:
    c = Cadence()
    c.request(10.0)
    c.started(0.0)
    assert c.finished(10.1, 0.1) is None  # nothing came meanwhile: no second pass
    c.request(20.0)
    c.started(0.0)
    assert c.request(20.05) is None and c.request(20.07) is None  # one "again" for both
    assert c.finished(20.1, 0.1) == pytest.approx(20.1 + 0.2)
    assert c.request(20.2) is None  # armed already
    c.started(0.0)
    c.request(21.0)
    assert c.finished(21.0, 0.0) == pytest.approx(21.0 + MIN_GAP)
    c.started(0.0)
    c.request(22.0)
    assert c.finished(30.0, 5.0) == pytest.approx(30.0 + MAX_GAP)
    assert c.passes == 4


def test_tick_interval_from_the_configuration() -> None:
    base = "ClusterName=t\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=n1\n"
    assert CadenceParams.from_config(parse_config(base)).tick_interval == 5.0
    conf = parse_config(base + "SchedulerInterval=12\n")
    assert CadenceParams.from_config(conf).tick_interval == 12.0
    conf = parse_config(base + "SchedulerParameters=bf_interval=30,sched_interval=60\n")
    assert Cadence(CadenceParams.from_config(conf)).next_tick(100.0) == 130.0
    conf = parse_config(base + "SchedulerParameters=max_script_size=10,bf_interval=junk\n")
    assert CadenceParams.from_config(conf).tick_interval == 5.0
    conf = parse_config(base + "SchedulerParameters=sched_min_interval=2000000\n")
    assert CadenceParams.from_config(conf).min_interval == 2.0


def test_passes_start_at_least_sched_min_interval_apart() -> None:
    c = Cadence(CadenceParams(min_interval=2.0))
    assert c.request(10.0) == 10.0
    c.started(10.0)
    c.finished(10.0, 0.0)
    assert c.request(11.0) == 12.0  # inside the window: at its end
    assert c.request(11.5) is None  # coalesced
    c.started(12.0)
    c.finished(12.0, 0.0)
    assert c.request(20.0) == 20.0


# ---- time limits decided by the controller --------------------------------------------------

def test_a_batch_job_reaches_timeout_in_the_harness(h: Harness) -> None:
    a = h.submit(time_limit=60)
    h.tick()
    assert h.job(a).state == JobState.RUNNING
    h.advance(59)
    assert h.job(a).state == JobState.RUNNING and h.controls(a) == []
    h.advance(2)  # past the limit: the controller decides, the node is told
    job = h.job(a)
    assert job.state == JobState.COMPLETING and job.kill_reason == "TIMEOUT"
    assert h.controls(a) == ["time_limit"]
    assert a in h.ctl.cluster.charged  # held until the node says the step is gone
    h.advance(5)
    assert h.controls(a) == ["time_limit"]  # decided once
    # the supervisor's SIGTERM (then SIGKILL after KillWait) ends the step as it may say
    h.end(a, "CANCELLED", signal=15)
    job = h.job(a)
    assert job.state == JobState.TIMEOUT and job.reason == "TimeLimit"
    assert (job.exit_code, job.term_signal) == (0, 0) and job.end_time == h.clock()
    assert a not in h.ctl.cluster.charged and h.ctl.stats["timeout"] == 1


def test_the_node_reporting_timeout_first_ends_it_once(h: Harness) -> None:
    a = h.submit(time_limit=60)
    h.tick()
    h.clock.advance(60)
    h.end(a, "TIMEOUT", signal=15)  # the supervisor got there before the tick
    h.advance(5)
    assert h.job(a).state == JobState.TIMEOUT and h.controls(a) == []
    assert h.ctl.stats["timeout"] == 1


def test_a_cancel_before_the_limit_stays_a_cancel(h: Harness) -> None:
    a = h.submit(time_limit=60)
    h.tick()
    h.call(h.ctl.signal_jobs, h.who(), [h.job(a)], 15, batch_only=False, cancel=True)
    h.advance(120)
    assert h.controls(a) == ["cancel"]
    h.end(a, "CANCELLED", signal=15)
    assert h.job(a).state == JobState.CANCELLED


def test_suspended_time_does_not_count(h: Harness) -> None:
    a = h.submit(time_limit=60)
    h.tick()
    h.job(a).suspended_secs = 100  # as resume adds the time it spent suspended
    h.advance(120)
    assert h.job(a).state == JobState.RUNNING
    h.advance(45)
    assert h.job(a).state == JobState.COMPLETING
