"""End-to-end: Slurm details through the real commands — node features and --constraint,
-n without -N, scontrol update Priority=/StartTime=/Dependency=, sbatch --priority, why a
finished job ended, CPU_IDs, partition access (AllowGroups) and other users' jobs."""

from __future__ import annotations

import grp
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import CAN_CREATE_USERS, Cluster
from tests.e2e.test_users import grant_traverse

pytestmark = pytest.mark.slow

CONFIG = """\
ClusterName=details
KillWait=2
MinJobAge=600
SchedulerInterval=1
NodeName=node-[1-2] CPUs=4 RealMemory=4000 Feature=intel,ib
NodeName=node-[3-4] CPUs=4 RealMemory=4000 Feature=amd
PartitionName=debug Nodes=node-[1-4] Default=YES State=UP
PartitionName=nlp Nodes=node-[1-4] AllowGroups=corral-nlp State=UP
PartitionName=vault Nodes=node-[1-4] Hidden=YES State=UP
"""

ALICE, BOB, GROUP = "corral-d-alice", "corral-d-bob", "corral-nlp"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    # the test users must reach the socket: not under pytest's private tmp dirs
    home = Path(tempfile.mkdtemp(prefix="corral-details-"))
    home.chmod(0o755)
    c = Cluster(home / "c", CONFIG)
    c.start()
    try:
        yield c
    finally:
        c.stop()
        shutil.rmtree(home, ignore_errors=True)


def squeue(c: Cluster, job: int, fmt: str) -> str:
    return c.ok("squeue", "-h", "-j", str(job), "-o", fmt).strip()


def test_constraint_features_and_refusal(cluster: Cluster) -> None:
    c = cluster
    j = c.sbatch("-C", "intel", "-n4", "--wrap", "sleep 30")  # fills one intel node
    c.wait_state(j, "RUNNING")
    assert squeue(c, j, "%N") in ("node-1", "node-2")
    assert squeue(c, j, "%f") == "intel"
    assert "Features=intel " in c.ok("scontrol", "show", "job", str(j))
    both = c.sbatch("-N2", "-C", "[intel|amd]", "--wrap", "sleep 30")
    c.wait_state(both, "RUNNING")
    assert squeue(c, both, "%N") == "node-[3-4]"  # an intel node is full: both amd
    r = c.run("sbatch", "-C", "arm", "--wrap", "true")
    assert r.returncode == 1
    assert r.stderr == ("sbatch: error: Batch job submission failed: "
                        "Invalid feature specification\n")
    sinfo = c.ok("sinfo", "-h", "-N", "-o", "%N %f")
    assert "node-1 intel,ib" in sinfo and "node-3 amd" in sinfo
    c.ok("scancel", str(j), str(both))


def test_ntasks_without_nodes_spreads(cluster: Cluster) -> None:
    c = cluster
    j = c.sbatch("-n6", "--wrap", "sleep 30")  # 6 tasks, 4-CPU nodes: two nodes
    c.wait_state(j, "RUNNING")
    shown = c.ok("scontrol", "show", "job", str(j))
    assert "NumNodes=2 " in shown and "NumCPUs=6 " in shown, shown
    one = c.sbatch("-n2", "--wrap", "sleep 30")  # fits on one node: one node
    c.wait_state(one, "RUNNING")
    assert "NumNodes=1 " in c.ok("scontrol", "show", "job", str(one))
    out = c.ok("salloc", "-n6", "sh", "-c", "echo $SLURM_NNODES; scontrol show job $SLURM_JOB_ID")
    assert out.startswith("2\n") and "NumNodes=2 " in out, out
    r = c.run("sbatch", "-N1", "-n6", "--wrap", "true")  # -N1 still means one node
    assert r.returncode == 1 and "Requested node configuration is not available" in r.stderr
    c.ok("scancel", str(j), str(one))


def test_update_start_time_priority_dependency(cluster: Cluster) -> None:
    c = cluster
    later = c.sbatch("--begin", "now+1hour", "--wrap", "true")
    shown = c.ok("scontrol", "show", "job", str(later))
    start = re.search(r"StartTime=(\S+)", shown)
    assert start is not None and start.group(1) not in ("Unknown", "None"), shown
    assert squeue(c, later, "%r") == "BeginTime"
    c.ok("scontrol", "update", f"JobId={later}", "Priority=7000")
    c.wait_for(lambda: squeue(c, later, "%Q") == "7000", what="priority set")
    first = c.sbatch("--wrap", "sleep 30")
    c.ok("scontrol", "update", f"JobId={later}", f"Dependency=afterok:{first}")
    shown = c.ok("scontrol", "show", "job", str(later))
    assert f"Dependency=afterok:{first}(unfulfilled)" in shown, shown
    c.ok("scontrol", "update", f"JobId={later}", "Dependency=", "StartTime=now")
    c.wait_state(later, "COMPLETED")
    prio = c.sbatch("--priority=9000", "--begin", "now+1hour", "--wrap", "true")
    c.wait_for(lambda: squeue(c, prio, "%Q") == "9000", what="sbatch --priority")
    c.ok("scancel", str(first), str(prio))


