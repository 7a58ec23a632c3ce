"""simple-slurm, unchanged, against a real Corral cluster.

simple-slurm builds a script from its `Slurm(...)` arguments, pipes it to `sbatch << EOF`
through /bin/sh, and wraps `squeue --me -o <CSV>` and `scancel` for its helpers.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Iterator

import pytest
from simple_slurm import Slurm

from tests.e2e.cluster import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


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
        cluster.run("scancel", "--me")


def test_array_job_built_with_the_api(cluster: Cluster, user_env: None) -> None:
    slurm = Slurm(
        array=range(3, 6),
        job_name="ss-array",
        cpus_per_task=2,
        mem="500M",
        time=datetime.timedelta(minutes=2),
        output=f"ss-{Slurm.JOB_ARRAY_MASTER_ID}_{Slurm.JOB_ARRAY_ID}.out",
    )
    script = slurm.script()
    assert "#SBATCH --array               3-5\n" in script, script
    assert "#SBATCH --time                0-00:02:00\n" in script, script
    job_id = slurm.sbatch(
        f"echo task {Slurm.SLURM_ARRAY_TASK_ID} of {Slurm.SLURM_ARRAY_JOB_ID}"
        f" name {Slurm.SLURM_JOB_NAME} cpus {Slurm.SLURM_CPUS_PER_TASK}",
        verbose=False)
    for task in (3, 4, 5):
        cluster.wait_state(f"{job_id}_{task}", "COMPLETED", timeout=30)
        text = (cluster.workdir / f"ss-{job_id}_{task}.out").read_text()
        assert text == f"task {task} of {job_id} name ss-array cpus 2\n", text
    rows = cluster.ok("sacct", "-j", str(job_id), "-X", "-n", "-P", "-o",
                      "JobID,JobName,AllocCPUS,Timelimit,State")
    assert sorted(rows.splitlines()) == [
        f"{job_id}_{t}|ss-array|2|00:02:00|COMPLETED" for t in (3, 4, 5)], rows


def test_squeue_and_scancel_helpers(cluster: Cluster, user_env: None) -> None:
    slurm = Slurm(job_name="ss-sleeper", time="00:01:00", parsable=True,
                  output=f"ss-{Slurm.JOB_ID}.out")
    job_id = slurm.sbatch("echo started $SLURM_JOB_ID; sleep 300", verbose=False)
    out = cluster.workdir / f"ss-{job_id}.out"
    cluster.wait_for(lambda: out.exists() and out.read_text() == f"started {job_id}\n",
                     timeout=20, what="the job to start")

    # squeue --me -o '"%i","%j","%t",...': simple-slurm reads it as CSV with a header.
    slurm.squeue.update_squeue()
    job = slurm.squeue.jobs[job_id]
    assert (job["NAME"], job["ST"], job["NODES"], job["CPUS"]) == ("ss-sleeper", "R", "1", "1")
    assert job["TIME_LEFT"] in ("1:00", "0:59", "0:58"), job
    assert job["NODELIST(REASON)"].startswith("node-"), job
    assert list(slurm.squeue.get_filtered_jobs("ss-sleeper")) == [job_id]

    # cancel_job (`scancel ID`) and cancel_all (`scancel --me`).
    slurm.scancel.cancel_job(job_id)
    cluster.wait_state(job_id, "CANCELLED", timeout=20)
    many = [Slurm(job_name="ss-many", time="1:00").sbatch("sleep 300", verbose=False)
            for _ in range(2)]
    slurm.scancel.cancel_all()
    for jid in many:
        cluster.wait_state(jid, "CANCELLED", timeout=20)
    slurm.squeue.update_squeue()
    assert slurm.squeue.jobs == {}


def test_signal_job_helper(cluster: Cluster, user_env: None) -> None:
    slurm = Slurm(job_name="ss-signal", time="1:00")
    job_id = slurm.sbatch("sleep 300", verbose=False)
    cluster.wait_state(job_id, "RUNNING", timeout=20)
    # First call: `scancel --signal=TERM ID`. In Slurm a signal other than KILL, without
    # -b/--batch or -f/--full, goes to the job's steps, not to the batch shell: a job
    # made of its batch script alone keeps running.
    slurm.scancel.signal_job(job_id)
    time.sleep(1.5)
    assert cluster.state(job_id) == "RUNNING"
    # Second call for the same job: `scancel --signal=KILL ID` cancels it.
    slurm.scancel.signal_job(job_id)
    cluster.wait_state(job_id, "CANCELLED", timeout=20)
