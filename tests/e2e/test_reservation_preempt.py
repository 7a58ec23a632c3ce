"""Preemption inside an advanced reservation, through the real commands: a preempting-QoS
job of a reservation stops a low-QoS job of the same reservation on its node (requeued or
cancelled per PreemptMode) and runs there, while a low-QoS job running outside the
reservation's nodes is left alone; and a reservation made with OVERLAP on the same node
shares it with the first (sched/reserved.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, running

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

CONFIG = """\
ClusterName=rpre
KillWait=2
MinJobAge=600
SchedulerInterval=1
PreemptType=preempt/qos
PreemptMode=REQUEUE
NodeName=node-[1-2] CPUs=4 RealMemory=4000 Gres=gpu:2
PartitionName=gpu Nodes=node-[1-2] Default=YES MaxTime=INFINITE State=UP
"""

# Its first run waits to be stopped; a rerun (after a requeue) finishes at once.
LOW = """\
#!/bin/bash
echo "start ${{SLURM_RESTART_COUNT:-0}}" >> {marker}
if [ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ]; then exit 0; fi
for i in $(seq 120); do sleep 1; done
"""


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory, CONFIG, "resvpre") as cl:
        cl.ok("sacctmgr", "-i", "add", "qos", "high", "Preempt=normal")
        cl.ok("scontrol", "create", "reservation", "ReservationName=course",
              "StartTime=now", "Duration=60", "Nodes=node-1", "Users=root")
        yield cl


def low_job(c: Cluster, name: str, *args: str) -> tuple[int, Path]:
    marker = c.workdir / f"{name}.marker"
    script = c.workdir / f"{name}.sh"
    script.write_text(LOW.format(marker=marker))
    job = c.sbatch("--qos=normal", "--gres=gpu:2", "-t", "5", "-o", "/dev/null", *args,
                   str(script))
    assert c.wait_state(job, "RUNNING") == "RUNNING"
    c.wait_for(marker.exists, what=f"job {job}'s first run")
    return job, marker


def node_of(c: Cluster, job: int) -> str:
    return c.ok("squeue", "-h", "-j", str(job), "-o", "%N").strip()


def cleanup(c: Cluster) -> None:
    c.run("scancel", "-u", "root")
    c.wait_for(lambda: not c.squeue_ids(), timeout=60, what="an empty queue")


def test_a_reservations_job_requeues_a_lower_one_there_only(c: Cluster) -> None:
    try:
        outside, _ = low_job(c, "outside")  # node-1 is the reservation's: node-2
        assert node_of(c, outside) == "node-2"
        inside, marker = low_job(c, "inside", "--reservation=course")
        assert node_of(c, inside) == "node-1"
        high = c.sbatch("--qos=high", "--reservation=course", "--gres=gpu:2", "-t", "5",
                        "-o", "/dev/null", "--wrap", "sleep 3")
        c.wait_state(high, {"RUNNING", "COMPLETED"}, timeout=60)
        assert c.ok("sacct", "-j", str(high), "-X", "-n", "-P", "-o", "NodeList").strip() \
            == "node-1"
        assert c.restarts(inside) == 1
        # the job outside the reservation was no victim
        assert c.state(outside) == "RUNNING" and c.restarts(outside) == 0
        assert c.wait_state(high, "COMPLETED", timeout=60) == "COMPLETED"
        # requeued, it reruns in its reservation once the preemptor is done
        assert c.wait_state(inside, "COMPLETED", timeout=60) == "COMPLETED"
        assert marker.read_text().splitlines() == ["start 0", "start 1"]
        assert c.state(outside) == "RUNNING"
    finally:
        cleanup(c)


def test_cancel_mode_in_a_reservation_ends_the_victim_preempted(c: Cluster) -> None:
    c.ok("sacctmgr", "-i", "modify", "qos", "normal", "set", "PreemptMode=cancel")
    try:
        inside, _ = low_job(c, "cancelled", "--reservation=course")
        high = c.sbatch("--qos=high", "--reservation=course", "--gres=gpu:2", "-t", "5",
                        "-o", "/dev/null", "--wrap", "sleep 1")
        assert c.wait_state(inside, "PREEMPTED", timeout=60) == "PREEMPTED"
        assert c.wait_state(high, "COMPLETED", timeout=60) == "COMPLETED"
    finally:
        c.ok("sacctmgr", "-i", "modify", "qos", "normal", "set", "PreemptMode=cluster")
        cleanup(c)


def test_an_overlapping_reservation_shares_the_node(c: Cluster) -> None:
    c.ok("scontrol", "create", "reservation", "ReservationName=course2", "StartTime=now",
         "Duration=60", "Nodes=node-1", "Users=root", "Flags=OVERLAP")
    try:
        jobs = [c.sbatch(f"--reservation={r}", "--gres=gpu:1", "-t", "5", "-o", "/dev/null",
                         "--wrap", "sleep 30") for r in ("course", "course2")]
        for job in jobs:
            assert c.wait_state(job, "RUNNING", timeout=30) == "RUNNING"
            assert node_of(c, job) == "node-1"
    finally:
        cleanup(c)
        c.ok("scontrol", "delete", "ReservationName=course2")


def test_suspend_mode_in_a_reservation_lends_the_node(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    config = CONFIG.replace("ClusterName=rpre", "ClusterName=rsusp").replace(
        "PreemptMode=REQUEUE", "PreemptMode=SUSPEND,GANG")
    with running(tmp_path_factory, config, "resvsusp") as s:
        s.ok("sacctmgr", "-i", "add", "qos", "high", "Preempt=normal")
        s.ok("scontrol", "create", "reservation", "ReservationName=course", "StartTime=now",
             "Duration=60", "Nodes=node-1", "Users=root")
        inside, _ = low_job(s, "suspended", "--reservation=course")
        high = s.sbatch("--qos=high", "--reservation=course", "--gres=gpu:2", "-t", "5",
                        "-o", "/dev/null", "--wrap", "sleep 8")
        s.wait_for(lambda: s.ok("squeue", "-h", "-j", str(inside), "-o", "%t").strip() == "S",
                   what="the victim suspended")
        assert node_of(s, high) == "node-1"
        assert s.wait_state(high, "COMPLETED", timeout=60) == "COMPLETED"
        # resumed after its preemptor, on its node
        assert s.wait_state(inside, "RUNNING", timeout=30) == "RUNNING"
        assert node_of(s, inside) == "node-1"
        s.run("scancel", str(inside))
