"""The simulator's shortcuts change no schedule: the passes it skips after an end (no
pending job fits in what is free), the idle ticks it jumps over, and the pass snapshot's
views reused from the last pass."""

from __future__ import annotations

from typing import Any

import pytest

from corral.controller.core import passes
from corral.controller.harness import FakeClock, harness_controller
from corral.model.config import parse_config
from corral.model.job import Job, JobState, NodeAlloc
from corral.sim import engine
from corral.sim.engine import Simulator
from corral.sim.generate import gpu_cluster_conf, gpu_jobs
from corral.sim.trace import TraceJob
from corral.store.memory import MemoryStore


def schedule(sim: Simulator) -> tuple[list[tuple[Any, ...]], list[int], int]:
    r = sim.run()
    return [(x.job_id, x.start, x.end, x.state) for x in r.records], r.starts, r.passes


@pytest.mark.parametrize("load,seed", [(1.0, 3), (1.4, 11)])
def test_passes_skipped_after_ends_change_no_start(monkeypatch: pytest.MonkeyPatch,
                                                   load: float, seed: int) -> None:
    conf = parse_config(gpu_cluster_conf(8, 8))
    jobs = gpu_jobs(300, nodes=8, gpus_per_node=8, load=load, seed=seed)
    fast = schedule(Simulator(conf, jobs))
    monkeypatch.setattr(Simulator, "_may_use_freed", lambda self: bool(self.ctl.pending))
    every = schedule(Simulator(conf, jobs))
    assert fast[0] == every[0]  # every job's start, end and state
    assert fast[1] == every[1]  # the order of the starts
    assert fast[2] < every[2]  # and some passes were skipped


def test_a_job_that_may_become_eligible_keeps_the_pass() -> None:
    s = Simulator(parse_config(gpu_cluster_conf(1, 8)), [])
    job = Job(job_id=1, name="x", user="u", uid=1, gid=1, account="a", partition="gpu",
              state=JobState.PENDING, submit_time=0, gpus_per_node=8, cpus_per_task=1)
    s.ctl.table.load(job)
    s.ctl.core.cluster.charge(Job(job_id=2, name="y", user="u", uid=1, gid=1, account="a",
                                  partition="gpu", state=JobState.RUNNING,
                                  alloc=[NodeAlloc("gpu001", 4, 0, [0, 1, 2, 3])]))
    assert s._may_use_freed()  # it does not fit, but the pass would set its eligible time
    job.eligible_time = 0.0
    assert not s._may_use_freed()  # 8 GPUs asked, 4 free: nothing could start
    job.gpus_per_node = 4
    assert s._may_use_freed()


def test_ticks_jumped_over_change_no_tick_that_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    duties: list[float] = []
    plain = engine.periodic_duties

    def recorded(ctl: Any, now: float) -> None:
        duties.append(now)
        plain(ctl, now)

    monkeypatch.setattr(engine, "periodic_duties", recorded)
    ticks = 0
    plain_tick = Simulator._tick

    def counted(self: Simulator) -> None:
        nonlocal ticks
        ticks += 1
        plain_tick(self)

    monkeypatch.setattr(Simulator, "_tick", counted)
    conf = parse_config(gpu_cluster_conf(1, 8))
    # jobs far apart (the ticks between them change nothing), one into its time limit
    jobs = [TraceJob(0, 60, 120, gpus=1), TraceJob(86_400.3, 60, 120, gpus=1),
            TraceJob(90_000.7, 500, 61, gpus=8), TraceJob(90_001.1, 30, 60, gpus=2)]
    fast = schedule(Simulator(conf, jobs)), duties[:], ticks
    duties.clear()
    ticks = 0
    monkeypatch.setattr(Simulator, "_next_tick", lambda self: self.ctl.cadence.next_tick(self.now))
    every = schedule(Simulator(conf, jobs)), duties[:], ticks
    assert fast[0] == every[0]
    assert fast[1] == every[1] and len(fast[1]) > 3  # the ticks that ran, at the same times
    assert fast[2] < 100 < every[2]  # not one per 5 s of the day between


def fresh_views(ctl: Any, now: float) -> tuple[dict[str, Any], list[Any]]:
    return ({n.name: passes.node_view(n) for n in ctl.core.nodes.values()},
            [passes.running_view(j, now) for j in ctl.core.running.values()])


def test_the_snapshot_views_follow_every_change_of_nodes_and_jobs() -> None:
    conf = parse_config(gpu_cluster_conf(3, 8))
    ctl = harness_controller(conf, MemoryStore(), FakeClock(1000.0))
    for n in ctl.nodes.values():
        n.responding = n.registered = True
    core = ctl.core

    def check() -> None:
        snap = core.passes.snapshot(1000.0)
        nodes, running = fresh_views(ctl, 1000.0)
        assert list(snap.nodes) == list(nodes) and snap.nodes == nodes
        assert snap.running == running

    job = Job(job_id=7, name="r", user="u", uid=1, gid=1, account="a", partition="gpu",
              state=JobState.PENDING, submit_time=0, time_limit=600)
    core.table.load(job)
    check()
    with core.collecting():  # (the effects are not executed: no store writes)
        core.lifecycle.start_job(job, [NodeAlloc("gpu002", 8, 1000, [1, 2])], 1000.0)
    check()
    node = ctl.nodes["gpu003"]
    node.admin_state = "drain"
    check()
    node.admin_state = "up"
    node.features.append("a100")  # changed in place
    check()
    node.weight = 5
    check()
    # a job's change is persisted, which marks it (JobTable.mark): its view is made again
    with core.collecting():
        job.time_limit = 1200
        core.out.job(job)
    check()
    with core.collecting():
        job.kill_reason = "PREEMPTED"
        core.out.job(job)
    check()
    gpus = ctl.nodes["gpu002"].alloc_gpus
    gpus[0] = 3  # the same count, another GPU
    check()
    gpus[0] = 1
    with core.collecting():
        core.lifecycle.job_ended(7, "COMPLETED", 0, 0, 1000.0, 1000.0)
    assert not core.running
    check()


def test_a_sim_run_sees_the_same_snapshot_as_views_made_afresh(
        monkeypatch: pytest.MonkeyPatch) -> None:
    plain = passes.Passes.snapshot
    seen = 0

    def checked(self: passes.Passes, now: float) -> Any:
        nonlocal seen
        snap = plain(self, now)
        nodes = {n.name: passes.node_view(n) for n in self.core.nodes.values()}
        assert snap.nodes == nodes
        assert snap.running == [passes.running_view(j, now) for j in self.core.running.values()]
        seen += 1
        return snap

    monkeypatch.setattr(passes.Passes, "snapshot", checked)
    Simulator(parse_config(gpu_cluster_conf(4, 8)), gpu_jobs(150, nodes=4, seed=5)).run()
    assert seen > 100
