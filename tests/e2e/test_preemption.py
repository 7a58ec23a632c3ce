"""End-to-end preemption (docs/POLICY.md "Preemption"): a high-QoS job preempts a low-QoS
one, which gets SIGTERM, is requeued after its grace time and later finishes; the same
with PreemptMode=CANCEL and with a --no-requeue victim (both end PREEMPTED); and
partition-priority preemption between two partitions on the same node."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, running

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

QOS_CONFIG = """\
ClusterName=pre
KillWait=2
MinJobAge=600
SchedulerInterval=1
PreemptType=preempt/qos
PreemptMode=REQUEUE
NodeName=node-1 CPUs=4 RealMemory=4000 Gres=gpu:2
PartitionName=gpu Nodes=node-1 Default=YES MaxTime=INFINITE State=UP
"""

PART_CONFIG = """\
ClusterName=prio
KillWait=2
MinJobAge=600
SchedulerInterval=1
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
NodeName=node-1 CPUs=4 RealMemory=4000 Gres=gpu:2
PartitionName=students Nodes=node-1 Default=YES PriorityTier=1 State=UP
PartitionName=deadline Nodes=node-1 PriorityTier=2 State=UP
"""

# A training job that checkpoints on SIGTERM and goes on (it is killed after the grace
# time); its second run (SLURM_RESTART_COUNT=1) finishes at once.
VICTIM = """\
#!/bin/bash
trap 'echo "TERM $SLURM_RESTART_COUNT" >> {marker}' TERM
echo "start $SLURM_RESTART_COUNT" >> {marker}
if [ "$SLURM_RESTART_COUNT" -gt 0 ]; then exit 0; fi
for i in $(seq 120); do sleep 1; done
"""


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory, QOS_CONFIG, "preempt") as cl:
        cl.ok("sacctmgr", "-i", "add", "qos", "high", "Preempt=normal")
        yield cl


def test_scontrol_shows_the_preemption_settings(c: Cluster) -> None:
    config = c.ok("scontrol", "show", "config")
    assert re.search(r"^PreemptMode\s+= REQUEUE$", config, re.M), config
    assert re.search(r"^PreemptType\s+= preempt/qos$", config, re.M), config


def sacct(c: Cluster, job: int, fields: str) -> str:
    return c.ok("sacct", "-j", str(job), "-X", "-n", "-P", "-o", fields).strip()


def victim(c: Cluster, name: str, *args: str) -> tuple[int, Path]:
    marker = c.workdir / f"{name}.marker"
    script = c.workdir / f"{name}.sh"
    script.write_text(VICTIM.format(marker=marker))
    job = c.sbatch("--qos=normal", "--gres=gpu:2", "-o", "/dev/null", *args, str(script))
    assert c.wait_state(job, "RUNNING") == "RUNNING"
    c.wait_for(lambda: marker.exists(), what="the victim's first run")
    return job, marker


def test_high_qos_requeues_low_qos_after_grace_time(c: Cluster) -> None:
    c.ok("sacctmgr", "-i", "modify", "qos", "normal", "set", "GraceTime=5",
         "PreemptMode=requeue")
    low, marker = victim(c, "requeue")
    t0 = time.monotonic()
    high = c.sbatch("--qos=high", "--gres=gpu:1", "-o", "/dev/null", "--wrap", "sleep 1")
    c.wait_for(lambda: "TERM 0" in marker.read_text(), what="SIGTERM to the victim")
    # the preemptor waits while its victim has its grace time
    assert c.ok("squeue", "-h", "-j", str(high), "-o", "%T %r").split() \
        == ["PENDING", "Resources"]
    assert c.wait_state(high, "COMPLETED", timeout=60) == "COMPLETED"
    assert time.monotonic() - t0 >= 4  # not before the grace time was over
    assert c.wait_state(low, "COMPLETED", timeout=60) == "COMPLETED"
    assert sacct(c, low, "State,Restarts") == "COMPLETED|1"
    # SIGTERM at preemption, then (as Slurm) SIGCONT, SIGTERM, SIGKILL at the grace
    # time's end; the second run finishes
    lines = marker.read_text().splitlines()
    assert lines[:2] == ["start 0", "TERM 0"] and lines[-1] == "start 1", lines
    assert set(lines[2:-1]) <= {"TERM 0"}, lines


def test_cancel_mode_ends_the_victim_preempted(c: Cluster) -> None:
    c.ok("sacctmgr", "-i", "modify", "qos", "normal", "set", "GraceTime=0",
         "PreemptMode=cancel")
    try:
        low, _ = victim(c, "cancel")
        high = c.sbatch("--qos=high", "--gres=gpu:2", "-o", "/dev/null", "--wrap", "sleep 1")
        assert c.wait_state(low, "PREEMPTED", timeout=60) == "PREEMPTED"
        assert c.wait_state(high, "COMPLETED", timeout=60) == "COMPLETED"
    finally:
        c.ok("sacctmgr", "-i", "modify", "qos", "normal", "set", "PreemptMode=cluster")


def test_no_requeue_victim_is_cancelled(c: Cluster) -> None:
    low, _ = victim(c, "norequeue", "--no-requeue")
    high = c.sbatch("--qos=high", "--gres=gpu:2", "-o", "/dev/null", "--wrap", "sleep 1")
    assert c.wait_state(low, "PREEMPTED", timeout=60) == "PREEMPTED"
    assert c.wait_state(high, "COMPLETED", timeout=60) == "COMPLETED"
    assert sacct(c, low, "Restarts") == "0"


def test_policy_guide_preemption_as_written(c: Cluster) -> None:
    """docs/POLICY.md's Preemption block, run as written on this cluster (its slurm.conf
    lines are QOS_CONFIG's), sets what it says; with shorter times, a deadline job then
    requeues a normal one."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "POLICY.md").read_text()
    section = doc.split("## Preemption", 1)[1]
    conf = section.split("```\n", 1)[1].split("```", 1)[0]
    assert all(line in QOS_CONFIG.splitlines() for line in conf.splitlines()), conf
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    c.ok("sacctmgr", "-i", "add", "qos", "deadline")  # made in the guide's section 2
    for line in block.splitlines():
        words = line.split()
        assert words[0] == "sacctmgr", line
        c.ok(*words)
    rows = c.ok("sacctmgr", "-nP", "show", "qos",
                "format=name,preempt,gracetime,preemptexempttime").splitlines()
    assert "deadline|normal||" in rows or any(r.startswith("deadline|normal|") for r in rows), rows
    assert "normal||00:02:00|00:10:00" in rows, rows
    c.ok("sacctmgr", "-i", "modify", "qos", "normal", "set", "GraceTime=2",
         "PreemptExemptTime=0")
    low, marker = victim(c, "guide", "--requeue")
    high = c.sbatch("--qos=deadline", "--gres=gpu:2", "-o", "/dev/null", "--wrap", "sleep 1")
    assert c.wait_state(high, "COMPLETED", timeout=60) == "COMPLETED"
    assert c.wait_state(low, "COMPLETED", timeout=60) == "COMPLETED"
    assert sacct(c, low, "State,Restarts") == "COMPLETED|1"
    assert "TERM 0" in marker.read_text()


def test_partition_priority_preemption(tmp_path_factory: pytest.TempPathFactory) -> None:
    with running(tmp_path_factory, PART_CONFIG, "prio") as c:
        low, _ = victim(c, "student")
        high = c.sbatch("-p", "deadline", "--gres=gpu:2", "-o", "/dev/null", "--wrap",
                        "sleep 1")
        assert c.wait_state(low, "PREEMPTED", timeout=60) == "PREEMPTED"
        assert c.wait_state(high, "COMPLETED", timeout=60) == "COMPLETED"
