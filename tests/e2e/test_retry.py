"""Availability: Slurm commands ride out a controller restart instead of failing.

The controller is killed; commands issued while it is down wait (one notice on
stderr), and go through once it is back: a submission made in that window runs once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow

NOTICE = "sbatch: error: Slurm controller not responding, sleeping and retrying.\n"


@pytest.fixture()
def own_cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "home")
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _kill_controller(c: Cluster) -> None:
    pid = int((c.home / "controller.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        stat = Path(f"/proc/{pid}/stat").read_text() if os.path.exists(f"/proc/{pid}") else ""
        if " Z " in stat:
            break
        time.sleep(0.05)


def test_sbatch_during_a_restart_is_submitted_once_and_runs(own_cluster: Cluster) -> None:
    c = own_cluster
    marker = c.workdir / "ran.log"
    _kill_controller(c)
    env = dict(c.env, CORRAL_MESSAGE_TIMEOUT="60")
    sub = subprocess.Popen(["sbatch", "--parsable", "-J", "patient", "--wrap",
                            f"echo run >> {marker}"], cwd=str(c.workdir), env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2.0)
        assert sub.poll() is None, "sbatch gave up while the controller was down"
        c.ok("corral", "up", timeout=60)
        out, err = sub.communicate(timeout=60)
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait()
    assert sub.returncode == 0, err
    assert err == NOTICE
    job = int(out.strip())
    assert c.wait_state(job, "COMPLETED", timeout=30) == "COMPLETED"
    assert marker.read_text() == "run\n"
    assert c.squeue_ids("-t", "all", "-n", "patient") in ([], [str(job)])
    r = c.run("sacct", "-n", "-X", "-P", "--name=patient", "-o", "JobID")
    assert r.stdout.split() == [str(job)]


def test_commands_give_up_after_message_timeout(own_cluster: Cluster) -> None:
    c = own_cluster
    _kill_controller(c)
    start = time.monotonic()
    r = c.run("sbatch", "--wrap", "true", env={"CORRAL_MESSAGE_TIMEOUT": "1"})
    assert 0.9 < time.monotonic() - start < 10
    assert (r.returncode, r.stderr) == (1, NOTICE + (
        "sbatch: error: Batch job submission failed: Unable to contact slurm controller "
        "(connect failure)\n"))
    r = c.run("squeue", env={"CORRAL_MESSAGE_TIMEOUT": "1"})
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("squeue: error: Slurm controller not responding")
    c.ok("corral", "up", timeout=60)
    assert c.run("squeue").returncode == 0
