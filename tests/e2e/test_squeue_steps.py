"""End-to-end: `squeue -s/--steps` with -t, -o, -O, -j, -u, -p and step lists, on a batch
job running two steps, as Slurm 22.05's squeue lists them (and Slurm's test suite asks)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def running(cluster: Cluster) -> Iterator[int]:
    """A batch job with steps 0 and 1 running (and its batch step)."""
    script = cluster.workdir / "two_steps.sh"
    script.write_text("#!/bin/bash\n"
                      "srun --overlap -n1 sleep 120 &\n"
                      "srun --overlap -n1 sleep 120 &\n"
                      "wait\n")
    jid = cluster.sbatch("-n2", "-J", "twosteps", "-o", "/dev/null", str(script))
    try:
        cluster.wait_for(lambda: len(re.findall(rf"^ *{jid}\.[01] ", cluster.ok(
            "squeue", "-s", "-h", "-j", str(jid)), re.M)) == 2,
            timeout=60, what="two running steps")
        yield jid
    finally:
        cluster.run("scancel", str(jid))


def test_slurm_suite_form_state_format_job(cluster: Cluster, running: int) -> None:
    # test_batch_multiple_concurrent_steps' very command line
    out = cluster.ok("squeue", "--steps", "--state=RUNNING", "--format=%i", "--noheader",
                     "--job", str(running))
    assert out == f"{running}.0\n{running}.1\n{running}.batch\n"
    # Slurm 22.05 checks -t's states but lists the running steps whatever they say
    assert cluster.ok("squeue", "-s", "-t", "PD", "-h", "-o", "%i", "-j", str(running)) == out
    r = cluster.run("squeue", "-s", "-t", "BOGUS")
    assert r.returncode == 1 and "squeue: error: Invalid job state specified: BOGUS" in r.stderr


def test_format_letters_and_header(cluster: Cluster, running: int) -> None:
    out = cluster.ok("squeue", "-s", f"{running}.1", "-o", "%.12i|%A|%u|%P|%l|%j|%N")
    header, line = out.splitlines()
    assert header == "      STEPID|TASKS|USER|PARTITION|TIME_LIMIT|NAME|NODELIST"
    assert re.fullmatch(rf" +{running}\.1\|1\|root\|debug\|UNLIMITED\|sleep\|node-\d", line), line
    r = cluster.run("squeue", "-s", "-h", "-o", "%i %Z", "-j", str(running))
    assert r.returncode == 0
    assert "squeue: error: Invalid job step format specification: Z" in r.stderr
    assert f"{running}.0 %Z\n" in r.stdout


def test_long_format_fields(cluster: Cluster, running: int) -> None:
    out = cluster.ok("squeue", "-s", "-O", "stepid:14,jobid:8,numtasks:4,stepstate",
                     "-j", str(running))
    lines = out.splitlines()
    assert lines[0].rstrip() == "STEPID        JOB_ID  TASKSTATE"  # TASKS cut to 4
    assert lines[1].rstrip() == f"{running}.0".ljust(14) + f"{running}".ljust(8) + "1   RUNNING"


def test_step_lists_and_filters(cluster: Cluster, running: int) -> None:
    jid = str(running)
    assert cluster.ok("squeue", f"--steps={jid}.1,{jid}.batch", "-h", "-o", "%i") == \
        f"{jid}.1\n{jid}.batch\n"
    assert cluster.ok("squeue", "-h", "-o", "%i", "-s", f"{jid}.0") == f"{jid}.0\n"
    assert cluster.ok("squeue", "-s", "-h", "-o", "%i", "-u", "root", "-p", "debug",
                      "-j", jid).splitlines() == [f"{jid}.0", f"{jid}.1", f"{jid}.batch"]
    assert cluster.ok("squeue", "-s", "-h", "-u", "nobody", "-j", jid) == ""
    # another partition, an unknown job: only the header
    assert cluster.ok("squeue", "-s", "-p", "short", "-o", "%i") == "STEPID\n"
    assert cluster.ok("squeue", "-s", "-j", "999999", "-o", "%i") == "STEPID\n"
    r = cluster.run("squeue", "-s", jid)
    assert (r.returncode, r.stderr) == (1, f"squeue: error: Invalid job_step id: {jid}.??\n")
