"""Preemption through the controller in process (controller/harness.py): a job that may
preempt is placed as if its victims were gone, the victims are signalled, then requeued
or ended PREEMPTED after their grace time, and the preemptor starts on what they freed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from corral.controller.harness import Harness
from corral.model.assoc import Qos
from corral.model.config import ConfigError, parse_config
from corral.model.job import JobState

CONF = """\
ClusterName=t
MinJobAge=600
PreemptType=preempt/qos
PreemptMode=REQUEUE
NodeName=n1 CPUs=4 RealMemory=4000 Gres=gpu:4
PartitionName=gpu Nodes=n1 Default=YES
"""


def with_qos(h: Harness, grace: int = 0, mode: str = "cluster") -> None:
    db = h.ctl.accounts.db
    db.qos["normal"] = Qos("normal", 1, grace_time=grace, preempt_mode=mode)
    db.qos["high"] = Qos("high", 2, preempt=("normal",))


@pytest.fixture
def h() -> Iterator[Harness]:
    with Harness(CONF) as harness:
        yield harness


def victim_and_preemptor(h: Harness, **victim: object) -> tuple[int, int]:
    low = h.submit(num_tasks=4, gpus=4, qos="normal", **victim)
    h.tick()
    assert h.job(low).state == JobState.RUNNING
    h.clock.advance(60)
    high = h.submit(num_tasks=1, gpus=2, qos="high")
    h.tick()
    return low, high


def test_requeue_with_grace_time(h: Harness) -> None:
    with_qos(h, grace=30)
    low, high = victim_and_preemptor(h, signal="USR1@60")
    assert h.job(high).state == JobState.PENDING
    assert h.job(high).reason == "Resources"
    # SIGUSR1 (its --signal), then SIGTERM; still running during the grace time
    sigs = [m["control"]["signal"] for m in h.sent
            if m.get("type") == "control" and m.get("job_id") == low
            and m["control"]["op"] == "signal"]
    assert sigs == [10, 15]
    assert h.job(low).state == JobState.RUNNING
    eligible = h.job(low).eligible_time
    h.advance(10)
    assert h.job(low).state == JobState.RUNNING and "requeue" not in h.controls(low)
    h.advance(25)  # the grace time is over
    assert h.controls(low)[-1] == "requeue"
    assert h.job(low).state == JobState.COMPLETING
    h.end(low, "CANCELLED", signal=9)
    h.tick()  # the pass the release asks for
    assert h.job(high).state == JobState.RUNNING
    victim = h.job(low)
    assert victim.state == JobState.PENDING and victim.restart_count == 1
    assert victim.eligible_time == eligible  # it keeps its age


def test_victim_that_exits_on_sigterm_is_requeued(h: Harness) -> None:
    with_qos(h, grace=60)
    low, high = victim_and_preemptor(h)
    h.end(low, "COMPLETED")  # it checkpointed and exited on SIGTERM
    h.tick()
    assert h.job(low).state == JobState.PENDING and h.job(low).restart_count == 1
    assert h.job(high).state == JobState.RUNNING


def test_cancel_mode_ends_preempted(h: Harness) -> None:
    with_qos(h, mode="cancel")
    low, high = victim_and_preemptor(h)
    assert h.controls(low) == ["cancel"]
    h.end(low, "CANCELLED", signal=15)
    h.tick()
    assert h.job(low).state == JobState.PREEMPTED
    assert h.job(high).state == JobState.RUNNING


def test_no_requeue_victim_is_cancelled(h: Harness) -> None:
    with_qos(h)
    low, high = victim_and_preemptor(h, requeue=False)
    assert h.controls(low) == ["cancel"]
    h.end(low, "CANCELLED", signal=15)
    h.tick()
    assert h.job(low).state == JobState.PREEMPTED
    assert h.job(high).state == JobState.RUNNING


def test_no_preemption_without_rights(h: Harness) -> None:
    with_qos(h)
    low = h.submit(num_tasks=4, gpus=4, qos="normal")
    h.tick()
    other = h.submit(num_tasks=1, gpus=1, qos="normal")
    h.tick()
    assert h.controls(low) == [] and h.job(other).state == JobState.PENDING


def test_preempt_exempt_time(h: Harness) -> None:
    with_qos(h)
    h.ctl.accounts.db.qos["normal"].preempt_exempt_time = 300
    low, high = victim_and_preemptor(h)  # ran 60 s
    assert h.controls(low) == []
    h.advance(241)
    assert h.controls(low) == ["requeue"]


def test_partition_priority_preemption() -> None:
    conf = """\
ClusterName=t
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
NodeName=n1 CPUs=4 RealMemory=4000 Gres=gpu:4
PartitionName=low Nodes=n1 Default=YES PriorityTier=1
PartitionName=high Nodes=n1 PriorityTier=2
"""
    with Harness(conf) as h:
        low = h.submit(num_tasks=4, gpus=4, partition="low")
        h.tick()
        h.clock.advance(5)
        same = h.submit(num_tasks=1, partition="low")
        h.tick()
        assert h.controls(low) == []
        high = h.submit(num_tasks=1, gpus=1, partition="high")
        h.tick()
        assert h.controls(low) == ["cancel"]
        h.end(low, "CANCELLED", signal=15)
        h.tick()
        assert h.job(low).state == JobState.PREEMPTED
        assert h.job(high).state == JobState.RUNNING
        assert h.job(same).state == JobState.RUNNING


def test_preempt_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="invalid PreemptMode"):
        parse_config(CONF.replace("PreemptMode=REQUEUE", "PreemptMode=SUSPEND,CANCEL"))
    with pytest.raises(ConfigError, match="invalid PreemptType"):
        parse_config(CONF.replace("preempt/qos", "preempt/bogus"))
    p = parse_config(CONF + "PartitionName=x Nodes=n1 PreemptMode=cancel\n")
    assert p.partitions[-1].preempt_mode == "cancel"


def test_a_grace_time_lost_with_a_restart_ends_at_once(h: Harness) -> None:
    with_qos(h, grace=300)
    low, high = victim_and_preemptor(h)
    assert h.job(low).state == JobState.RUNNING and h.controls(low) == ["signal"]
    h.ctl.preempt_deadlines.clear()  # what a controller restart forgets
    h.advance(1)
    assert h.controls(low)[-1] == "requeue" and h.job(low).state == JobState.COMPLETING


def test_slurm_conf_preempt_exempt_time_is_the_default() -> None:
    with Harness(CONF + "PreemptExemptTime=00:05:00\n") as h:
        with_qos(h)
        low, high = victim_and_preemptor(h)  # ran 60 s
        assert h.controls(low) == []
        h.advance(241)
        assert h.controls(low) == ["requeue"]


def test_gang_alone_is_named_as_not_acted_on() -> None:
    cfg = parse_config(CONF.replace("PreemptMode=REQUEUE", "PreemptMode=GANG"))
    assert "PreemptMode=GANG" in cfg.inert_settings()
    assert "PreemptMode=GANG" not in parse_config(CONF).inert_settings()
