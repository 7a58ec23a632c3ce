"""End-to-end: scheduling policy on a running cluster — priority ages, partition states."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow

CONFIG = """\
ClusterName=policy
KillWait=2
MinJobAge=600
SchedulerInterval=1
PriorityWeightAge=1000
PriorityMaxAge=1
PriorityWeightPartition=1000
NodeName=node-[1-2] CPUs=4 RealMemory=8000
PartitionName=debug Nodes=node-[1-2] Default=YES State=UP
PartitionName=side Nodes=node-[1-2] State=UP
"""


@pytest.fixture()
def policy_cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "home", CONFIG)
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _priority(c: Cluster, jid: int) -> int:
    return int(c.ok("squeue", "-h", "-j", str(jid), "-o", "%Q").strip())


def test_priority_rises_with_age_and_scontrol_shows_it(policy_cluster: Cluster) -> None:
    c = policy_cluster
    blocker = c.sbatch("-N2", "-n8", "--wrap", "sleep 60")
    c.wait_state(blocker, "RUNNING")
    waiting = c.sbatch("-N2", "-n8", "--wrap", "true")
    c.wait_for(lambda: c.ok("squeue", "-h", "-j", str(waiting), "-o", "%r").strip() == "Resources",
               what="waiting on resources")
    first = _priority(c, waiting)
    time.sleep(4)
    later = _priority(c, waiting)
    assert later >= first + 40, (first, later)  # 1000 × 4 s / 60 s = +66, less pass lag
    shown = c.ok("scontrol", "show", "job", str(waiting))
    assert any(f"Priority={p} " in shown for p in range(later, later + 100)), shown
    c.ok("scancel", str(blocker), str(waiting))


def test_partition_states_on_restart(policy_cluster: Cluster) -> None:
    c = policy_cluster
    queued = c.sbatch("-p", "side", "-H", "--wrap", "true")
    down_queued = c.sbatch("-H", "--wrap", "true")
    os.kill(int((c.home / "controller.pid").read_text()), signal.SIGKILL)
    time.sleep(0.5)
    conf = c.home / "slurm.conf"
    text = conf.read_text()
    text = text.replace("PartitionName=side Nodes=node-[1-2] State=UP",
                        "PartitionName=side Nodes=node-[1-2] State=DRAIN")
    text = text.replace("PartitionName=debug Nodes=node-[1-2] Default=YES State=UP",
                        "PartitionName=debug Nodes=node-[1-2] Default=YES State=DOWN")
    assert "State=DRAIN" in text and "State=DOWN" in text
    conf.write_text(text)
    c.ok("corral", "up", timeout=60)
    # DRAIN: new jobs refused with Slurm's message and exit code
    r = c.run("sbatch", "-p", "side", "--wrap", "true")
    assert r.returncode == 1
    assert r.stderr == ("sbatch: error: Batch job submission failed: "
                        "Required partition not available (inactive or drain)\n")
    # ... and the jobs already queued there still run
    c.ok("scontrol", "release", str(queued))
    c.wait_state(queued, "COMPLETED")
    # DOWN: new jobs are queued, none starts
    new = c.sbatch("--wrap", "true")
    c.ok("scontrol", "release", str(down_queued))
    time.sleep(2)
    out = c.ok("squeue", "-h", "-j", f"{new},{down_queued}", "-o", "%T %r")
    assert out.splitlines() == ["PENDING PartitionDown"] * 2
    c.ok("scancel", str(new), str(down_queued))


def test_unbounded_requests_are_refused_cheaply(policy_cluster: Cluster) -> None:
    c = policy_cluster
    t0 = time.monotonic()
    r = c.run("scancel", "1_[0-2147483646]", timeout=20)
    assert time.monotonic() - t0 < 10 and "Traceback" not in r.stderr
    r = c.run("scontrol", "hold", "1_[0-2147483646]", timeout=20)
    assert r.returncode != 0 and "Invalid job id specified" in r.stderr, r.stderr
    script = c.workdir / "big.sh"
    script.write_text("#!/bin/sh\n" + "#" * (4 * 1024 * 1024) + "\ntrue\n")
    r = c.run("sbatch", str(script), timeout=60)
    assert r.returncode == 1
    assert r.stderr.endswith("Batch job submission failed: "
                             "Pathname of a file, directory or other parameter too long\n"), r.stderr
    jid = c.sbatch("--wrap", "true")  # the controller is still fine
    c.wait_state(jid, "COMPLETED")
