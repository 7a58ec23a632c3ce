"""Snakemake with its Slurm executor plugin, unchanged, against a real Corral cluster.

`snakemake --executor slurm` submits each rule's job with `sbatch` (name: the run's UUID,
comment: the rule, `-p`/`-t`/`--mem` from the rule's resources), polls
`sacct -X --parsable2 --clusters all --noheader --format=JobIdRaw,State --starttime …
--endtime now --name UUID` (or, asked to, `squeue --format='%i|%T' --states=all --noheader
--name UUID`), and inside each job runs the rule through `srun` (the slurm-jobstep plugin).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster

pytest.importorskip("snakemake", reason="snakemake is not installed")
pytest.importorskip("snakemake_executor_plugin_slurm",
                    reason="snakemake-executor-plugin-slurm is not installed")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SNAKEMAKE = os.path.join(os.path.dirname(sys.executable), "snakemake")

SNAKEFILE = """\
rule all:
    input: "total.txt"

rule square:
    output: "sq/{n}.txt"
    shell: "echo $(( {wildcards.n} * {wildcards.n} )) $SLURM_JOB_ID $SLURM_JOB_PARTITION > {output}"

rule total:
    input: expand("sq/{n}.txt", n=[1, 2, 3])
    output: "total.txt"
    shell: "awk '{{s += $1}} END {{print s}}' {input} > {output}; echo $SLURM_JOB_ID >> {output}"
"""


@pytest.fixture
def workflow_dir(cluster: Cluster, tmp_path: Path) -> Path:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    return tmp_path


@pytest.fixture(autouse=True)
def no_job_left(cluster: Cluster) -> Iterator[None]:
    yield
    cluster.run("scancel", "--me")


def _snakemake(cluster: Cluster, workdir: Path, *extra: str,
               timeout: float) -> subprocess.CompletedProcess[str]:
    return cluster.run(
        SNAKEMAKE, "--executor", "slurm", "--jobs", "3", "--directory", str(workdir),
        "--snakefile", str(workdir / "Snakefile"),
        "--default-resources", "slurm_partition=debug", "runtime=5", "mem_mb=500",
        "--latency-wait", "5", "--slurm-init-seconds-before-status-checks", "1",
        *extra, cwd=workdir, timeout=timeout)


def _check_workflow_ran_on_corral(cluster: Cluster, workdir: Path) -> None:
    squares = {}
    for n in (1, 2, 3):
        value, job_id, partition = (workdir / "sq" / f"{n}.txt").read_text().split()
        assert (int(value), partition) == (n * n, "debug")
        squares[n] = job_id
    total, total_job = (workdir / "total.txt").read_text().split()
    assert total == "14"
    job_ids = [*squares.values(), total_job]
    assert len(set(job_ids)) == 4 and all(j.isdigit() for j in job_ids), job_ids
    rows = cluster.ok("sacct", "-X", "-n", "-P", "-j", ",".join(job_ids), "-o",
                      "JobID,JobName,Partition,Timelimit,ReqMem,Comment,State")
    by_id = {r.split("|")[0]: r.split("|")[1:] for r in rows.splitlines()}
    run_names = {fields[0] for fields in by_id.values()}
    assert len(run_names) == 1, rows  # every job is named after the run's UUID
    for n, jid in squares.items():
        assert by_id[jid][1:] == ["debug", "00:05:00", "500M", f"rule_square_wildcards_{n}",
                                  "COMPLETED"], rows
    assert by_id[total_job][1:] == ["debug", "00:05:00", "500M", "rule_total", "COMPLETED"], rows
    # Inside each job, the rule ran as an srun step.
    for jid in job_ids:
        steps = cluster.ok("sacct", "-n", "-P", "-j", jid, "-o", "JobID,State").split()
        assert f"{jid}.batch|COMPLETED" in steps and f"{jid}.0|COMPLETED" in steps, steps


def test_two_rule_workflow_with_sacct_status(cluster: Cluster, workflow_dir: Path) -> None:
    r = _snakemake(cluster, workflow_dir, timeout=150)
    assert r.returncode == 0, r.stdout + r.stderr
    _check_workflow_ran_on_corral(cluster, workflow_dir)


def test_two_rule_workflow_with_squeue_status(cluster: Cluster, workflow_dir: Path) -> None:
    r = _snakemake(cluster, workflow_dir, "--slurm-status-command", "squeue", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    _check_workflow_ran_on_corral(cluster, workflow_dir)
