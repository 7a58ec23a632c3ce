"""End-to-end: the time-limit warning signal (--signal=SIG@SECS, not B:) and a requeue asked
from inside an srun task, the pattern of submitit's checkpointing jobs without submitit.

Each process of the job gets a kill step's signal once: the task gets the warning once
(through its srun, not also directly from the batch step), and the requeue's SIGTERM reaches
srun once (a second SIGTERM within a second would make srun abort its step at once, killing
the task before `scontrol requeue` returned to it).
"""

from __future__ import annotations

import sys

import pytest

from tests.e2e.cluster import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

TASK = """\
import os, signal, subprocess, sys, time
caught = []
def on_usr2(signum, frame):
    caught.append(signum)
    print(f"caught USR2 #{len(caught)}", flush=True)
    if len(caught) > 1:
        return
    subprocess.check_call(["scontrol", "requeue", os.environ["SLURM_JOB_ID"]], timeout=60)
    print("Requeued job " + os.environ["SLURM_JOB_ID"], flush=True)
    time.sleep(5)  # a second USR2 would be caught meanwhile
    sys.exit(1)
def on_term(signum, frame):
    print("Bypassing SIGTERM", flush=True)
signal.signal(signal.SIGUSR2, on_usr2)
signal.signal(signal.SIGTERM, on_term)
restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
print(f"start {restarts}", flush=True)
if restarts:
    sys.exit(0)
for _ in range(100):
    time.sleep(1)
"""


def test_warning_then_requeue_from_an_srun_task(cluster: Cluster) -> None:
    task = cluster.workdir / "requeue_task.py"
    task.write_text(TASK)
    out = cluster.workdir / "requeue.out"
    err = cluster.workdir / "requeue.err"
    log = cluster.workdir / "requeue.log"
    # as submitit: the step's output goes to a file (written by the step, not through srun)
    jid = cluster.sbatch("-t", "1", "--signal=USR2@55", "--requeue", "--open-mode=append",
                         "-o", str(out), "-e", str(err), "--wrap",
                         f"srun --unbuffered -o {log} {sys.executable} -u {task}")
    assert cluster.wait_state(jid, "COMPLETED", timeout=100) == "COMPLETED"
    text = log.read_text()
    # the warning came once, the task's requeue went through and the task saw it return
    assert text.count("caught USR2") == 1, text
    assert f"Requeued job {jid}\n" in text, (text, err.read_text())
    # the job's end and the step's srun both end the step: one SIGTERM all the same
    assert text.count("Bypassing SIGTERM") == 1, text
    assert "start 0\n" in text and "start 1\n" in text, text
    errors = err.read_text()
    assert "job abort in progress" not in errors, errors
    assert f"*** JOB {jid} ON " in errors and " DUE TO JOB REQUEUE ***" in errors, errors
    row = cluster.ok("sacct", "-j", str(jid), "-X", "-n", "-P", "-o", "State")
    assert row == "COMPLETED\n" and cluster.restarts(jid) == 1, row
