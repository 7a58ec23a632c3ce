"""PrologSlurmctld and EpilogSlurmctld through the real commands: the controller runs them on
its machine with Slurm's environment; a batch job's launch waits for the prolog; a failing
prolog requeues the batch job (which then runs again), as Slurm does."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster

CONFIG = """\
ClusterName=testcluster
KillWait=2
MinJobAge=600
SchedulerInterval=1
PrologSlurmctld={prolog}
EpilogSlurmctld={epilog}
PrologEpilogTimeout=20
NodeName=node-[1-2] CPUs=4 RealMemory=4000
PartitionName=debug Nodes=node-[1-2] Default=YES MaxTime=INFINITE State=UP
"""

# a line per run; the prolog fails once for a job whose name says so, and holds a job's
# launch while a "slow" flag exists (the job must not run meanwhile)
PROLOG = """#!/bin/sh
echo "$SLURM_SCRIPT_CONTEXT $SLURM_JOB_ID $SLURM_JOB_USER $SLURM_JOB_NODELIST \
$SLURM_JOB_PARTITION $SLURM_JOB_NAME $(id -u)" >> {out}/prolog.log
if [ "$SLURM_JOB_NAME" = failonce ] && [ ! -e {out}/failed-$SLURM_JOB_ID ]; then
    touch {out}/failed-$SLURM_JOB_ID
    echo "no licence for this job" >&2
    exit 2
fi
while [ -e {out}/slow ]; do sleep 0.2; done
exit 0
"""
EPILOG = """#!/bin/sh
echo "$SLURM_SCRIPT_CONTEXT $SLURM_JOB_ID $SLURM_JOB_EXIT_CODE2" >> {out}/epilog.log
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    home = Path(tmp_path_factory.mktemp("ctld"))
    out = home / "runs"
    out.mkdir()
    paths = {}
    for kind, text in (("prolog", PROLOG), ("epilog", EPILOG)):
        p = home / f"{kind}.sh"
        p.write_text(text.format(out=out))
        p.chmod(0o755)
        paths[kind] = p
    c = Cluster(home, CONFIG.format(**paths))
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _lines(c: Cluster, kind: str, job: int) -> list[list[str]]:
    f = c.home / "runs" / f"{kind}.log"
    if not f.exists():
        return []
    return [ln.split() for ln in f.read_text().splitlines() if ln.split()[1:2] == [str(job)]]


def test_both_run_with_slurms_environment(cluster: Cluster) -> None:
    c = cluster
    job = c.sbatch("-J", "plain", "-o", "/dev/null", "--wrap", "exit 3")
    c.wait_state(job, "FAILED", timeout=60)
    c.wait_for(lambda: _lines(c, "epilog", job), timeout=30, what="the epilog")
    (pro,) = _lines(c, "prolog", job)
    assert pro[0] == "prolog_slurmctld" and pro[2] == "root" and pro[4:6] == ["debug", "plain"]
    assert pro[3].startswith("node-")
    assert _lines(c, "epilog", job) == [["epilog_slurmctld", str(job), "3:0"]]


def test_the_launch_waits_for_the_prolog(cluster: Cluster) -> None:
    c = cluster
    flag = c.home / "runs" / "slow"
    flag.touch()
    marker = c.workdir / "ran-slow"
    try:
        job = c.sbatch("-J", "slow", "-o", "/dev/null", "--wrap", f"touch {marker}")
        c.wait_for(lambda: _lines(c, "prolog", job), timeout=30, what="the prolog")
        c.wait_state(job, "RUNNING", timeout=30)
        time.sleep(2)
        assert not marker.exists()  # allocated, not launched while the prolog runs
    finally:
        flag.unlink()
    c.wait_state(job, "COMPLETED", timeout=60)
    assert marker.exists()


def test_a_job_cancelled_while_its_launch_waits_ends_cancelled(cluster: Cluster) -> None:
    c = cluster
    flag = c.home / "runs" / "slow"
    flag.touch()
    try:
        job = c.sbatch("-J", "slow", "-o", "/dev/null", "--wrap", "true")
        c.wait_for(lambda: _lines(c, "prolog", job), timeout=30, what="the prolog")
        c.ok("scancel", str(job))
    finally:
        flag.unlink()
    c.wait_state(job, "CANCELLED", timeout=30)


def test_a_failing_prolog_requeues_the_batch_job(cluster: Cluster) -> None:
    c = cluster
    job = c.sbatch("-J", "failonce", "-o", "/dev/null", "--wrap", "true")
    c.wait_state(job, "COMPLETED", timeout=90)
    assert len(_lines(c, "prolog", job)) == 2  # failed once, then ran again
    show = c.ok("scontrol", "show", "job", str(job))
    assert "Restarts=1" in show, show
    logs = list(c.home.rglob("controller.log"))
    assert logs and "no licence for this job" in logs[0].read_text()  # why, in the log
