"""Association limits, submit limits, fairshare, sshare and sprio through the real commands
on a running cluster with AccountingStorageEnforce=associations,limits (docs/POLICY.md)."""

from __future__ import annotations

import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, needs_test_users
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
PriorityWeightAge=0
PriorityWeightPartition=0
PriorityWeightFairshare=10000
NodeName=node-[1-2] CPUs=4 RealMemory=4000 Gres=gpu:2
PartitionName=debug Nodes=node-[1-2] Default=YES MaxTime=INFINITE State=UP
PartitionName=labonly Nodes=node-[1-2] AllowAccounts=lab State=UP
"""
SACCTMGR = ["sacctmgr"]  # the real command
SSHARE = ["sshare"]  # the real command
SPRIO = ["sprio"]  # the real command


@pytest.fixture(scope="module")
def c(users: dict[str, pwd.struct_passwd]) -> Iterator[Cluster]:  # noqa: F811
    home = Path(tempfile.mkdtemp(prefix="corral-limits-"))
    home.chmod(0o755)  # the users must reach the socket
    cl = Cluster(home / "c", CONFIG)
    cl.start()
    (home / "c").chmod(0o755)
    try:
        yield cl
    finally:
        cl.stop()
        shutil.rmtree(home, ignore_errors=True)


def as_user(c: Cluster, user: pwd.struct_passwd, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(c.env, HOME=user.pw_dir, USER=user.pw_name, LOGNAME=user.pw_name)
    return subprocess.run(list(args), capture_output=True, text=True, timeout=30, env=env,
                          cwd=user.pw_dir, user=user.pw_uid, group=user.pw_gid,
                          extra_groups=[])


def reason(c: Cluster, job: int) -> str:
    return c.ok("squeue", "-h", "-j", str(job), "-o", "%T %r").strip()


def test_gpu_limit_submit_limit_and_unknown_user(
        c: Cluster, users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    alice, bob = users["corral-alice"], users["corral-bob"]
    c.ok(*SACCTMGR, "-i", "add", "account", "lab", "Description=the lab")
    c.ok(*SACCTMGR, "-i", "add", "user", f"root,{alice.pw_name}", "account=lab")
    c.ok(*SACCTMGR, "-i", "modify", "user", "where", "name=root", "account=lab", "set",
         "GrpTRES=gres/gpu=2", "MaxSubmitJobs=4")
    c.env["SBATCH_ACCOUNT"] = "lab"  # root's default account is root: these run under lab
    # three 1-GPU jobs submitted at once: the limit counts the two started in the same pass
    jobs = [c.sbatch("--gpus=1", "-o", "/dev/null", "--wrap", "sleep 60") for _ in range(3)]
    c.wait_state(jobs[0], "RUNNING")
    c.wait_state(jobs[1], "RUNNING")
    c.wait_for(lambda: reason(c, jobs[2]) == "PENDING AssocGrpGRES", what="AssocGrpGRES")
    # another user's GPU job starts meanwhile
    r = as_user(c, alice, "sbatch", "--parsable", "--gpus=1", "-o", "/dev/null",
                "--wrap", "sleep 60")
    assert r.returncode == 0, r.stderr
    c.wait_state(int(r.stdout.strip()), "RUNNING")
    # a fourth job is accepted, the fifth is over MaxSubmitJobs: Slurm's message, exit 1
    held = c.sbatch("-H", "--wrap", "true")
    r = c.run("sbatch", "--wrap", "true")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == ("sbatch: error: AssocMaxSubmitJobLimit\n"
                        "sbatch: error: Batch job submission failed: Job violates "
                        "accounting/QOS policy (job submit limit, user's size and/or time "
                        "limits)\n")
    # a user with no association, and an account root may not use, are refused
    r = as_user(c, bob, "sbatch", "--wrap", "true")
    assert r.returncode == 1
    assert r.stderr.endswith("Batch job submission failed: Invalid account or "
                             "account/partition combination specified\n")
    c.ok("scancel", str(held))
    r = c.run("sbatch", "-A", "nosuch", "--wrap", "true")
    assert r.returncode == 1 and "Invalid account" in r.stderr
    # the first job ends: the waiting one starts as soon as the limit allows (after a
    # second or two of running, so that root's usage shows in sshare's whole CPU-seconds)
    time.sleep(2)
    c.ok("scancel", str(jobs[0]))
    c.wait_state(jobs[2], "RUNNING")
    for j in jobs[1:]:
        c.ok("scancel", str(j))
    c.ok("scancel", "-u", alice.pw_name)
    out = c.ok("squeue", "-h", "-t", "all", "-u", "root", "-o", "%a")
    assert set(out.split()) == {"lab"}


def test_sshare_and_sprio_show_why(c: Cluster) -> None:
    out = c.ok(*SSHARE, "-a")
    lines = out.splitlines()
    assert lines[0] == ("Account                    User  RawShares  NormShares    RawUsage  "
                        "EffectvUsage  FairShare ")
    assert lines[1].startswith("-------------------- ---------- ---------- ----------- ")
    assert any(ln.startswith(" lab ") for ln in lines)
    rows = c.ok(*SSHARE, "-a", "-n", "-P", "-o", "account,user,rawusage,fairshare").splitlines()
    root_row = [r for r in rows if r.split("|")[:2] == ["  lab", "root"]]
    assert root_row, rows
    # root's GPU jobs above were charged: its usage is not zero
    assert int(root_row[0].split("|")[2]) > 0
    # a blocker fills the cluster; two queued jobs of different users' fairshare show in sprio
    blocker = c.sbatch("-N", "2", "--exclusive", "-o", "/dev/null", "--wrap", "sleep 60")
    c.wait_state(blocker, "RUNNING")
    waiting = c.sbatch("-o", "/dev/null", "--wrap", "true")
    c.wait_for(lambda: "PENDING" in reason(c, waiting), what="pending")
    time.sleep(1.5)
    out = c.ok(*SPRIO)
    head = out.splitlines()[0]
    assert head == "          JOBID PARTITION   PRIORITY       SITE  FAIRSHARE"
    assert any(ln.split()[0] == str(waiting) for ln in out.splitlines()[1:])
    w = c.ok(*SPRIO, "-w").splitlines()
    assert w[1].split() == ["Weights", "1", "10000"]
    n = c.ok(*SPRIO, "-n", "-h", "-j", str(waiting)).split()
    assert n[0] == str(waiting) and 0.0 <= float(n[-1]) <= 1.0
    c.ok("scancel", str(blocker), str(waiting))


def test_fairshare_reorders_queued_jobs_after_gpu_use(
        c: Cluster, users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    """root (account lab) has used GPUs in the tests above, alice not: with the cluster
    full, root's job queued first still starts after alice's, and sprio shows why."""
    alice = users["corral-alice"]
    blocker = c.sbatch("-N", "2", "--exclusive", "-o", "/dev/null", "--wrap", "sleep 60")
    c.wait_state(blocker, "RUNNING")
    mine = c.sbatch("-N", "2", "--exclusive", "-o", "/dev/null", "--wrap", "sleep 60")
    r = as_user(c, alice, "sbatch", "--parsable", "-N", "2", "--exclusive", "-o", "/dev/null",
                "--wrap", "sleep 60")
    assert r.returncode == 0, r.stderr
    hers = int(r.stdout.strip())
    c.wait_for(lambda: "PENDING" in reason(c, hers), what="queued")
    time.sleep(1.5)  # a pass computes both priorities
    rows = {ln.split()[0]: ln.split() for ln in c.ok(*SPRIO, "-h").splitlines()}
    assert int(rows[str(hers)][2]) > int(rows[str(mine)][2])  # PRIORITY
    assert int(rows[str(hers)][4]) > int(rows[str(mine)][4])  # FAIRSHARE
    c.ok("scancel", str(blocker))
    c.wait_state(hers, "RUNNING")
    assert "PENDING" in reason(c, mine)
    c.ok("scancel", str(hers), str(mine))


def test_policy_guide_commands_run_as_written(c: Cluster) -> None:
    """docs/POLICY.md's sacctmgr block, run line by line, gives the lab it describes."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "POLICY.md").read_text()
    block = doc.split("```sh\n", 1)[1].split("```", 1)[0]
    lines = [ln.split() for ln in block.splitlines() if ln.strip()]
    assert len(lines) >= 8 and all(ln[0] == "sacctmgr" for ln in lines)
    for ln in lines:
        c.ok(*SACCTMGR, *ln[1:])
    out = c.ok(*SACCTMGR, "-nP", "show", "assoc", "where", "account=smithlab,students",
               "format=account,user,grptres,maxwall,qos")
    rows = out.splitlines()
    assert "smithlab||gres/gpu=16||normal" in rows or any(
        r.startswith("smithlab||gres/gpu=16|") for r in rows), rows
    assert any(r.startswith("students|ann|gres/gpu=2|1-00:00:00") for r in rows), rows
    assert any(r.startswith("smithlab|pi|") and "deadline" in r for r in rows), rows
    assert "pi" in c.ok(*SACCTMGR, "-nP", "show", "account", "smithlab", "withcoord",
                        "format=account,coordinators")


def test_a_user_outside_allow_accounts_is_refused(
        c: Cluster, users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    alice = users["corral-alice"]
    c.ok(*SACCTMGR, "-i", "add", "account", "other", "Description=another group")
    c.ok(*SACCTMGR, "-i", "add", "user", alice.pw_name, "account=other")
    # alice's job under `other` may not use the partition that allows only `lab`
    r = as_user(c, alice, "sbatch", "-A", "other", "-p", "labonly", "--wrap", "true")
    assert r.returncode == 1, r.stdout
    assert r.stderr == ("sbatch: error: Batch job submission failed: Invalid account or "
                        "account/partition combination specified\n")
    # under `lab` she may
    r = as_user(c, alice, "sbatch", "--parsable", "-A", "lab", "-p", "labonly", "-o",
                "/dev/null", "--wrap", "true")
    assert r.returncode == 0, r.stderr
    c.wait_state(int(r.stdout.strip()), "COMPLETED")
