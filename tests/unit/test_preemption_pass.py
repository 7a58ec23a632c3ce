"""The preemption hook inside backfill (sched/backfill.py try_preempt): which running jobs
a pending job is placed over, and what the rest of the pass then sees."""

from __future__ import annotations

from dataclasses import replace

from corral.model.job import NodeAlloc
from corral.model.node import Partition
from corral.sched.backfill import schedule
from corral.sched.preempt import PreemptPolicy, QosPreempt
from corral.sched.snapshot import INFINITE_TIME, NodeView, PendingView, RunningView, Snapshot

NOW = 100_000.0
POLICY = PreemptPolicy("preempt/qos", "requeue", 0,
                       {"high": QosPreempt(frozenset({"normal"})), "normal": QosPreempt()})


def node(name: str, gpus: int = 4) -> NodeView:
    return NodeView(name, 16, 64_000, gpus, 16, 64_000, list(range(gpus)), True,
                    partitions=("gpu",))


def run(views: dict[str, NodeView], job_id: int, name: str, gpus: list[int], started: float,
        qos: str = "normal", cpus: int = 2, exclusive: bool = False) -> RunningView:
    v = views[name]
    v.free_cpus -= cpus
    v.free_mem -= 1000
    v.free_gpus = [g for g in v.free_gpus if g not in gpus]
    v.job_count += 1
    v.exclusive = v.exclusive or exclusive
    return RunningView(job_id, INFINITE_TIME, [NodeAlloc(name, cpus, 1000, gpus)], exclusive,
                       qos=qos, partition="gpu", start_time=started)


def pending(job_id: int, gpus: int, qos: str = "high", **kw: object) -> PendingView:
    return PendingView(job_id, 100, NOW - 10, "gpu", num_tasks=1, gpus_per_node=gpus,
                       mem_per_node=1000, qos=qos, **kw)  # type: ignore[arg-type]


def snap(views: dict[str, NodeView], running: list[RunningView],
         jobs: list[PendingView], policy: PreemptPolicy | None = POLICY) -> Snapshot:
    return Snapshot(NOW, views, {"gpu": Partition("gpu", list(views))}, running, jobs,
                    preempt=policy)


def test_the_victims_that_lose_the_fewest_gpu_seconds() -> None:
    views = {n: node(n) for n in ("a", "b")}
    running = [
        run(views, 1, "a", [0, 1], NOW - 3600),  # an hour on 2 GPUs
        run(views, 2, "a", [2, 3], NOW - 60),  # a minute on 2 GPUs
        run(views, 3, "b", [0, 1, 2, 3], NOW - 120),  # 2 minutes on 4 GPUs
    ]
    placed = schedule(snap(views, running, [pending(10, 2)]))
    assert placed.starts == []
    [(job_id, alloc, victims)] = placed.preemptions
    assert (job_id, victims, [a.node for a in alloc]) == (10, [2], ["a"])
    assert sorted(alloc[0].gpus) == [2, 3]
    assert placed.reasons[10].code.name == "RESOURCES"


def test_the_freed_resources_are_not_given_to_a_later_job() -> None:
    views = {"a": node("a")}
    running = [run(views, 1, "a", [0, 1, 2, 3], NOW - 60)]
    placed = schedule(snap(views, running, [pending(10, 4), pending(11, 1, qos="normal")]))
    assert [p[0] for p in placed.preemptions] == [10]
    assert placed.starts == []  # job 11 does not take what job 10 waits for


def test_no_preemption_without_a_policy_or_rights() -> None:
    for policy, qos in ((None, "high"), (POLICY, "normal"),
                        (replace(POLICY, mode="off"), "high")):
        views = {"a": node("a")}
        running = [run(views, 1, "a", [0, 1, 2, 3], NOW - 60)]
        placed = schedule(snap(views, running, [pending(10, 1, qos=qos)], policy))
        assert placed.preemptions == [] and placed.starts == []


def test_a_job_of_a_protected_qos_is_never_a_victim() -> None:
    views = {"a": node("a")}
    running = [run(views, 1, "a", [0, 1, 2, 3], NOW - 60, qos="high")]
    placed = schedule(snap(views, running, [pending(10, 1)]))
    assert placed.preemptions == []


def test_an_exclusive_victim_goes_whole() -> None:
    views = {"a": node("a")}
    running = [run(views, 1, "a", [0], NOW - 60, exclusive=True)]
    placed = schedule(snap(views, running, [pending(10, 2)]))
    [(_, alloc, victims)] = placed.preemptions
    assert victims == [1] and len(alloc[0].gpus) == 2


def test_a_multi_node_preemptor_takes_the_cheapest_nodes() -> None:
    views = {n: node(n) for n in ("a", "b", "c")}
    running = [
        run(views, 1, "a", [0, 1, 2, 3], NOW - 7200),
        run(views, 2, "b", [0, 1, 2, 3], NOW - 60),
        run(views, 3, "c", [0, 1, 2, 3], NOW - 600),
    ]
    job = replace(pending(10, 4), num_nodes=2, num_tasks=2)
    [(_, alloc, victims)] = schedule(snap(views, running, [job])).preemptions
    assert sorted(victims) == [2, 3] and sorted(a.node for a in alloc) == ["b", "c"]
