"""Bad input through the real commands on a running cluster: refused as Slurm 22.05
refuses it (message and exit status), nothing submitted, never a traceback, and the
cluster still runs a normal job afterwards.  Also the file-name patterns and the
--begin forms, which users see in their output files and queue.
"""

from __future__ import annotations

import time

import pytest

from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow

GRES = "Batch job submission failed: Invalid generic resource (gres) specification"
TOO_LONG = ("Batch job submission failed: Pathname of a file, directory or other parameter "
            "too long")


@pytest.mark.parametrize("args, code, err", [
    (["--mem="], 255, "sbatch: error: Invalid --mem specification\n"),
    (["--mem=1GG"], 255, "sbatch: error: Invalid --mem specification\n"),
    (["--mem-per-cpu=1GG"], 255, "sbatch: error: Invalid --mem-per-cpu specification\n"),
    (["--mem-per-gpu=x"], 255, "sbatch: error: Invalid --mem-per-gpu specification\n"),
    (["--gres=gpu:-1"], 1, f"sbatch: error: {GRES}\n"),
    (["-J", "n" * 10240], 1, f"sbatch: error: {TOO_LONG}\n"),
    (["--comment", "c" * 10240], 1, f"sbatch: error: {TOO_LONG}\n"),
    (["-p", ""], 1, "sbatch: error: invalid partition specified: \n"
                    "sbatch: error: Batch job submission failed: Invalid partition name "
                    "specified\n"),
    (["--constraint=a&&b"], 1, "sbatch: error: Batch job submission failed: Invalid "
                               "feature specification\n"),
    (["--distribution=sideways"], 255, "sbatch: error: Invalid --distribution "
                                       "specification\n"),
    (["--cpu-freq=warp"], 255, 'sbatch: error: unrecognized --cpu-freq argument "warp"\n'
                               "sbatch: error: Invalid --cpu-freq argument\n"),
    (["--profile=everything"], 255, "sbatch: error: invalid --profile=everything option\n"),
    (["--acctg-freq=often"], 255, "sbatch: error: Invalid --acctg-freq specification: "
                                  "often\n"),
    (["--mem-bind=wherever"], 255, 'sbatch: error: unrecognized --mem-bind argument '
                                   '"wherever"\n'),
    (["--kill-on-invalid-dep=perhaps"], 255, "sbatch: error: Invalid --kill-on-invalid-dep "
                                             "specification\n"),
    (["--array=0-2147483646"], 1, "sbatch: error: Batch job submission failed: Invalid job "
                                  "array specification\n"),
])
def test_sbatch_refuses(cluster: Cluster, args: list[str], code: int, err: str) -> None:
    r = cluster.run("sbatch", "-J", "refused-job", *args, "--wrap", "true")
    assert (r.returncode, r.stdout, r.stderr) == (code, "", err)
    assert cluster.squeue_ids("-n", "refused-job", "-t", "all") == []


def test_bad_directives_and_huge_lines(cluster: Cluster) -> None:
    script = cluster.workdir / "bad.sh"
    for line, code, err in (
            ("#SBATCH --mem=1GG", 255, "sbatch: error: Invalid --mem specification\n"),
            ("#SBATCH --gres=gpu:-1", 1, f"sbatch: error: {GRES}\n"),
            ("#SBATCH --job-name=" + "x" * 100_000, 1, f"sbatch: error: {TOO_LONG}\n"),
            ("#SBATCH --output=" + "o" * 100_000, 1, f"sbatch: error: {TOO_LONG}\n")):
        script.write_text(f"#!/bin/sh\n{line}\ntrue\n")
        r = cluster.run("sbatch", str(script))
        assert (r.returncode, r.stderr) == (code, err)


def test_gres_bad_count_with_srun_and_salloc(cluster: Cluster) -> None:
    r = cluster.run("srun", "--gres=gpu:-1", "true")
    assert r.returncode != 0 and "Invalid generic resource (gres) specification" in r.stderr
    r = cluster.run("salloc", "--gres=gpu:-1", "true")
    assert (r.returncode, r.stderr) == (
        1, "salloc: error: Job submit/allocate failed: Invalid generic resource (gres) "
           "specification\n")


def test_scancel_whole_index_range_is_refused_at_once(cluster: Cluster) -> None:
    start = time.monotonic()
    r = cluster.run("scancel", "1_[0-2147483646]")
    assert time.monotonic() - start < 10
    assert (r.returncode, r.stderr) == (
        1, "scancel: error: _parse_single_range: Too many hosts in range `0-2147483646'\n"
           "scancel: error: Invalid job id 1_[0-2147483646]\n")


def test_cluster_still_healthy_after_bad_input(cluster: Cluster) -> None:
    job = cluster.sbatch("-J", "after-bad", "--wrap", "true")
    assert cluster.wait_state(job, "COMPLETED") == "COMPLETED"


# ---- file-name patterns (sbatch(1)/srun(1)) -------------------------------------------

def test_batch_output_pattern_percent_J_is_the_job_id(cluster: Cluster) -> None:
    """dask-jobqueue submits with -o dask-worker-%J.out."""
    job = cluster.sbatch("-J", "pat", "-o", "dask-worker-%J.out", "-e", "err-%x-%5j-%s.log",
                         "--wrap", "echo out; echo err >&2")
    assert cluster.wait_state(job, "COMPLETED") == "COMPLETED"
    assert (cluster.workdir / f"dask-worker-{job}.out").read_text() == "out\n"
    assert (cluster.workdir / f"err-pat-{job:05d}-batch.log").read_text() == "err\n"


def test_step_output_pattern(cluster: Cluster) -> None:
    job = cluster.sbatch("-n2", "--wrap", "srun -o 'step-%J-%t.out' sh -c 'echo $SLURM_PROCID'")
    assert cluster.wait_state(job, "COMPLETED") == "COMPLETED"
    for task in (0, 1):
        out = cluster.workdir / f"step-{job}.0-{task}.out"
        assert out.read_text() == f"{task}\n"


# ---- --begin: every form of Slurm's time parser is accepted ----------------------------

@pytest.mark.parametrize("when", ["now+1hour", "now+2days", "tomorrow", "teatime tomorrow",
                                  "12/31", "2099-12-31T23:59", "11:00 PM 12/30/99",
                                  "12/30/99-23:00"])
def test_begin_forms_pend(cluster: Cluster, when: str) -> None:
    job = cluster.sbatch("-J", "later", f"--begin={when}", "--wrap", "true")
    try:
        time.sleep(0.3)
        assert cluster.state(job) == "PENDING"
    finally:
        cluster.run("scancel", str(job))


def test_begin_error_lines(cluster: Cluster) -> None:
    r = cluster.run("sbatch", "--begin=whenever", "--wrap", "true")
    assert (r.returncode, r.stderr) == (
        255, "Invalid time specification (pos=0): whenever\n"
             "sbatch: error: Invalid --begin specification\n")
