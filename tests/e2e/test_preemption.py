"""End-to-end preemption (docs/POLICY.md "Preemption"): a high-QoS job preempts a low-QoS
one, which gets SIGTERM, is requeued after its grace time and later finishes; the same
with PreemptMode=CANCEL and with a --no-requeue victim (both end PREEMPTED);
partition-priority preemption between two partitions on the same node; and
PreemptMode=SUSPEND,GANG: the victim is suspended (its processes stopped), its GPUs lent to
the preemptor, and it resumes and completes after it."""

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

SUSPEND_CONFIG = QOS_CONFIG.replace("ClusterName=pre", "ClusterName=susp").replace(
    "PreemptMode=REQUEUE", "PreemptMode=SUSPEND,GANG")

# A job whose output grows while it runs (and only then): one line every 0.2 s, 15 s
# of work in all
COUNTER = """\
#!/bin/bash
for i in $(seq 75); do echo "$i $CUDA_VISIBLE_DEVICES" >> {out}; sleep 0.2; done
"""

# A training job that checkpoints on SIGTERM and goes on (it is killed after the grace
# time); its second run (SLURM_RESTART_COUNT=1) finishes at once.
VICTIM = """\
#!/bin/bash
trap 'echo "TERM ${{SLURM_RESTART_COUNT:-0}}" >> {marker}' TERM
echo "start ${{SLURM_RESTART_COUNT:-0}}" >> {marker}
if [ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ]; then exit 0; fi
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
    # the partition sets none: it shows the cluster's mode, as Slurm's scontrol does
    assert "OverTimeLimit=NONE PreemptMode=REQUEUE" in c.ok("scontrol", "show", "partition")


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
    assert sacct(c, low, "State") == "COMPLETED" and c.restarts(low) == 1
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
    assert c.restarts(low) == 0


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
    assert sacct(c, low, "State") == "COMPLETED" and c.restarts(low) == 1
    assert "TERM 0" in marker.read_text()


def test_partition_priority_preemption(tmp_path_factory: pytest.TempPathFactory) -> None:
    with running(tmp_path_factory, PART_CONFIG, "prio") as c:
        low, _ = victim(c, "student")
        high = c.sbatch("-p", "deadline", "--gres=gpu:2", "-o", "/dev/null", "--wrap",
                        "sleep 1")
        assert c.wait_state(low, "PREEMPTED", timeout=60) == "PREEMPTED"
        assert c.wait_state(high, "COMPLETED", timeout=60) == "COMPLETED"


def test_suspend_gang_lends_the_gpus_and_resumes(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    with running(tmp_path_factory, SUSPEND_CONFIG, "suspend") as c:
        c.ok("sacctmgr", "-i", "add", "qos", "high", "Preempt=normal")
        config = c.ok("scontrol", "show", "config")
        assert re.search(r"^PreemptMode\s+= GANG,SUSPEND$", config, re.M), config
        out = c.workdir / "counter.out"
        script = c.workdir / "counter.sh"
        script.write_text(COUNTER.format(out=out))

        def lines() -> list[str]:
            return out.read_text().splitlines() if out.exists() else []

        low = c.sbatch("--qos=normal", "--gres=gpu:2", "-t", "5", "-o", "/dev/null",
                       str(script))
        c.wait_for(lambda: len(lines()) >= 3, what="the victim's output")
        gpus_file = c.workdir / "preemptor.gpus"
        high = c.sbatch("--qos=high", "--gres=gpu:2", "-o", "/dev/null", "--wrap",
                        f"echo $CUDA_VISIBLE_DEVICES > {gpus_file}; sleep 10")
        # suspended, and the preemptor runs at once on its GPUs (the node has only those)
        c.wait_for(lambda: c.ok("squeue", "-h", "-j", str(low), "-o", "%t").strip() == "S",
                   what="the victim suspended")
        # its processes are stopped: the output stops growing
        time.sleep(0.5)  # a line being written when the freeze came
        frozen = len(lines())
        time.sleep(2)
        assert len(lines()) == frozen
        assert c.state(high) == "RUNNING"  # (all of this while the preemptor runs)
        assert sacct(c, low, "State") == "SUSPENDED"
        third = c.sbatch("--qos=normal", "--gres=gpu:1", "-o", "/dev/null", "--wrap", "true")
        c.wait_for(lambda: gpus_file.exists(), what="the preemptor's start")
        assert c.state(low) == "SUSPENDED" and c.state(third) == "PENDING"
        assert c.wait_state(high, "COMPLETED", timeout=60) == "COMPLETED"
        # resumed on the same GPUs when the preemptor ended; it completes
        c.wait_for(lambda: len(lines()) > frozen, what="the victim's output growing again")
        assert c.state(third) == "PENDING"  # the GPUs are the victim's again
        assert c.wait_state(low, "COMPLETED", timeout=60) == "COMPLETED"
        assert c.wait_state(third, "COMPLETED", timeout=60) == "COMPLETED"
        got = lines()
        assert [int(x.split()[0]) for x in got] == list(range(1, 76))  # no run lost
        assert {x.split(" ", 1)[1] for x in got} == {gpus_file.read_text().strip()}
