"""An account's coordinator holds, releases, requeues, updates and cancels the jobs of the
account's users (sub-accounts included), through the real commands run as real
unprivileged users; a user who is not a coordinator cannot (docs/POLICY.md)."""

from __future__ import annotations

import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, needs_test_users
from tests.e2e.test_limits import as_user
from tests.e2e.test_users import users  # noqa: F401  (the fixture: real unprivileged users)

pytestmark = [
    pytest.mark.slow,
    needs_test_users,
]

CONFIG = """\
ClusterName=lab
KillWait=2
MinJobAge=600
SchedulerInterval=1
AccountingStorageEnforce=associations,limits
NodeName=node-1 CPUs=4 RealMemory=4000
PartitionName=debug Nodes=node-1 Default=YES MaxTime=INFINITE State=UP
"""
SACCTMGR = ["sacctmgr"]  # the real command


@pytest.fixture(scope="module")
def c(users: dict[str, pwd.struct_passwd]) -> Iterator[Cluster]:  # noqa: F811
    home = Path(tempfile.mkdtemp(prefix="corral-coord-"))
    home.chmod(0o755)  # the users must reach the socket
    cl = Cluster(home / "c", CONFIG)
    cl.start()
    (home / "c").chmod(0o755)
    try:
        alice, bob = users["corral-alice"].pw_name, users["corral-bob"].pw_name
        cl.ok(*SACCTMGR, "-i", "add", "account", "smithlab")
        cl.ok(*SACCTMGR, "-i", "add", "account", "students", "parent=smithlab")
        cl.ok(*SACCTMGR, "-i", "add", "user", alice, "account=smithlab")
        cl.ok(*SACCTMGR, "-i", "add", "user", bob, "account=students")
        cl.ok(*SACCTMGR, "-i", "add", "coordinator", alice, "account=smithlab")
        yield cl
    finally:
        cl.stop()
        shutil.rmtree(home, ignore_errors=True)


def _state(c: Cluster, job: str) -> str:
    return c.ok("squeue", "-h", "-j", job, "-o", "%T %r").strip()


def test_coordinator_controls_members_jobs(c: Cluster,
                                           users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    alice, bob = users["corral-alice"], users["corral-bob"]
    r = as_user(c, bob, "sbatch", "--parsable", "--begin=now+1hour", "-o", "/dev/null",
                "--wrap", "true")
    assert r.returncode == 0, r.stderr
    waiting = r.stdout.strip()
    # the coordinator of smithlab holds a job of students (a sub-account): an admin hold
    # its owner cannot release
    r = as_user(c, alice, "scontrol", "hold", waiting)
    assert r.returncode == 0, r.stderr
    assert _state(c, waiting) == "PENDING JobHeldAdmin"
    r = as_user(c, bob, "scontrol", "release", waiting)
    assert r.returncode != 0 and "Access/permission denied" in r.stderr, r
    r = as_user(c, alice, "scontrol", "release", waiting)
    assert r.returncode == 0, r.stderr
    r = as_user(c, alice, "scontrol", "update", f"JobId={waiting}", "TimeLimit=5")
    assert r.returncode == 0, r.stderr
    assert c.ok("squeue", "-h", "-j", waiting, "-o", "%l").strip() == "5:00"
    r = as_user(c, alice, "scancel", waiting)
    assert r.returncode == 0, r.stderr

    r = as_user(c, bob, "sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 300")
    assert r.returncode == 0, r.stderr
    running = r.stdout.strip()
    c.wait_state(int(running), "RUNNING")
    r = as_user(c, alice, "scontrol", "requeuehold", running)
    assert r.returncode == 0, r.stderr
    c.wait_state(int(running), "PENDING")
    # and adds users to the account (bob to smithlab itself)
    r = as_user(c, alice, *SACCTMGR, "-i", "add", "user", bob.pw_name, "account=smithlab")
    assert r.returncode == 0, r.stderr
    assert "smithlab" in c.ok(*SACCTMGR, "-nP", "show", "assoc", "where", f"user={bob.pw_name}",
                              "format=account")
    # the kill switch as docs/POLICY.md writes it: -A names the account exactly, so the
    # sub-account students is named too; bob's job of smithlab itself goes with the first
    r = as_user(c, bob, "sbatch", "--parsable", "-A", "smithlab", "-o", "/dev/null",
                "--begin=now+1hour", "--wrap", "true")
    assert r.returncode == 0, r.stderr
    in_smithlab = r.stdout.strip()
    r = as_user(c, alice, "squeue", "-h", "-A", "smithlab", "-o", "%i %a")
    assert r.returncode == 0 and r.stdout.split() == [in_smithlab, "smithlab"], r
    r = as_user(c, alice, "scancel", "-A", "smithlab")
    assert r.returncode == 0 and r.stderr == "", r
    c.wait_state(int(in_smithlab), "CANCELLED")
    assert _state(c, running).startswith("PENDING")  # students: not smithlab itself
    r = as_user(c, alice, "scancel", "-A", "students")
    assert r.returncode == 0 and r.stderr == "", r
    c.wait_state(int(running), "CANCELLED")


def test_non_coordinator_cannot(c: Cluster, users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    alice, bob = users["corral-alice"], users["corral-bob"]
    r = as_user(c, alice, "sbatch", "--parsable", "--begin=now+1hour", "-o", "/dev/null",
                "--wrap", "true")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    # bob uses smithlab's sub-account but coordinates nothing: Slurm's messages
    r = as_user(c, bob, "scancel", job)
    assert r.returncode != 0 and "Access/permission denied" in r.stderr, r
    r = as_user(c, bob, "scontrol", "hold", job)
    assert r.returncode != 0 and "Invalid user id" in r.stderr, r
    r = as_user(c, bob, "scontrol", "update", f"JobId={job}", "TimeLimit=5")
    assert r.returncode != 0 and "Invalid user id" in r.stderr, r
    r = as_user(c, bob, *SACCTMGR, "-i", "add", "user", "root", "account=students")
    assert r.returncode != 0, r
    assert _state(c, job) == "PENDING BeginTime"
    # bob's kill switch asks for every smithlab job: each of alice's is refused, his own
    # (charged to smithlab) goes
    r = as_user(c, bob, "sbatch", "--parsable", "-A", "smithlab", "--begin=now+1hour",
                "-o", "/dev/null", "--wrap", "true")
    assert r.returncode == 0, r.stderr
    own = r.stdout.strip()
    r = as_user(c, bob, "scancel", "-A", "smithlab")
    assert r.returncode == 1, r
    assert r.stderr == f"scancel: error: Kill job error on job id {job}: " \
        "Access/permission denied\n", r
    assert _state(c, job) == "PENDING BeginTime"
    c.wait_state(int(own), "CANCELLED")
    c.ok("scancel", job)
