"""Preemption in the simulator: a trace job's QoS (`TraceJob.qos`) is submitted with it, a
preemptor is placed over its victims by the pass, and the victims are requeued (rerun from
the start) or cancelled in virtual time, after their QoS's GraceTime (a victim runs to its
end: no trace job traps SIGTERM), or suspended (PreemptMode=SUSPEND,GANG) until their
preemptor ends, their end and time limit moved by the time they were suspended."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.admin.main import main as corral_main
from corral.model.assoc import Qos
from corral.model.config import parse_config
from corral.sim.compare import busy_series
from corral.sim.engine import SimResult, Simulator
from corral.sim.generate import gpu_cluster_conf
from corral.sim.metrics import render, summarise
from corral.sim.trace import TraceJob

ONE_NODE = gpu_cluster_conf(1, 8)


def simulate(mode: str | None, jobs: list[TraceJob], grace: int = 0,
             exact: bool = False) -> Simulator:
    return simulate_result(mode, jobs, grace, exact)[0]


def simulate_result(mode: str | None, jobs: list[TraceJob], grace: int = 0,
                    exact: bool = False) -> tuple[Simulator, SimResult]:
    conf = ONE_NODE if mode is None \
        else f"PreemptType=preempt/qos\nPreemptMode={mode}\n" + ONE_NODE
    sim = Simulator(parse_config(conf), jobs, exact=exact)
    db = sim.ctl.accounts.db
    db.qos["normal"] = Qos("normal", 1, grace_time=grace)
    db.qos["high"] = Qos("high", 2, preempt=("normal",))
    return sim, sim.run()


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


def test_a_requeued_victim_holds_its_gpus_for_its_grace_time() -> None:
    sim = simulate("REQUEUE", JOBS, grace=60)
    victim, preemptor = sim.records
    # the victim gets SIGTERM at 100, runs on (no trace job traps it), is killed at 160
    assert preemptor.start == pytest.approx(160, abs=1)
    assert preemptor.end == pytest.approx(460, abs=1) and preemptor.state == "COMPLETED"
    # then reruns its whole 1,000 s after the preemptor
    assert victim.start == pytest.approx(460, abs=1)
    assert victim.end == pytest.approx(1460, abs=1) and victim.state == "COMPLETED"
    assert sim.ctl.jobs[victim.job_id or 0].restart_count == 1
    assert sim.starts == [0, 1, 0]


def test_a_cancelled_victim_ends_after_its_grace_time() -> None:
    sim, result = simulate_result("CANCEL", JOBS, grace=60)
    victim, preemptor = sim.records
    assert summarise(result).lost_to_preemption == pytest.approx(8 * 160, abs=10)
    assert victim.end == pytest.approx(160, abs=1) and victim.state == "PREEMPTED"
    assert preemptor.start == pytest.approx(160, abs=1)
    assert sim.starts == [0, 1]


def test_a_victim_that_ends_within_its_grace_time_frees_its_gpus_then() -> None:
    # the deadline job comes 50 s before the student's job ends, with 120 s of grace
    jobs = [JOBS[0], TraceJob(950, 300, 600, cpus=8, gpus=8, mem_mb=1000, user="deadline",
                              qos="high")]
    sim = simulate("CANCEL", jobs, grace=120)
    victim, preemptor = sim.records
    assert victim.end == pytest.approx(1000, abs=1)
    assert preemptor.start == pytest.approx(1000, abs=1)


@pytest.mark.parametrize("mode,grace", [("REQUEUE", 60), ("CANCEL", 60), ("SUSPEND,GANG", 0)])
def test_the_shortcuts_keep_the_preempted_schedule(mode: str, grace: int) -> None:
    fast = simulate(mode, JOBS, grace=grace)
    exact = simulate(mode, JOBS, grace=grace, exact=True)
    assert [(r.start, r.end, r.state) for r in fast.records] \
        == [(r.start, r.end, r.state) for r in exact.records]
    assert fast.starts == exact.starts


def test_a_suspended_victim_ends_its_suspended_time_later() -> None:
    alone = simulate("SUSPEND,GANG", JOBS[:1]).records[0]
    sim = simulate("SUSPEND,GANG", JOBS)
    victim, preemptor = sim.records
    assert preemptor.start == pytest.approx(100, abs=1)  # at once, on the victim's GPUs
    assert preemptor.end == pytest.approx(400, abs=1) and preemptor.state == "COMPLETED"
    assert alone.end == pytest.approx(1000)
    # suspended from the preemptor's start to its end, resumed where it stopped
    assert victim.start == 0 and victim.state == "COMPLETED"
    assert victim.end == pytest.approx(alone.end + (preemptor.end - preemptor.start))
    job = sim.ctl.jobs[victim.job_id or 0]
    assert job.restart_count == 0
    assert job.suspended_secs == pytest.approx(preemptor.end - preemptor.start)
    assert sim.starts == [0, 1]


@pytest.mark.parametrize("mode", ["REQUEUE", "SUSPEND,GANG"])
def test_the_summary_counts_each_gpu_second_once(mode: str) -> None:
    """A requeued victim's first run held its GPUs (busy, not idle); a suspended one lent
    them to its preemptor (not counted twice).  Here the node's 8 GPUs are busy from the
    first start to the last end, whoever holds them."""
    sim, result = simulate_result(mode, JOBS, grace=60 if mode == "REQUEUE" else 0)
    victim, _ = sim.records
    if mode == "REQUEUE":
        assert victim.stopped == [(0.0, pytest.approx(160, abs=1))]
    else:
        assert victim.paused == [(pytest.approx(100, abs=1), pytest.approx(400, abs=1))]
    s = summarise(result)
    # the victim's 160 s on 8 GPUs before its requeue are lost; a suspended one loses none
    assert s.lost_to_preemption == pytest.approx(1280 if mode == "REQUEUE" else 0, abs=10)
    assert ("GPU-s lost to preemption  1280" in render(s)) == (mode == "REQUEUE")
    assert s.utilisation == pytest.approx(1.0)
    assert s.idle_gpu_seconds_while_pending == pytest.approx(0.0)
    assert busy_series(result)[-1][1] == 0
    assert max(busy for _, busy in busy_series(result)) == 8


def test_a_suspended_victims_time_limit_is_moved_too() -> None:
    # a student's job that would run 1,000 s within a 800 s limit
    jobs = [TraceJob(0, 1000, 800, cpus=8, gpus=8, mem_mb=1000, user="student", qos="normal"),
            JOBS[1]]
    alone = simulate("SUSPEND,GANG", jobs[:1]).records[0]
    assert alone.end == pytest.approx(800) and alone.state == "TIMEOUT"
    victim, preemptor = simulate("SUSPEND,GANG", jobs).records
    assert victim.state == "TIMEOUT"
    assert victim.end == pytest.approx(800 + (preemptor.end - preemptor.start))


# `corral sim --accounts`: the QoS of a `sacctmgr dump` flat file, dumped from another
# cluster, and a CSV trace whose qos column names them
DUMP = """\
# dumped from the lab's real cluster
Cluster - 'labcluster':Fairshare=1:QOS='normal'
QOS - 'normal':Priority=1:GraceTime=60
QOS - 'high':Priority=2:Preempt='normal'
Parent - 'root'
Account - 'lab':Description='lab':Organization='lab':Fairshare=1
"""
TRACE = """\
submit,run_time,time_limit,gpus,cpus,mem_mb,user,qos
0,1000,2000,8,8,1000,student,normal
100,300,600,8,8,1000,deadline,high
120,10,20,1,1,1000,other,BE
"""


def _jobs_out(path: Path) -> list[list[str]]:
    return [line.split(",") for line in path.read_text().splitlines()[1:]]


def test_corral_sim_replays_preemption_with_a_dumped_accounts_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("PreemptType=preempt/qos\nPreemptMode=REQUEUE\n" + gpu_cluster_conf(1, 8))
    (tmp_path / "acct.cfg").write_text(DUMP)
    (tmp_path / "trace.csv").write_text(TRACE)
    out = tmp_path / "jobs.csv"
    assert corral_main(["sim", str(tmp_path / "trace.csv"), "--config", str(conf),
                        "--accounts", str(tmp_path / "acct.cfg"), "--jobs-out", str(out)]) == 0
    printed = capsys.readouterr().out
    victim, preemptor, other = _jobs_out(out)
    # the deadline job starts once the student's job is killed at the end of its GraceTime
    # (100 + 60 s); the student's reruns its 1,000 s after it
    assert float(preemptor[3]) == pytest.approx(160, abs=1)
    assert float(victim[3]) == pytest.approx(460, abs=1)
    assert victim[5] == preemptor[5] == "COMPLETED"
    # the trace's own class BE is not one of the cluster's: the default QoS, and said so
    assert other[5] == "COMPLETED"
    assert "1 jobs named a QoS the simulated cluster does not define" in printed
    # without the file only the built-in normal is known: nothing is preempted
    assert corral_main(["sim", str(tmp_path / "trace.csv"), "--config", str(conf),
                        "--jobs-out", str(out)]) == 0
    victim, preemptor, _ = _jobs_out(out)
    assert float(preemptor[3]) == pytest.approx(1000, abs=1)
    assert "2 jobs named a QoS" in capsys.readouterr().out  # high and BE (normal is built in)


def test_corral_sim_bad_accounts_file_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "trace.csv").write_text(TRACE)
    (tmp_path / "bad.cfg").write_text("Cluster - 'x'\nBogus line\n")
    assert corral_main(["sim", str(tmp_path / "trace.csv"),
                        "--accounts", str(tmp_path / "bad.cfg")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"corral sim: error: {tmp_path / 'bad.cfg'}: Bad line 2") \
        and err.count("\n") == 1, err
    assert corral_main(["sim", str(tmp_path / "trace.csv"),
                        "--accounts", str(tmp_path / "missing.cfg")]) == 1
    assert "missing.cfg: No such file or directory" in capsys.readouterr().err
