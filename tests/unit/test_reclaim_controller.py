"""Idle-GPU reclaim on the in-process harness: samples feed the tracker, the periodic duties
notice and then act through the controller's own transitions."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from corral.controller.harness import Harness
from corral.controller.metrics import Metrics
from corral.controller.reclaim import reclaimer
from corral.controller.usage import UsageBook
from corral.model.job import JobState

CONF = """\
ClusterName=t
MinJobAge=600
CorralIdleGpuReclaim=notice=1min,after=1min,batch_after=2min,action=requeue
CorralIdleGpuReclaimPartitions=cut:cancel
CorralIdleGpuReclaimQOS=high:none
NodeName=n[1-4] CPUs=4 RealMemory=4000 Gres=gpu:1
PartitionName=debug Nodes=n[1-3] Default=YES
PartitionName=cut Nodes=n4
"""


@pytest.fixture
def h() -> Iterator[Harness]:
    with Harness(CONF) as harness:
        yield harness


def _sample(h: Harness, book: UsageBook, node: str, util: float) -> None:
    gpu = {"index": 0, "util": util, "memory_used": 0, "memory_total": 1 << 30,
           "processes": [{"pid": 1}] if util else []}
    h.call(book.agent_usage, h.clock(), [gpu], [], [node])


def test_notice_then_requeue_cancel_or_nothing_per_policy(h: Harness) -> None:
    book = UsageBook(h.ctl)
    requeued = h.submit(gpus_per_node=1, partition="debug")
    no_requeue = h.submit(gpus_per_node=1, partition="debug", requeue=False)
    cut = h.submit(gpus_per_node=1, partition="cut")
    busy = h.submit(gpus_per_node=1, partition="debug")
    h.tick()
    jobs = [h.job(j) for j in (requeued, no_requeue, cut, busy)]
    assert all(j.state is JobState.RUNNING for j in jobs)
    nodes = {j.job_id: j.batch_host or "" for j in jobs}
    for _ in range(3):  # 90 s: idle past `notice`, not yet past the grace
        for jid, node in nodes.items():
            _sample(h, book, node, 90.0 if jid == busy else 0.0)
        h.advance(30)
    for jid in (requeued, no_requeue, cut):
        assert "notify" in h.controls(jid)
        assert (h.job(jid).comment or "").startswith("idle-gpu: GPUs idle since")
        assert h.job(jid).state is JobState.RUNNING
    assert "due" in (h.job(cut).comment or "")
    assert h.controls(busy) == [] and h.job(busy).comment is None
    for _ in range(5):  # past batch_after
        for jid, node in nodes.items():
            _sample(h, book, node, 90.0 if jid == busy else 0.0)
        h.advance(30)
    assert "requeue" in h.controls(requeued) and h.job(requeued).kill_reason == "REQUEUE"
    assert "cancel" in h.controls(no_requeue)  # --no-requeue: cancelled instead
    assert "cancel" in h.controls(cut)  # the partition says cancel
    assert h.job(busy).state is JobState.RUNNING and h.controls(busy) == []
    rec = reclaimer(h.ctl)
    assert sorted(a for (_u, _a, a) in rec.reclaims.elements()) == ["cancel", "cancel", "requeue"]
    text = Metrics(h.ctl, book).render("jobs-users-accts").decode()
    assert 'corral_gpu_reclaims_total{username="user1000",account=' in text


def test_qos_none_only_notices_and_use_withdraws_the_notice(h: Harness) -> None:
    book = UsageBook(h.ctl)
    jid = h.submit(gpus_per_node=1, partition="debug")
    h.tick()
    job = h.job(jid)
    node = job.batch_host or ""
    job.qos = "high"  # the QOS's override: none
    for _ in range(10):
        _sample(h, book, node, 0.0)
        h.advance(30)
    assert h.controls(jid) == ["notify"] and job.state is JobState.RUNNING
    assert "no action will be taken" in job.notices[-1]
    job.qos = "normal"
    _sample(h, book, node, 50.0)  # used again: the spell ends, the next one starts over
    h.advance(30)
    for _ in range(3):
        _sample(h, book, node, 0.0)
        h.advance(30)
    assert h.controls(jid) == ["notify", "notify"]
    assert reclaimer(h.ctl).notices[("user1000", job.account or "")] == 2