def test_reason_after_end_and_cpu_ids(cluster: Cluster) -> None:
    c = cluster
    bad = c.sbatch("--wrap", "exit 3")
    c.wait_state(bad, "FAILED")
    assert " Reason=NonZeroExitCode " in c.ok("scontrol", "show", "job", str(bad))
    good = c.sbatch("--wrap", "true")
    c.wait_state(good, "COMPLETED")
    assert " Reason=None " in c.ok("scontrol", "show", "job", str(good))
    j = c.sbatch("-n2", "-w", "node-4", "--wrap", "sleep 30")
    c.wait_state(j, "RUNNING")
    detail = c.ok("scontrol", "-d", "show", "job", str(j))
    assert re.search(r"Nodes=node-4 CPU_IDs=\d+-\d+ Mem=", detail), detail
    assert "(count)" not in detail
    c.ok("scancel", str(j))


# ---- other users -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def users() -> Iterator[dict[str, pwd.struct_passwd]]:
    if not CAN_CREATE_USERS:
        pytest.skip("needs root and useradd to create test users")
    restore = grant_traverse(os.path.realpath(sys.executable))
    made_group = False
    try:
        grp.getgrnam(GROUP)
    except KeyError:
        subprocess.run(["groupadd", GROUP], check=True)
        made_group = True
    made = []
    for name in (ALICE, BOB):
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True)
            made.append(name)
    subprocess.run(["usermod", "-aG", GROUP, BOB], check=True)
    try:
        yield {name: pwd.getpwnam(name) for name in (ALICE, BOB)}
    finally:
        for name in made:
            subprocess.run(["userdel", "--remove", name], capture_output=True)
        if made_group:
            subprocess.run(["groupdel", GROUP], capture_output=True)
        for d, mode in restore:
            os.chmod(d, mode)


def run_as(c: Cluster, user: pwd.struct_passwd, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(c.env, HOME=user.pw_dir, USER=user.pw_name, LOGNAME=user.pw_name)
    groups = [g.gr_gid for g in grp.getgrall() if user.pw_name in g.gr_mem]
    return subprocess.run(list(args), capture_output=True, text=True, timeout=30, env=env,
                          cwd=user.pw_dir, user=user.pw_uid, group=user.pw_gid,
                          extra_groups=groups)


def test_partition_access_and_other_users_jobs(cluster: Cluster,
                                               users: dict[str, pwd.struct_passwd]) -> None:
    c = cluster
    alice, bob = users[ALICE], users[BOB]
    r = run_as(c, alice, "sbatch", "-p", "nlp", "--wrap", "true")
    assert r.returncode == 1
    assert r.stderr == ("sbatch: error: Batch job submission failed: "
                        "User's group not permitted to use this partition\n")
    r = run_as(c, bob, "sbatch", "--parsable", "-p", "nlp", "-H", "--wrap", "true")
    assert r.returncode == 0, r.stderr
    bobs = int(r.stdout.strip())
    # hold, release and update of another user's job: Slurm's "Invalid user id"
    for cmd in (["scontrol", "hold", str(bobs)], ["scontrol", "release", str(bobs)]):
        r = run_as(c, alice, *cmd)
        assert r.returncode == 1, cmd
        assert "Invalid user id" in r.stderr, (cmd, r.stderr)
    r = run_as(c, alice, "scontrol", "update", f"JobId={bobs}", "Comment=x")
    assert r.returncode == 1 and "slurm_update error: Invalid user id" in r.stderr, r.stderr
    # the owner's requeuehold is a user hold the owner releases
    r = run_as(c, alice, "sbatch", "--parsable", "--wrap", "sleep 30")
    mine = int(r.stdout.strip())
    c.wait_state(mine, "RUNNING")
    r = run_as(c, alice, "scontrol", "requeuehold", str(mine))
    assert r.returncode == 0, r.stderr
    c.wait_for(lambda: squeue(c, mine, "%t %r") == "PD JobHeldUser", what="user hold")
    r = run_as(c, alice, "scontrol", "release", str(mine))
    assert r.returncode == 0, r.stderr
    c.wait_state(mine, "RUNNING", timeout=30)
    # a hidden partition stays out of sinfo; its record says hidden
    assert "vault" not in c.ok("sinfo", "-h", "-o", "%P")
    assert "vault" in c.ok("sinfo", "-a", "-h", "-o", "%P")
    c.ok("scancel", str(mine), str(bobs))
