"""Preemption by suspension (PreemptMode=SUSPEND,GANG) through the controller in process
(controller/harness.py): the victim is suspended at once, its GPUs are lent to its
preemptor, which starts on them in the same pass, no other job gets them, and the victim
resumes on them when the preemptor ends, its time limit extended by the time it waited."""

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
PreemptMode=SUSPEND,GANG
NodeName=n1 CPUs=4 RealMemory=4000 Gres=gpu:4
PartitionName=gpu Nodes=n1 Default=YES
"""


def with_qos(h: Harness, mode: str = "cluster", grace: int = 0) -> None:
    db = h.ctl.accounts.db
    db.qos["normal"] = Qos("normal", 1, preempt_mode=mode, grace_time=grace)
    db.qos["high"] = Qos("high", 2, preempt=("normal",))


@pytest.fixture
def h() -> Iterator[Harness]:
    with Harness(CONF) as harness:
        with_qos(harness)
        yield harness


def node_free(h: Harness) -> tuple[int, int, list[int]]:
    n = h.ctl.nodes["n1"]
    return n.free_cpus, n.free_mem_mb, n.free_gpu_ids


def suspended_by(h: Harness, gpus: int = 2, victim_gpus: int = 4,
                 **victim: object) -> tuple[int, int]:
    low = h.submit(num_tasks=victim_gpus, gpus=victim_gpus, qos="normal", mem_per_node=2000,
                   time_limit=600, **victim)
    h.tick()
    assert h.job(low).state == JobState.RUNNING
    h.clock.advance(60)
    high = h.submit(num_tasks=1, gpus=gpus, qos="high", mem_per_node=1000)
    h.tick()
    return low, high


def test_victim_suspended_and_preemptor_started_at_once_on_its_gpus(h: Harness) -> None:
    with_qos(h, grace=120)  # GraceTime does not apply to a suspension
    low, high = suspended_by(h)
    victim, preemptor = h.job(low), h.job(high)
    assert victim.state == JobState.SUSPENDED and victim.suspended_for == high
    assert h.controls(low) == ["suspend"]
    assert preemptor.state == JobState.RUNNING and high in h.launched()
    lent = set(victim.alloc[0].gpus)
    assert set(preemptor.alloc[0].gpus) <= lent
    # the ledger: the victim keeps its 4 GPUs, 4 CPUs and 2000 MB charged; the
    # preemptor borrows its GPUs and CPUs (nothing is charged twice, nothing of them is
    # free) and has its own 1000 MB: the frozen processes keep their memory
    assert node_free(h) == (0, 1000, [])


def test_no_other_job_takes_the_lent_resources(h: Harness) -> None:
    low, high = suspended_by(h)  # the preemptor uses 2 of the victim's 4 GPUs
    third = h.submit(num_tasks=1, gpus=1, qos="normal", mem_per_node=100)
    other_high = h.submit(num_tasks=1, gpus=1, qos="high", mem_per_node=100)
    h.advance(30)
    assert h.job(third).state == JobState.PENDING
    # a suspended victim is not preempted again: its resources are in use
    assert h.job(other_high).state == JobState.PENDING
    assert h.controls(low) == ["suspend"]
    h.end(high)  # the preemptor ends: the victim resumes on its resources
    assert h.job(low).state == JobState.RUNNING and h.controls(low) == ["suspend", "resume"]
    h.tick()
    assert h.job(third).state == JobState.PENDING
    assert h.job(other_high).state == JobState.RUNNING  # by preempting it again
    assert h.job(low).state == JobState.SUSPENDED
    assert h.job(low).suspended_for == other_high


def test_victim_resumes_with_its_time_limit_extended(h: Harness) -> None:
    low, high = suspended_by(h)
    suspended_at = h.clock()
    h.advance(300)
    assert h.job(low).state == JobState.SUSPENDED
    h.end(high)
    victim = h.job(low)
    assert victim.state == JobState.RUNNING and victim.suspended_for is None
    assert victim.suspended_secs == pytest.approx(h.clock() - suspended_at)
    assert node_free(h) == (0, 2000, [])  # all of it the victim's again
    # 10 minutes of limit, 60 s run before: it times out 540 s after resuming, not before
    h.advance(530)
    assert h.job(low).state == JobState.RUNNING
    h.advance(20)
    assert h.job(low).state == JobState.COMPLETING and h.job(low).kill_reason == "TIMEOUT"


def test_preemptor_on_free_and_lent_gpus_returns_only_what_it_borrowed() -> None:
    with Harness(CONF) as h:
        with_qos(h)
        low, high = suspended_by(h, gpus=3, victim_gpus=2)  # 2 GPUs free, 2 lent
        victim, preemptor = h.job(low), h.job(high)
        assert victim.state == JobState.SUSPENDED
        assert set(victim.alloc[0].gpus) & set(preemptor.alloc[0].gpus)
        assert node_free(h)[2] == [3]  # the one GPU neither uses
        h.end(high)
        assert h.job(low).state == JobState.RUNNING
        assert node_free(h)[2] == [g for g in range(4) if g not in victim.alloc[0].gpus]
        h.end(low)
        assert node_free(h) == (4, 4000, [0, 1, 2, 3])


def test_victim_cancelled_while_suspended_leaves_its_preemptor_its_resources(
        h: Harness) -> None:
    low, high = suspended_by(h)
    h.call(h.ctl.signal_jobs, h.who(0), [h.job(low)], 15, batch_only=False, cancel=True)
    h.end(low, "CANCELLED", signal=15)
    assert h.job(low).state == JobState.CANCELLED
    preemptor = h.job(high)
    free = node_free(h)
    assert not set(preemptor.alloc[0].gpus) & set(free[2])  # still the preemptor's
    assert free == (3, 3000, [g for g in range(4) if g not in preemptor.alloc[0].gpus])
    h.end(high)
    assert node_free(h) == (4, 4000, [0, 1, 2, 3])


def test_restart_keeps_the_loan_and_resumes_the_victim() -> None:
    with Harness(CONF) as h:
        with_qos(h)
        low, high = suspended_by(h)
        before = node_free(h)
        store, now = h.store, h.clock()
    with Harness(CONF, store=store, now=now + 5, register=False) as h2:
        with_qos(h2)
        h2.register(["n1"], running=[low, high])
        assert h2.job(low).state == JobState.SUSPENDED and h2.job(low).suspended_for == high
        assert node_free(h2) == before
        other = h2.submit(num_tasks=1, gpus=1, qos="normal", mem_per_node=100)
        h2.advance(5)
        assert h2.job(other).state == JobState.PENDING
        h2.end(high)
        assert h2.job(low).state == JobState.RUNNING and h2.controls(low) == ["resume"]


def test_victim_of_a_preemptor_gone_during_a_restart_resumes_at_the_next_tick() -> None:
    with Harness(CONF) as h:
        with_qos(h)
        low, high = suspended_by(h)
        h.store.jobs[high]["state"] = "COMPLETED"  # ended while the controller was down
        store, now = h.store, h.clock()
    with Harness(CONF, store=store, now=now + 5, register=False) as h2:
        with_qos(h2)
        h2.register(["n1"], running=[low])
        h2.advance(1)
        assert h2.job(low).state == JobState.RUNNING and h2.controls(low) == ["resume"]


def test_victims_of_mixed_modes_wait_for_the_killed_ones() -> None:
    with Harness(CONF) as h:
        db = h.ctl.accounts.db
        db.qos["normal"] = Qos("normal", 1)  # suspended (the cluster's mode)
        db.qos["scav"] = Qos("scav", 1, preempt_mode="requeue")
        db.qos["high"] = Qos("high", 2, preempt=("normal", "scav"))
        a = h.submit(num_tasks=2, gpus=2, qos="normal", mem_per_node=100)
        b = h.submit(num_tasks=2, gpus=2, qos="scav", mem_per_node=100)
        h.tick()
        h.clock.advance(60)
        high = h.submit(num_tasks=4, gpus=4, qos="high", mem_per_node=100)
        h.tick()
        assert h.controls(b) == ["requeue"] and h.controls(a) == []
        assert h.job(high).state == JobState.PENDING
        h.end(b, "CANCELLED", signal=15)
        h.tick()
        assert h.job(a).state == JobState.SUSPENDED and h.job(high).state == JobState.RUNNING


def test_suspend_needs_gang_in_slurm_conf() -> None:
    with pytest.raises(ConfigError, match="PreemptMode=SUSPEND requires GANG too"):
        parse_config(CONF.replace("SUSPEND,GANG", "SUSPEND"))
    cfg = parse_config(CONF)
    assert "PreemptMode=GANG" not in cfg.inert_settings()
    part = parse_config(CONF + "PartitionName=x Nodes=n1 PreemptMode=SUSPEND\n")
    assert part.partitions[-1].preempt_mode == "suspend"


def test_the_pass_sees_the_victim_busy_until_the_preemptor_ends_plus_its_time_left() -> None:
    with Harness(CONF) as h:
        with_qos(h)
        low = h.submit(num_tasks=2, gpus=2, qos="normal", mem_per_node=1000, time_limit=600)
        h.tick()
        h.clock.advance(60)
        high = h.submit(num_tasks=4, gpus=4, qos="high", mem_per_node=1000, time_limit=300)
        h.tick()
        assert h.job(low).state == JobState.SUSPENDED
        now = h.clock()
        views = {r.job_id: r for r in h.ctl.core.passes.snapshot(now).running}
        victim, preemptor = views[low], views[high]
        assert victim.lent and not preemptor.lent
        assert victim.end_time == pytest.approx(now + 300 + 540)
        # the preemptor frees at its end only what it does not borrow (2 of its 4 GPUs)
        assert [len(a.gpus) for a in preemptor.alloc] == [2]
        assert [(a.cpus, a.mem_mb) for a in preemptor.alloc] == [(2, 1000)]


def test_no_suspension_when_the_preemptor_memory_does_not_fit_beside_the_victim(
        h: Harness) -> None:
    low = h.submit(num_tasks=4, gpus=4, qos="normal", mem_per_node=3500)
    h.tick()
    h.clock.advance(60)
    high = h.submit(num_tasks=1, gpus=1, qos="high", mem_per_node=1000)
    h.tick()
    assert h.job(low).state == JobState.RUNNING and h.controls(low) == []
    assert h.job(high).state == JobState.PENDING


def test_a_chain_of_preemptors_leaves_the_ledger_whole(h: Harness) -> None:
    db = h.ctl.accounts.db
    db.qos["high"] = Qos("high", 2, preempt=("normal",))
    db.qos["top"] = Qos("top", 3, preempt=("normal", "high"))
    low, mid = suspended_by(h)  # mid borrows 2 of low's 4 GPUs
    top = h.submit(num_tasks=1, gpus=1, qos="top", mem_per_node=100)
    h.advance(1)
    # low is lent (never a victim again), mid runs on borrowed GPUs only: top waits
    assert h.job(top).state == JobState.PENDING and h.job(mid).state == JobState.RUNNING
    h.end(mid)  # low resumes, then top suspends it in the next pass
    h.tick()
    assert h.job(top).state == JobState.RUNNING
    assert h.job(low).state == JobState.SUSPENDED and h.job(low).suspended_for == top
    h.end(top)
    assert h.job(low).state == JobState.RUNNING
    h.end(low)
    assert node_free(h) == (4, 4000, [0, 1, 2, 3])
    assert h.ctl.core.cluster.loans == {}


def test_no_job_of_the_same_pass_takes_what_the_preemptor_leaves_of_the_victim(
        h: Harness) -> None:
    low = h.submit(num_tasks=4, gpus=4, qos="normal")
    h.tick()
    h.clock.advance(60)
    high = h.submit(num_tasks=1, gpus=2, qos="high")
    third = h.submit(num_tasks=1, gpus=1, qos="normal")  # placed after it, in one pass
    h.tick()
    assert h.job(low).state == JobState.SUSPENDED and h.job(high).state == JobState.RUNNING
    assert h.job(third).state == JobState.PENDING
    assert node_free(h) == (0, 4000, [])
