"""Preemption inside an advanced reservation (sched/reserved.py): the pass over the
reservation's nodes decides preemptions, and they reach the pass's placement."""

from __future__ import annotations

from corral.model.job import NodeAlloc
from corral.model.node import Partition
from corral.model.reservation import Reservation
from corral.sched.preempt import PreemptPolicy, QosPreempt
from corral.sched.reserved import schedule_reserved
from corral.sched.snapshot import INFINITE_TIME, NodeView, PendingView, RunningView, Snapshot

NOW = 100_000.0
POLICY = PreemptPolicy("preempt/qos", "requeue", 0,
                       {"high": QosPreempt(frozenset({"normal"})), "normal": QosPreempt()})


def busy_node(name: str) -> NodeView:
    """A 4-GPU node whose GPUs a running job holds."""
    return NodeView(name, 16, 64_000, 4, 14, 63_000, [], True, partitions=("gpu",),
                    job_count=1)


def low(job_id: int, node: str) -> RunningView:
    return RunningView(job_id, INFINITE_TIME, [NodeAlloc(node, 2, 1000, [0, 1, 2, 3])],
                       qos="normal", partition="gpu", start_time=NOW - 60)


def high(job_id: int, reservation: str | None = None) -> PendingView:
    return PendingView(job_id, 100, NOW - 10, "gpu", num_tasks=1, gpus_per_node=4,
                       mem_per_node=1000, qos="high", reservation=reservation)


def test_a_preemption_decided_inside_a_reservation_is_kept() -> None:
    nodes = {"a": busy_node("a")}
    resv = Reservation("course", NOW - 600, NOW + 3600, ["a"], users=["alice"])
    snap = Snapshot(NOW, nodes, {"gpu": Partition("gpu", ["a"])}, [low(1, "a")],
                    [high(10, "course")], preempt=POLICY)
    placed = schedule_reserved(snap, [resv])
    assert [(j, v, [a.node for a in alloc]) for j, alloc, v in placed.preemptions] \
        == [(10, [1], ["a"])]
    assert placed.starts == []


def test_preemptions_inside_and_outside_a_reservation_are_both_kept() -> None:
    # job 1 runs on the reservation's node a, job 2 on node b outside it; job 10 (in the
    # reservation) takes job 1's place, job 11 (outside it: node a is held whole for the
    # reservation's window, so it can never be job 11's) takes job 2's
    nodes = {"a": busy_node("a"), "b": busy_node("b")}
    resv = Reservation("course", NOW - 600, NOW + 3600, ["a"], users=["alice"])
    snap = Snapshot(NOW, nodes, {"gpu": Partition("gpu", ["a", "b"])},
                    [low(1, "a"), low(2, "b")], [high(10, "course"), high(11)],
                    preempt=POLICY)
    placed = schedule_reserved(snap, [resv])
    got = {j: (v, [a.node for a in alloc]) for j, alloc, v in placed.preemptions}
    assert got == {10: ([1], ["a"]), 11: ([2], ["b"])}


def test_a_job_outside_a_reservation_preempts_nothing_on_its_nodes() -> None:
    nodes = {"a": busy_node("a")}
    resv = Reservation("course", NOW + 600, NOW + 3600, ["a"], users=["alice"])
    part = {"gpu": Partition("gpu", ["a"])}
    # the reservation starts in 10 minutes: a job that would run into it may not take node
    # a by preemption either, a job ending before it may
    longer = PendingView(11, 100, NOW - 10, "gpu", num_tasks=1, gpus_per_node=4,
                         mem_per_node=1000, qos="high", time_limit=3600)
    placed = schedule_reserved(Snapshot(NOW, nodes, part, [low(1, "a")], [longer],
                                        preempt=POLICY), [resv])
    assert placed.preemptions == []
    shorter = PendingView(12, 100, NOW - 10, "gpu", num_tasks=1, gpus_per_node=4,
                          mem_per_node=1000, qos="high", time_limit=300)
    placed = schedule_reserved(Snapshot(NOW, nodes, part, [low(1, "a")], [shorter],
                                        preempt=POLICY), [resv])
    assert [(j, v) for j, _, v in placed.preemptions] == [(12, [1])]


