"""Resource use: the GPU backends, cgroup reading, Slurm's formats (model.usage)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from corral.agent import gpu, usage
from corral.model.usage import StepUsage, convert_exact, elapsed, job_cpu, small_mega


def test_simulated_backend_reads_what_the_test_writes(tmp_path: Path) -> None:
    path = str(tmp_path / "gpus.json")
    backend = gpu.SimulatedBackend(path)
    assert backend.sample() == []  # no file yet: no GPUs, no error
    gpu.write_simulated(path, [{"index": 1, "util": 75, "memory_used": 1 << 30,
                                "processes": [{"pid": 42, "used_memory": 5}]},
                               {"index": 0}])
    s = backend.sample()
    assert [g.index for g in s] == [0, 1]
    assert s[0].util == 0.0 and s[0].processes == []
    assert s[1].util == 75.0 and s[1].memory_used == 1 << 30
    assert s[1].processes == [gpu.GpuProcess(42, 5)]
    gpu.write_simulated(path, [{"index": 0, "util": 10}])  # changed: re-read
    assert [g.util for g in backend.sample()] == [10.0]


def test_simulated_backend_skips_bad_entries(tmp_path: Path) -> None:
    path = tmp_path / "gpus.json"
    path.write_text('[{"index": "x"}, {"util": 3}, {"index": 2, "util": "busy"}, {"index": 3}]')
    assert [g.index for g in gpu.SimulatedBackend(str(path)).sample()] == [3]
    path.write_text("not json")
    assert gpu.SimulatedBackend(str(path)).sample() == []


def test_backend_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(gpu.SIM_ENV, raising=False)
    (tmp_path / gpu.SIM_FILE).write_text("[]")
    assert gpu.backend_for(str(tmp_path)).name == "simulated"
    other = tmp_path / "elsewhere.json"
    monkeypatch.setenv(gpu.SIM_ENV, str(other))
    chosen = gpu.backend_for(str(tmp_path / "none"))
    assert isinstance(chosen, gpu.SimulatedBackend) and chosen.path == str(other)


def test_no_nvml_means_no_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(gpu.SIM_ENV, raising=False)
    # this machine may or may not have a GPU: either way the backend answers a list
    b = gpu.backend_for(str(tmp_path))
    assert b.name in ("nvml", "none")
    assert isinstance(b.sample(), list)
    b.close()


@pytest.mark.parametrize("value,want", [(None, 30.0), ("", 30.0), ("10", 10.0),
                                        ("task=5,energy=0", 5.0), ("energy=3", 30.0),
                                        ("0", None), ("task=0", None), ("junk", 30.0)])
def test_parse_frequency(value: str | None, want: float | None) -> None:
    assert usage.parse_frequency(value) == want


def _v2_group(tmp_path: Path) -> dict[str, str]:
    root = tmp_path / "cg"
    step = root / "corral" / "c1" / "job_7" / "step_batch"
    step.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("memory cpu io\n")
    (step / "cgroup.procs").write_text("")
    (step / "cpu.stat").write_text("usage_usec 3500000\nuser_usec 3000000\nsystem_usec 500000\n")
    (step / "memory.stat").write_text("anon 209715200\nfile 4096\n")
    (step / "io.stat").write_text("8:0 rbytes=1048576 wbytes=2097152 rios=1 wios=2\n")
    return {"": str(step)}


def test_read_v2_group(tmp_path: Path) -> None:
    dirs = _v2_group(tmp_path)
    assert usage.step_groups(str(tmp_path / "cg"), "c1") == {(7, "batch"): dirs}
    f = usage.read_group(dirs)
    assert f["cpu_user"] == 3.0 and f["cpu_sys"] == 0.5
    assert f["rss"] == 200 << 20
    assert f["read"] == 1 << 20 and f["write"] == 2 << 20


def test_read_v1_group(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    dirs = {}
    for ctrl in ("memory", "cpuacct", "blkio"):
        d = root / ctrl / "corral" / "c1" / "job_3" / "step_0"
        d.mkdir(parents=True)
        (root / ctrl / "cgroup.procs").write_text("")
        (d / "cgroup.procs").write_text("")
        dirs[ctrl] = str(d)
    (Path(dirs["cpuacct"]) / "cpuacct.stat").write_text(f"user {2 * usage.CLK_TCK}\nsystem 0\n")
    (Path(dirs["memory"]) / "memory.stat").write_text("cache 5\nrss 7\ntotal_rss 1048576\n")
    (Path(dirs["blkio"]) / "blkio.throttle.io_service_bytes").write_text(
        "8:0 Read 4096\n8:0 Write 8192\n8:0 Total 12288\nTotal 12288\n")
    assert usage.step_groups(str(root), "c1") == {(3, "0"): dirs}
    f = usage.read_group(dirs)
    assert (f["cpu_user"], f["cpu_sys"], f["rss"]) == (2.0, 0.0, 1 << 20)
    assert (f["read"], f["write"]) == (4096, 8192)


def test_proc_figures_of_this_process() -> None:
    f = usage._proc_figures([os.getpid()])
    assert f["rss"] > 1 << 20 and f["cpu_user"] + f["cpu_sys"] > 0


def test_sampler_keeps_peaks_and_sends_finals(tmp_path: Path) -> None:
    dirs = _v2_group(tmp_path)
    sim = tmp_path / "gpus.json"
    gpu.write_simulated(str(sim), [{"index": 0, "util": 40}])
    s = usage.UsageSampler(str(tmp_path / "cg"), "c1", gpu.SimulatedBackend(str(sim)))
    msg = s.sample(now=100.0)
    assert msg["type"] == "usage" and msg["gpus"][0]["util"] == 40.0
    assert msg["steps"][0]["rss_max"] == 200 << 20
    Path(dirs[""], "memory.stat").write_text("anon 1048576\n")  # memory went down
    assert s.sample(now=101.0)["steps"] == []  # not due: the default is 30 s
    msg = s.sample(now=101.0, default=1.0)
    assert msg["steps"][0]["rss"] == 1 << 20 and msg["steps"][0]["rss_max"] == 200 << 20
    final = s.final(7, "batch", None, {"cpu_user": 5.0, "cpu_sys": 0.1, "rss_max": 10})
    assert final is not None
    step = final["steps"][0]
    assert step["final"] is True and step["cpu_user"] == 5.0 and step["rss_max"] == 200 << 20
    assert (7, "batch") not in s.steps
    # a step nothing measured (no cgroup, never sampled): no figures rather than zeros
    assert s.final(8, "0", None) is None
    # a bad figure in a status file counts as none
    bad = s.final(9, "batch", None, {"cpu_user": "lots", "rss_max": -3, "read": True})
    assert bad is not None and bad["steps"][0]["cpu_user"] == 0 and bad["steps"][0]["rss_max"] == 0


@pytest.mark.parametrize("value,want", [(0, "0"), (1000, "1000"), (1024, "1K"),
                                        (200 << 20, "200M"), ((200 << 20) + 4096, "204804K"),
                                        (3 << 30, "3G")])
def test_convert_exact(value: int, want: str) -> None:
    assert convert_exact(value) == want


def test_small_mega_and_elapsed() -> None:
    assert small_mega(0) == "0"
    assert small_mega(1 << 19) == "0.50M"
    assert small_mega(3 << 20) == "3M"
    assert small_mega((3 << 20) + (1 << 19)) == "3.50M"
    assert elapsed(5) == "00:00:05"
    assert elapsed(5.25, with_ms=True) == "00:05.250"
    assert elapsed(3725) == "01:02:05"
    assert elapsed(90061) == "1-01:01:01"


def test_step_usage_fields() -> None:
    u = StepUsage({"n1": {"cpu_user": 4.0, "cpu_sys": 1.0, "rss_max": 100 << 20, "read": 0,
                          "write": 3 << 20},
                   "n2": {"cpu_user": 2.0, "cpu_sys": 0.0, "rss_max": 300 << 20, "read": 0,
                          "write": 0, "gpuutil_ave": 50.0, "gpuutil_max": 80.0,
                          "gpumem_max": 1 << 30}})
    assert u.field("MaxRSS") == "300M" and u.field("MaxRSSNode") == "n2"
    assert u.field("AveRSS") == "200M"
    assert u.field("MaxRSSTask") == ""  # per-node figures: no task on multi-node steps
    assert u.field("MinCPU") == "00:00:02" and u.field("MinCPUNode") == "n2"
    assert u.field("AveCPU") == "00:00:03"
    assert u.field("MaxDiskWrite") == "3M" and u.field("MaxDiskWriteNode") == "n1"
    assert u.field("TRESUsageInMax") == "cpu=00:00:05,fs/disk=0,gres/gpumem=1G,gres/gpuutil=80,mem=300M"
    assert u.field("TRESUsageInTot").startswith("cpu=00:00:07,")
    assert u.total_cpu() == 7.0
    assert StepUsage(None).field("MaxRSS") == "" and not StepUsage({})
    assert job_cpu([{"usage": None}]) is None
    assert job_cpu([{"usage": {"a": {"cpu_user": 1, "cpu_sys": 2}}},
                    {"usage": {"b": {"cpu_user": 3}}}]) == (4.0, 2.0)


def test_job_frequency_overrides_the_default(tmp_path: Path) -> None:
    _v2_group(tmp_path)  # job 7's batch step
    s = usage.UsageSampler(str(tmp_path / "cg"), "c1", gpu.NoGpus())
    assert s.tick(30.0) == 30.0 and s.tick(None) is None
    s.set_job_frequency(7, "task=2")
    assert s.tick(30.0) == 2.0 and s.tick(None) == 2.0
    assert len(s.sample(now=100.0, default=30.0)["steps"]) == 1  # a new step: at once
    assert s.sample(now=101.0, default=30.0)["steps"] == []
    assert len(s.sample(now=102.0, default=30.0)["steps"]) == 1
    s.set_job_frequency(7, "0")  # --acctg-freq=0: no periodic sampling for this job
    assert s.sample(now=200.0, default=30.0)["steps"] == []
    s.forget_job(7)
    assert len(s.sample(now=200.0, default=30.0)["steps"]) == 1
