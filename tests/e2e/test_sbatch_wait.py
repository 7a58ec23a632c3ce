"""sbatch --wait through the real command: it follows the job on the controller's event
stream (polling for an array) and returns the job's exit code, as Slurm's does."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.e2e.cluster import Cluster, job_id_from

pytestmark = pytest.mark.slow


def test_wait_returns_the_exit_code_of_the_job(cluster: Cluster) -> None:
    r = cluster.run("sbatch", "--wait", "--wrap", "sleep 1; exit 3", timeout=60)
    assert r.returncode == 3, r.stderr
    assert r.stdout.startswith("Submitted batch job ") and r.stderr == ""
    job = job_id_from(r.stdout)
    assert cluster.state(job) == "FAILED"  # it returned once the job had ended
    r = cluster.run("sbatch", "-W", "--parsable", "--wrap", "true", timeout=60)
    assert r.returncode == 0 and r.stdout.strip().isdigit(), r.stderr


def test_wait_on_an_array_is_the_largest_exit_code(cluster: Cluster) -> None:
    r = cluster.run("sbatch", "--wait", "--array=1-3", "--wrap", "exit $SLURM_ARRAY_TASK_ID",
                    timeout=90)
    assert r.returncode == 3, r.stderr


def test_wait_ends_when_the_job_is_cancelled(cluster: Cluster) -> None:
    proc = subprocess.Popen(["sbatch", "--wait", "--wrap", "sleep 120"], env=cluster.env,
                            cwd=cluster.workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        job = job_id_from(proc.stdout.readline())
        cluster.wait_state(job, "RUNNING", timeout=30)
        time.sleep(1)  # sbatch is waiting on the stream by now
        cluster.ok("scancel", str(job))
        _out, err = proc.communicate(timeout=60)  # it returns once the job has ended
        assert cluster.state(job) == "CANCELLED"
        code = cluster.ok("sacct", "-j", str(job), "-X", "-n", "-P", "-o", "ExitCode").strip()
        status, signal = (int(x) for x in code.split(":"))
        assert proc.returncode == (1 if signal else status), (code, err)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
