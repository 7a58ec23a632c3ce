"""Issue 18, item 6: a cancelled job whose srun task ignores SIGTERM (submitit's do) is
CANCELLED in sacct at once, and completing in squeue until its step is gone; sacct shows
each srun step's command line."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.e2e.cluster import DEFAULT_CONFIG, Cluster, running

pytestmark = pytest.mark.slow

# Slurm's default KillWait: a task that ignores SIGTERM is killed 30 s after it
CONFIG = DEFAULT_CONFIG.replace("KillWait=2", "KillWait=30")


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory, CONFIG) as cl:
        yield cl


def test_cancel_records_cancelled_at_once_and_steps_keep_their_command_line(c: Cluster) -> None:
    ready = c.workdir / "ready"
    script = c.workdir / "stubborn.sh"
    script.write_text("#!/bin/bash\n"
                      f"srun -n1 bash -c 'trap \"\" TERM; touch {ready}; sleep 120'\n")
    jid = c.sbatch(str(script))
    c.wait_for(ready.exists, 30, "the srun task started")
    steps = c.ok("sacct", "-j", str(jid), "-n", "-P", "-o", "JobID,SubmitLine")
    lines = dict(ln.split("|", 1) for ln in steps.splitlines() if ln)
    assert lines.get(f"{jid}.0", "").startswith("srun -n1 bash -c "), steps
    assert "sleep 120" in lines[f"{jid}.0"], steps
    assert lines.get(f"{jid}.batch") == "", steps
    assert lines.get(str(jid), "").startswith("sbatch "), steps

    c.ok("scancel", str(jid))
    t0 = time.monotonic()
    # at once (well inside KillWait): the job's final state is recorded
    c.wait_for(lambda: c.state(jid) == "CANCELLED", 10, "sacct to say CANCELLED")
    assert time.monotonic() - t0 < 20
    listed = c.ok("squeue", "-h", "-j", str(jid), "-o", "%t").split()
    assert listed in ([], ["CG"]), listed
    # and the job leaves the queue once its step is gone (KillWait later at most)
    c.wait_for(lambda: not c.squeue_ids("-j", str(jid)), 90, "the job to leave squeue")
    assert c.state(jid) == "CANCELLED"
