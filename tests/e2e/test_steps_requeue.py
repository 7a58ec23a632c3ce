"""End-to-end: a job whose srun step outlives its batch step (requeue, cancel) stays
COMPLETING (squeue CG) until the step is gone, as Slurm's does; a requeued job's new run
numbers its steps from 0 again (Slurm resets next_step_id), and the old step's processes
are gone before the new run starts.

The batch script kills its own srun at once when the job is killed, and the step's task
ignores SIGTERM, so the batch step ends within a moment while the srun step lives until
KillWait's SIGKILL: the window in which the job must not be requeued (nor its nodes given
away) yet."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.e2e.cluster import Cluster, running

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

KILL_WAIT = 8

CONFIG = f"""\
ClusterName=requeuesteps
KillWait={KILL_WAIT}
MinJobAge=600
SchedulerInterval=1
NodeName=node-1 CPUs=4 RealMemory=8000
PartitionName=debug Nodes=node-1 Default=YES MaxTime=INFINITE State=UP
"""

SCRIPT = """\
#!/bin/bash
srun bash -c 'trap "" TERM; exec sleep 300${SLURM_RESTART_COUNT:-0}.$SLURM_JOB_ID' &
pid=$!
trap 'kill -9 $pid; exit 0' TERM
wait
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory, CONFIG) as c:
        yield c


def alive(marker: str) -> bool:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return any(line.split()[:2] == ["sleep", marker] for line in out.splitlines()
               if line.strip())


def code(c: Cluster, jid: int) -> str:
    return c.ok("squeue", "-h", "-j", str(jid), "-o", "%t").strip()


def step_ids(c: Cluster, jid: int) -> list[str]:
    out = c.ok("squeue", "-s", "-h", "-j", str(jid))
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def test_requeue_waits_for_the_step_and_the_new_run_starts_at_step_0(cluster: Cluster) -> None:
    script = cluster.workdir / "requeue_steps.sh"
    script.write_text(SCRIPT)
    jid = cluster.sbatch("--requeue", "-o", "requeue-steps-%j.out", str(script))
    old, new = f"3000.{jid}", f"3001.{jid}"
    cluster.wait_for(lambda: alive(old) and f"{jid}.0" in step_ids(cluster, jid),
                     timeout=30, what="the first run's step")
    cluster.ok("scontrol", "requeue", str(jid))
    seen: list[tuple[float, str, bool]] = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60 and not alive(new):
        seen.append((time.monotonic() - t0, code(cluster, jid), alive(old)))
    assert alive(new), seen
    # CG while the old step lives, well after the batch step went (it goes at once) ...
    assert any(st == "CG" and old_alive and t > KILL_WAIT / 2 for t, st, old_alive in seen), seen
    # ... never pending or running again before it is gone; pending before the new run
    assert not any(st in ("PD", "R") and old_alive for _, st, old_alive in seen), seen
    assert "PD" in [st for _, st, _ in seen], seen
    assert not alive(old)
    cluster.wait_for(lambda: f"{jid}.0" in step_ids(cluster, jid), timeout=20,
                     what="the new run's step in squeue -s")
    assert f"{jid}.1" not in step_ids(cluster, jid)
    rows = cluster.ok("sacct", "-j", str(jid), "-n", "-P", "-o", "JobID,State").split()
    assert f"{jid}.0|RUNNING" in rows and not any(r.startswith(f"{jid}.1|") for r in rows), rows
    assert cluster.restarts(jid) == 1

    # scancel: sacct says CANCELLED at once, as Slurm records it (issue 18), while squeue
    # shows CG until the step is gone; the job leaves squeue only after that
    cluster.ok("scancel", str(jid))
    seen = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60:
        st = code(cluster, jid)
        seen.append((time.monotonic() - t0, st, alive(new)))
        if st in ("", "CA"):
            break
    assert seen[-1][1] in ("", "CA"), seen
    assert not alive(new)
    assert any(st == "CG" and new_alive and t > KILL_WAIT / 2
               for t, st, new_alive in seen), seen
    assert not any(st in ("", "CA") and new_alive for _, st, new_alive in seen), seen
    assert cluster.state(jid) == "CANCELLED"
