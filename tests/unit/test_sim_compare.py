"""`corral sim --policy`: policies side by side (FCFS, EASY, Corral's default), the lab mix,
the sacct reader, load compression and the PNG plot."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from corral.admin.main import main as corral_main
from corral.controller.core.settings import sched_params
from corral.model.config import parse_config
from corral.sched.backfill import DEFAULT_MAX_PLANNED
from corral.sim.compare import busy_series, compress, policy_conf
from corral.sim.engine import Simulator
from corral.sim.generate import gpu_cluster_conf, lab_mix
from corral.sim.metrics import summarise
from corral.sim.plot import draw, write_png
from corral.sim.trace import TraceJob, read_trace

LAB = gpu_cluster_conf(4, 8)


def test_policy_settings_reach_the_pass() -> None:
    fcfs = sched_params(parse_config(policy_conf("fcfs", LAB)))
    easy = sched_params(parse_config(policy_conf("easy", LAB)))
    default = sched_params(parse_config(LAB))
    assert (fcfs.backfill, easy.backfill, default.backfill) == (False, True, True)
    assert easy.max_planned == 0  # only the top blocked job holds resources
    assert default.max_planned == DEFAULT_MAX_PLANNED
    both = policy_conf("easy", "SchedulerParameters=bf_interval=30\n" + LAB)
    assert "SchedulerParameters=bf_interval=30,bf_job_part_count_reserve=1" in both


def test_lab_mix_has_every_size_and_habits() -> None:
    jobs = lab_mix(300, seed=3)
    assert {j.gpus for j in jobs} == {1, 2, 4, 8, 16}
    assert all(1.2 * j.run_time - 60 <= j.time_limit <= 5 * j.run_time + 60 for j in jobs)
    # a habit: a user's jobs come in few sizes
    by_user: dict[str, set[int]] = {}
    for j in jobs:
        by_user.setdefault(j.user, set()).add(j.gpus)
    assert max(len(s) for s in by_user.values()) <= 3


def test_easy_beats_fcfs_on_the_lab_mix() -> None:
    jobs = lab_mix(150, seed=5)
    fcfs = summarise(Simulator(parse_config(policy_conf("fcfs", LAB)), jobs).run())
    easy = summarise(Simulator(parse_config(policy_conf("easy", LAB)), jobs).run())
    assert fcfs.started == easy.started == len(jobs)
    assert easy.mean_wait < 0.8 * fcfs.mean_wait
    assert easy.utilisation > fcfs.utilisation
    assert easy.idle_gpu_seconds_while_pending < fcfs.idle_gpu_seconds_while_pending


def test_sixteen_gpu_jobs_run_on_two_nodes() -> None:
    jobs = [TraceJob(0, 100, 200, 32, 16)]
    result = Simulator(parse_config(LAB), jobs).run()
    assert result.records[0].end == pytest.approx(100)
    assert busy_series(result) == [(pytest.approx(0), 16), (pytest.approx(100), 0)]


def test_compress_scales_submits_to_the_load() -> None:
    jobs = [TraceJob(0, 100, 100, gpus=2), TraceJob(1000, 100, 100, gpus=2)]
    out = compress(jobs, 4, 1.0)
    # 400 GPU-s of work on 4 GPUs at load 1: 100 s between first and last submission
    assert [j.submit for j in out] == [0, 100]
    assert compress(jobs, 4, 0.5)[1].submit == 200


def test_sacct_export_reads_as_a_trace(tmp_path: Path) -> None:
    p = tmp_path / "october.txt"
    p.write_text(
        "JobID|Submit|Start|End|Timelimit|AllocTRES|User|Account|Partition|State\n"
        "7|2026-10-01T10:00:00|2026-10-01T10:00:30|2026-10-01T11:00:30|02:00:00|"
        "billing=8,cpu=8,gres/gpu=2,mem=32G,node=1|alice|lab|gpu|COMPLETED\n"
        "7.batch|2026-10-01T10:00:00|2026-10-01T10:00:30|2026-10-01T11:00:30||"
        "cpu=8,mem=32G,node=1|||gpu|COMPLETED\n"
        "8|2026-10-01T09:59:00|Unknown|Unknown|1:00:00||bob|lab|gpu|PENDING\n"
        "9|2026-10-01T10:05:00|2026-10-01T10:06:00|2026-10-01T10:16:00|UNLIMITED|"
        "cpu=1,mem=500M,node=1|bob|lab|gpu|CANCELLED by 0\n")
    jobs, header = read_trace(p)
    assert header is None
    assert jobs == [TraceJob(0, 3600, 7200, 8, 2, 32 * 1024, "alice", "lab", "gpu"),
                    TraceJob(300, 600, 600, 1, 0, 500, "bob", "lab", "gpu")]
    # with a QOS column (as the docstring's export asks), each job keeps its QoS
    with_qos = tmp_path / "with-qos.txt"
    with_qos.write_text(
        "JobID|Submit|Start|End|Timelimit|AllocTRES|User|Account|Partition|QOS|State\n"
        "7|2026-10-01T10:00:00|2026-10-01T10:00:30|2026-10-01T11:00:30|02:00:00|"
        "cpu=8,gres/gpu=2,mem=32G|alice|lab|gpu|high|COMPLETED\n")
    assert read_trace(with_qos)[0] == [
        TraceJob(0, 3600, 7200, 8, 2, 32 * 1024, "alice", "lab", "gpu", "high")]
    bad = tmp_path / "bad.txt"
    bad.write_text("JobID|User\n1|x\n")
    assert corral_main(["sim", str(bad), "--policy", "easy"]) == 1


def test_png_is_a_valid_image(tmp_path: Path) -> None:
    w, h, rows = draw(["a", "b"], [[(0, 4), (10, 8), (20, 0)], [(0, 8), (20, 0)]], 8,
                      width=60, height=40)
    path = tmp_path / "busy.png"
    write_png(path, w, h, rows)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (60, 40)
    idat_len = struct.unpack(">I", data[33:37])[0]
    raw = zlib.decompress(data[41:41 + idat_len])
    assert len(raw) == h * (1 + 3 * w)
    assert b"\x1f\x77\xb4" in raw  # the first policy's colour was drawn


def test_cli_compares_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "busy.png"
    assert corral_main(["sim", "lab:40:2", "--policy", "fcfs,easy,default",
                        "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["policy", "util", "%", "arriving"]
    assert [ln.split()[0] for ln in lines[1:4]] == ["fcfs", "easy", "default"]
    assert "mean wait by size and by user" in out
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert corral_main(["sim", "lab:10", "--policy", "sjf"]) == 1
    assert "unknown policy 'sjf'" in capsys.readouterr().err
    assert corral_main(["sim", "lab:x", "--policy", "easy"]) == 1
    assert "lab:N" in capsys.readouterr().err
    assert corral_main(["sim", "lab:10", "--plot", str(tmp_path / "p.png")]) == 1
    assert "--plot needs --policy" in capsys.readouterr().err
    assert corral_main(["sim", "lab:10", "--policy", f"conf:{tmp_path}/none"]) == 1
    assert corral_main(["sim", "lab:10", "--load", "0", "--policy", "easy"]) == 1


def test_compress_counts_only_the_jobs_the_cluster_can_run() -> None:
    from corral.sim.compare import fits_config, fits_nodes

    jobs = [TraceJob(0, 100, 100, cpus=4, gpus=2), TraceJob(1000, 100, 100, cpus=4, gpus=2),
            TraceJob(500, 10_000, 10_000, cpus=100, gpus=8)]  # more CPUs than a node has
    fits = fits_nodes(64, 512_000, 8, 4)
    assert [fits(j) for j in jobs] == [True, True, False]
    assert fits(TraceJob(0, 1, 1, cpus=100, gpus=16))  # 50 CPUs on each of 2 nodes
    assert not fits(TraceJob(0, 1, 1, cpus=4, gpus=40))  # 5 nodes of 4
    assert [fits_config(parse_config(gpu_cluster_conf(4, 8)))(j) for j in jobs] \
        == [True, True, False]
    # 400 GPU-s that can run on 4 GPUs: 100 s from first to last submission (counting the
    # refused job's 80,000 GPU-s made it 20,100 s)
    assert [j.submit for j in compress(jobs, 4, 1.0, fits)] == [0, 100, 50]
    assert compress(jobs, 4, 1.0)[1].submit == 20_100


def test_utilisation_while_jobs_arrive() -> None:
    from corral.sim.compare import window_utilisation

    # 8 GPUs; jobs arrive over 100 s; a 1-GPU job runs 10,000 s (the tail)
    jobs = [TraceJob(0, 10_000, 10_000, cpus=1, gpus=1), TraceJob(100, 50, 50, cpus=8, gpus=8)]
    result = Simulator(parse_config(gpu_cluster_conf(1, 8)), jobs).run()
    # the 8-GPU job waits for the long one; over the first 100 s one GPU of 8 was busy
    assert window_utilisation(result) == pytest.approx(1 / 8)
    assert summarise(result).utilisation < 0.2


def test_scheduler_parameters_as_a_policy(capsys: pytest.CaptureFixture[str]) -> None:
    conf = policy_conf("sp:bf_job_part_count_reserve=1+corral_bf_order=limit",
                       "SchedulerParameters=bf_interval=30\n" + LAB)
    assert "SchedulerParameters=bf_interval=30,bf_job_part_count_reserve=1," \
           "corral_bf_order=limit" in conf
    params = sched_params(parse_config(conf))
    assert (params.max_planned, params.levers.order) == (0, "limit")
    assert corral_main(["sim", "lab:40:2", "--policy",
                        "easy,sp:bf_job_part_count_reserve=1+corral_bf_order=limit"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].split()[0] == "sp:bf_job_part_count_reserve=1+corral_bf_order=limit"
