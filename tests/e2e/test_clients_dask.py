"""dask-jobqueue's SLURMCluster, unchanged, against a real Corral cluster.

dask-jobqueue writes a batch script, submits it with `sbatch` found on $PATH, reads the job
id from sbatch's answer and stops workers with `scancel`: the calls it makes on Slurm.
Everything stays on loopback: the scheduler and the workers bind to the `lo` interface.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask.array as da
import dask_jobqueue
import distributed
import psutil
import pytest

from tests.e2e.cluster import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

JOB_NAME = "dask-corral"
SCRIPT_JOB_NAME = "dask-script"


def _worker_processes(scheduler_address: str) -> list[Any]:
    """Live processes whose command line names this scheduler: its dask workers."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if scheduler_address in (proc.info.get("cmdline") or []):
            found.append(proc)
    return found


@pytest.fixture
def user_env(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The shell a user would have: CORRAL_HOME and PATH set, in a work directory."""
    monkeypatch.setenv("CORRAL_HOME", cluster.env["CORRAL_HOME"])
    monkeypatch.setenv("PATH", cluster.env["PATH"])
    for name in list(os.environ):
        if name.startswith(("SLURM_", "SBATCH_", "SQUEUE_", "SACCT_", "SINFO_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(cluster.workdir)
    try:
        yield
    finally:
        # Whatever happened in the test, leave no worker job behind.
        for name in (JOB_NAME, SCRIPT_JOB_NAME):
            cluster.run("scancel", "-n", name)


def test_slurmcluster_runs_workers_as_corral_jobs(cluster: Cluster, user_env: None) -> None:
    log_dir = cluster.workdir / "dask-logs"
    dask_cluster = dask_jobqueue.SLURMCluster(
        cores=1,
        memory="1GB",
        processes=1,
        queue="debug",
        walltime="00:05:00",
        job_name=JOB_NAME,
        interface="lo",
        scheduler_options={"dashboard_address": ":0"},
        death_timeout=30,
        log_directory=str(log_dir),
        python=sys.executable,
    )
    job_ids: list[str] = []
    scheduler_address = dask_cluster.scheduler_address
    try:
        assert scheduler_address.startswith("tcp://127.0.0.1:"), scheduler_address
        dask_cluster.scale(jobs=2)
        client = distributed.Client(dask_cluster, timeout=30)
        try:
            client.wait_for_workers(2, timeout=45)
            job_ids = sorted(str(w.job_id) for w in dask_cluster.workers.values())
            assert len(job_ids) == 2 and all(j.isdigit() for j in job_ids), job_ids

            # The workers are Corral jobs, running in the partition dask asked for.
            rows = cluster.ok("squeue", "-h", "-n", JOB_NAME, "-o", "%i %j %P %T %l")
            running = sorted(r.split() for r in rows.splitlines() if r.strip())
            assert running == [[j, JOB_NAME, "debug", "RUNNING", "5:00"] for j in job_ids], rows

            # Each worker process is the batch step of its own job.
            worker_jobs = client.run(lambda: os.environ.get("SLURM_JOB_ID"))
            assert sorted(worker_jobs.values()) == job_ids, worker_jobs

            futures = client.map(lambda x: x * x, range(100))
            total = client.submit(sum, futures).result(timeout=30)
            assert total == sum(x * x for x in range(100))
            arr = da.arange(10_000, chunks=1_000)
            assert int((arr**2).sum().compute(timeout=30)) == sum(x * x for x in range(10_000))
            assert len(client.has_what()) == 2

            dask_cluster.scale(jobs=1)
            cluster.wait_for(lambda: len(cluster.squeue_ids("-n", JOB_NAME)) == 1, timeout=30,
                             what="scale down to one job")
        finally:
            client.close(timeout=10)
    finally:
        dask_cluster.close(timeout=30)

    # dask stops its workers with scancel: Slurm's accounting shows them cancelled.
    for jid in job_ids:
        cluster.wait_state(jid, "CANCELLED", timeout=30)
    rows = cluster.ok("sacct", "-n", "-P", "--name", JOB_NAME, "-o", "JobID,JobName,Partition,State")
    uid = os.getuid()
    expected = []
    for jid in job_ids:
        expected += [f"{jid}|{JOB_NAME}|debug|CANCELLED by {uid}", f"{jid}.batch|batch||CANCELLED"]
    assert sorted(rows.splitlines()) == sorted(expected), rows
    assert cluster.squeue_ids("-n", JOB_NAME) == []
    cluster.wait_for(lambda: not _worker_processes(scheduler_address), timeout=20,
                     what="dask worker processes to exit")
    # The workers logged where the job script's "-e DIR/NAME-%J.err" told them to.
    for jid in job_ids:
        logs = list(log_dir.glob(f"{JOB_NAME}-{jid}.*err"))
        assert len(logs) == 1, sorted(log_dir.iterdir())
        text = logs[0].read_text()
        assert "Registered to" in text and scheduler_address in text, text


def test_generated_job_script_is_accepted_by_sbatch(cluster: Cluster, user_env: None,
                                                   tmp_path: Path) -> None:
    """dask-jobqueue's script, submitted by hand: every #SBATCH line lands where it should."""
    dask_cluster = dask_jobqueue.SLURMCluster(
        cores=2, memory="2GB", processes=1, queue="short", walltime="00:01:00",
        job_name=SCRIPT_JOB_NAME, interface="lo",
        scheduler_options={"dashboard_address": ":0"}, death_timeout=5,
        python=sys.executable,
        job_extra_directives=["--gres=gpu:1", f"-o {SCRIPT_JOB_NAME}-%j.out"],
    )
    try:
        script = tmp_path / "dask-job.sh"
        script.write_text(dask_cluster.job_script())
    finally:
        dask_cluster.close(timeout=30)
    t0 = time.monotonic()
    jid = cluster.sbatch(str(script))
    fields = cluster.ok("squeue", "-h", "-j", str(jid), "-o", "%j|%P|%C|%m|%l|%b")
    # As Slurm 22.05 shows them: --mem=2G is "2G", --gres=gpu:1 is "gres:gpu:1".
    assert fields == f"{SCRIPT_JOB_NAME}|short|2|2G|1:00|gres:gpu:1\n", fields
    # Its scheduler is gone: the worker starts, gives up after --death-timeout and exits 1.
    cluster.wait_state(jid, "FAILED", timeout=40)
    assert time.monotonic() - t0 < 40
    row = cluster.ok("sacct", "-j", str(jid), "-X", "-n", "-P", "-o",
                     "JobName,Partition,AllocCPUS,State,ExitCode")
    assert row == f"{SCRIPT_JOB_NAME}|short|2|FAILED|1:0\n", row
    text = (cluster.workdir / f"{SCRIPT_JOB_NAME}-{jid}.out").read_text()
    assert "Timed out starting worker" in text, text
