"""Preemption in the simulator: a trace job's QoS (`TraceJob.qos`) is submitted with it, a
preemptor is placed over its victims by the pass, and the victims are requeued (rerun from
the start) or cancelled in virtual time."""

from __future__ import annotations

import pytest

from corral.model.assoc import Qos
from corral.model.config import parse_config
from corral.sim.engine import Simulator
from corral.sim.generate import gpu_cluster_conf
from corral.sim.trace import TraceJob

ONE_NODE = gpu_cluster_conf(1, 8)


def simulate(mode: str | None, jobs: list[TraceJob]) -> Simulator:
    conf = ONE_NODE if mode is None \
        else f"PreemptType=preempt/qos\nPreemptMode={mode}\n" + ONE_NODE
    sim = Simulator(parse_config(conf), jobs)
    db = sim.ctl.accounts.db
    db.qos["normal"] = Qos("normal", 1)
    db.qos["high"] = Qos("high", 2, preempt=("normal",))
    sim.run()
    return sim


# a student's 8-GPU job runs 1,000 s from 0; a deadline job of 8 GPUs comes at 100 s
JOBS = [TraceJob(0, 1000, 2000, cpus=8, gpus=8, mem_mb=1000, user="student", qos="normal"),
        TraceJob(100, 300, 600, cpus=8, gpus=8, mem_mb=1000, user="deadline", qos="high")]


def test_a_requeued_victim_runs_again_after_its_preemptor() -> None:
    sim = simulate("REQUEUE", JOBS)
    victim, preemptor = sim.records
    assert preemptor.start == pytest.approx(100, abs=1)  # at once, on the victim's GPUs
    assert preemptor.state == "COMPLETED"
    # the victim is requeued, keeps its place, and reruns its 1,000 s after the preemptor
    assert victim.start == pytest.approx(400, abs=1)
    assert victim.end == pytest.approx(1400, abs=1) and victim.state == "COMPLETED"
    assert sim.ctl.jobs[victim.job_id or 0].restart_count == 1
    assert sim.starts == [0, 1, 0]


def test_a_cancelled_victim_does_not_run_again() -> None:
    sim = simulate("CANCEL", JOBS)
    victim, preemptor = sim.records
    assert preemptor.start == pytest.approx(100, abs=1)
    assert victim.end == pytest.approx(100, abs=1) and victim.state == "PREEMPTED"
    assert sim.starts == [0, 1]


def test_without_preemption_the_deadline_job_waits() -> None:
    sim = simulate(None, JOBS)
    victim, waiting = sim.records
    assert waiting.start == pytest.approx(1000) and victim.end == pytest.approx(1000)