def test_a_victim_off_the_reservations_nodes_is_never_chosen() -> None:
    # job 2 on node b (outside the reservation) started last, so it costs least; the
    # reservation's job may still only take node a, whose job 1 costs more
    nodes = {"a": busy_node("a"), "b": busy_node("b")}
    resv = Reservation("course", NOW - 600, NOW + 3600, ["a"], users=["alice"])
    cheap = RunningView(2, INFINITE_TIME, [NodeAlloc("b", 2, 1000, [0, 1, 2, 3])],
                        qos="normal", partition="gpu", start_time=NOW - 5)
    snap = Snapshot(NOW, nodes, {"gpu": Partition("gpu", ["a", "b"])},
                    [low(1, "a"), cheap], [high(10, "course")], preempt=POLICY)
    placed = schedule_reserved(snap, [resv])
    assert [(j, v, [a.node for a in alloc]) for j, alloc, v in placed.preemptions] \
        == [(10, [1], ["a"])]
    # with no victim on its nodes, it preempts nothing (and does not start)
    snap = Snapshot(NOW, nodes, {"gpu": Partition("gpu", ["a", "b"])},
                    [RunningView(3, INFINITE_TIME, [NodeAlloc("a", 2, 1000, [0, 1, 2, 3])],
                                 qos="high", partition="gpu", start_time=NOW - 60), cheap],
                    [high(10, "course")], preempt=POLICY)
    placed = schedule_reserved(snap, [resv])
    assert placed.preemptions == [] and placed.starts == []


def idle_node(name: str) -> NodeView:
    return NodeView(name, 16, 64_000, 4, 16, 64_000, [0, 1, 2, 3], True, partitions=("gpu",))


def in_resv(job_id: int, reservation: str, time_limit: int = -1, gpus: int = 1) -> PendingView:
    return PendingView(job_id, 100, NOW - 10, "gpu", num_tasks=1, gpus_per_node=gpus,
                       mem_per_node=1000, reservation=reservation, time_limit=time_limit)


def test_overlapping_reservations_share_their_nodes() -> None:
    # "two" was made with OVERLAP on "one"'s node, for the same time: the jobs of both run
    # there (they waited with Resources for ever); a job of "one" still may not run into a
    # later reservation on its node, nor into a maintenance window
    part = {"gpu": Partition("gpu", ["a"])}
    one = Reservation("one", NOW - 600, NOW + 3600, ["a"], users=["alice"])
    two = Reservation("two", NOW - 600, NOW + 3600, ["a"], users=["alice"], flags=["OVERLAP"])
    placed = schedule_reserved(Snapshot(NOW, {"a": idle_node("a")}, part, [],
                                        [in_resv(10, "one"), in_resv(11, "two")]), [one, two])
    assert sorted(j for j, _ in placed.starts) == [10, 11]
    later = Reservation("later", NOW + 3600, NOW + 7200, ["a"], users=["bob"])
    maint = Reservation("maint", NOW - 60, NOW + 600, ["a"], flags=["MAINT", "OVERLAP"])
    for other in (later, maint):
        snap = Snapshot(NOW, {"a": idle_node("a")}, part, [], [in_resv(10, "one")])
        placed = schedule_reserved(snap, [one, other])
        assert placed.starts == [], other.name
    placed = schedule_reserved(Snapshot(NOW, {"a": idle_node("a")}, part, [],
                                        [in_resv(10, "one", time_limit=1800)]), [one, later])
    assert [j for j, _ in placed.starts] == [10]


def test_a_preemptors_claim_holds_for_an_overlapping_reservation() -> None:
    # job 10 (reservation "one") needs all 4 GPUs: it preempts job 1 (GPUs 0-1) and takes
    # the free GPUs 2-3 too; job 11 of the overlapping "two" may not start on those
    node = NodeView("a", 16, 64_000, 4, 14, 63_000, [2, 3], True, partitions=("gpu",),
                    job_count=1)
    victim = RunningView(1, INFINITE_TIME, [NodeAlloc("a", 2, 1000, [0, 1])], qos="normal",
                         partition="gpu", start_time=NOW - 60)
    one = Reservation("one", NOW - 600, NOW + 3600, ["a"], users=["alice"])
    two = Reservation("two", NOW - 600, NOW + 3600, ["a"], users=["alice"], flags=["OVERLAP"])
    snap = Snapshot(NOW, {"a": node}, {"gpu": Partition("gpu", ["a"])}, [victim],
                    [high(10, "one"), in_resv(11, "two", gpus=2)], preempt=POLICY)
    placed = schedule_reserved(snap, [one, two])
    assert [(j, v) for j, _, v in placed.preemptions] == [(10, [1])]
    assert placed.starts == [] and placed.reason_texts[11] == "Resources"
