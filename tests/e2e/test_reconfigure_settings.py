"""`scontrol reconfigure` re-reads the settings read once at start, not only nodes and
partitions: Prolog/Epilog, PrologSlurmctld and the health check act from the next job or
tick, and stop acting when the file drops them (slurmctld re-reads them all)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, running

BASE = """\
ClusterName=testcluster
MinJobAge=600
SchedulerInterval=1
NodeName=node-[1-2] CPUs=4 RealMemory=4000
PartitionName=debug Nodes=node-[1-2] Default=YES MaxTime=INFINITE State=UP
"""

SCRIPT = """#!/bin/sh
echo "$SLURM_SCRIPT_CONTEXT $SLURM_JOB_ID" >> {log}
exit 0
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory, BASE, "reconf") as c:
        yield c


def _runs(log: Path, job: int) -> set[str]:
    if not log.exists():
        return set()
    return {ln.split()[0] for ln in log.read_text().splitlines() if ln.split()[1:2] == [str(job)]}


def test_prologs_added_by_reconfigure_run_and_removed_ones_do_not(cluster: Cluster) -> None:
    c = cluster
    log = c.home / "scripts.log"
    script = c.home / "script.sh"
    script.write_text(SCRIPT.format(log=log))
    script.chmod(0o755)
    before = c.sbatch("-o", "/dev/null", "--wrap", "true")
    c.wait_state(before, "COMPLETED", timeout=60)
    c.reconfigure(BASE + f"Prolog={script}\nEpilog={script}\nPrologSlurmctld={script}\n"
                 "PrologFlags=Alloc\n")
    job = c.sbatch("-o", "/dev/null", "--wrap", "true")
    c.wait_state(job, "COMPLETED", timeout=60)
    c.wait_for(lambda: _runs(log, job) == {"prolog_slurmctld", "prolog_slurmd", "epilog_slurmd"},
               timeout=30, what=f"the three scripts of job {job}: {_runs(log, job)}")
    assert _runs(log, before) == set()  # the job before the reconfigure ran none
    c.reconfigure(BASE)
    after = c.sbatch("-o", "/dev/null", "--wrap", "true")
    c.wait_state(after, "COMPLETED", timeout=60)
    assert _runs(log, after) == set()
