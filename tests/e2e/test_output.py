"""End-to-end: what squeue, sinfo, scontrol and sacct print, through the real commands.

Bounded field widths, escaped control characters, -M/--clusters, SLURM_TIME_FORMAT and the
fields and scontrol details of issue 9.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import CAN_CREATE_USERS, Cluster
from tests.e2e.test_users import grant_traverse

pytestmark = pytest.mark.slow

MAX_WIDTH = 1024  # corral.cli.fmt.MAX_WIDTH


def test_huge_widths_are_bounded(cluster: Cluster) -> None:
    jid = cluster.sbatch("-H", "-J", "wide", "--wrap", "true")
    out = cluster.ok("squeue", "-h", "-j", str(jid), "-o", "%999999999i", timeout=10)
    assert out == str(jid).ljust(MAX_WIDTH) + "\n"
    out = cluster.ok("squeue", "-j", str(jid), "-O", "jobid:.99999999999999999999999", timeout=10)
    assert [len(line) for line in out.splitlines()] == [MAX_WIDTH, MAX_WIDTH]
    out = cluster.ok("sinfo", "-h", "-p", "short", "-o", "%999999999N", timeout=10)
    assert out == "node-[1-2]".ljust(MAX_WIDTH) + "\n"
    out = cluster.ok("sacct", "-n", "-X", "-j", str(jid), "-o", "jobid%999999999", timeout=10)
    assert out == str(jid).rjust(MAX_WIDTH) + " \n"
    cluster.ok("scancel", str(jid))


def test_control_characters_are_escaped(cluster: Cluster) -> None:
    name = "evil\x1b]0;owned\x07\x1b[2J"
    jid = cluster.sbatch("-H", "-J", name, "--comment", "two\nlines\r", "--wrap", "true")
    shown = "evil\\x1b]0;owned\\x07\\x1b[2J"
    out = cluster.ok("squeue", "-h", "-j", str(jid), "-o", "%j|%k")
    assert out == f"{shown}|two\\nlines\\r\n"
    out = cluster.ok("scontrol", "show", "job", str(jid))
    assert f"JobName={shown}\n" in out and "Comment=two\\nlines\\r \n" in out
    assert "\x1b" not in out and "\x07" not in out
    out = cluster.ok("sacct", "-n", "-X", "-P", "-j", str(jid), "-o", "JobName,Comment")
    assert out == f"{shown}|two\\nlines\\r\n"
    cluster.ok("scancel", str(jid))
    reason = "fan\x1b[8mhidden"
    cluster.ok("scontrol", "update", "NodeName=node-4", "State=DRAIN", f"Reason={reason}")
    try:
        out = cluster.ok("sinfo", "-R", "-h", "-o", "%E|%N")
        assert out == "fan\\x1b[8mhidden|node-4\n"
        out = cluster.ok("scontrol", "show", "node", "node-4")
        assert "Reason=fan\\x1b[8mhidden" in out and "\x1b" not in out
    finally:
        cluster.ok("scontrol", "update", "NodeName=node-4", "State=RESUME")


def test_unknown_cluster_refused(cluster: Cluster) -> None:
    for cmd in ("squeue", "sinfo"):
        r = cluster.run(cmd, "--clusters=elsewhere")
        assert r.returncode == 1 and r.stdout == ""
        assert r.stderr == (f"{cmd}: error: 'elsewhere' can't be reached now, or it is an "
                            "invalid entry for --cluster.  Use 'sacctmgr list clusters' to see "
                            "available clusters.\n")
    out = cluster.ok("squeue", "-M", "testcluster", "-h", "-n", "no-such-name")
    assert out == "CLUSTER: testcluster\n"


def test_slurm_time_format(cluster: Cluster) -> None:
    jid = cluster.sbatch("-H", "--wrap", "true")
    env = {"SLURM_TIME_FORMAT": "%s"}
    submit = int(cluster.ok("squeue", "-h", "-j", str(jid), "-o", "%V", env=env))
    assert abs(submit - time.time()) < 60
    out = cluster.ok("scontrol", "show", "job", str(jid), env=env)
    assert f"SubmitTime={submit} " in out
    out = cluster.ok("sacct", "-n", "-X", "-P", "-j", str(jid), "-o", "Submit", env=env)
    assert out == f"{submit}\n"
    out = cluster.ok("sacct", "-n", "-X", "-P", "-j", str(jid), "-o", "Submit",
                     env={"SLURM_TIME_FORMAT": "relative"})
    assert out == time.strftime("%H:%M:%S\n", time.localtime(submit)) or out.startswith("Ystday")
    r = cluster.run("squeue", "-h", "-j", str(jid), "-o", "%V",
                    env={"SLURM_TIME_FORMAT": "nonsense"})
    assert r.returncode == 0
    assert r.stderr == "squeue: error: invalid SLURM_TIME_FORMAT = 'nonsense'\n"
    assert r.stdout == time.strftime("%Y-%m-%dT%H:%M:%S\n", time.localtime(submit))
    cluster.ok("scontrol", "update", "NodeName=node-3", "State=DRAIN", "Reason=tf")
    try:
        out = cluster.ok("sinfo", "-R", "-h", "-o", "%H", env=env)
        assert abs(int(out) - time.time()) < 60
    finally:
        cluster.ok("scontrol", "update", "NodeName=node-3", "State=RESUME")
    cluster.ok("scancel", str(jid))


def test_squeue_fields_and_begin_time(cluster: Cluster) -> None:
    jid = cluster.sbatch("-H", "--ntasks-per-node=3", "-c", "2", "--wrap", "true")
    out = cluster.ok("squeue", "-h", "-j", str(jid), "-o", "%c|%C")
    assert out == "6|6\n"
    out = cluster.ok("squeue", "-h", "-j", str(jid), "-O", "cpus-per-task:|,numtasks:|,mincpus")
    assert out.replace(" ", "") == "2|3|6\n"
    r = cluster.run("squeue", "-O", "jobid,bogus")
    assert r.stderr == "squeue: error: Invalid job format specification: bogus\n"
    cluster.ok("scancel", str(jid))
    later = cluster.sbatch("--begin=now+1hour", "--wrap", "true")
    shown = cluster.ok("squeue", "-h", "-j", str(later), "-o", "%S|%r")
    start, reason = shown.strip().split("|")
    assert reason == "BeginTime" and start != "N/A"
    begin = time.mktime(time.strptime(start, "%Y-%m-%dT%H:%M:%S"))
    assert 3500 < begin - time.time() < 3700
    out = cluster.ok("squeue", "-h", "--start", "-j", str(later), "-o", "%S")
    assert out.strip() == start
    out = cluster.ok("scontrol", "show", "job", str(later))
    assert f"EligibleTime={start}\n" in out and f"StartTime={start} " in out
    out = cluster.ok("sacct", "-n", "-X", "-P", "-j", str(later), "-o", "Eligible")
    assert out == f"{start}\n"
    cluster.ok("scancel", str(later))


def test_scontrol_show_job_details_and_reasons(cluster: Cluster) -> None:
    arr = cluster.sbatch("-H", "--array=1-3", "--wrap", "true")
    out = cluster.ok("scontrol", "show", "job", f"{arr}_2")
    assert f"ArrayJobId={arr} ArrayTaskId=2 " in out and "ArrayTaskId=1-3" not in out
    cluster.ok("scancel", str(arr))
    gpu = cluster.sbatch("--gres=gpu:2", "-n", "2", "--wrap", "sleep 60")
    cluster.wait_state(gpu, "RUNNING")
    out = cluster.ok("scontrol", "-d", "show", "job", str(gpu))
    assert "\n   JOB_GRES=gpu:2\n" in out
    detail = [ln for ln in out.splitlines() if ln.startswith("     Nodes=")]
    assert len(detail) == 1 and " GRES=gpu:2(IDX:" in detail[0] and " Mem=" in detail[0]
    assert "JOB_GRES" not in cluster.ok("scontrol", "show", "job", str(gpu))
    node = detail[0].split()[0].split("=")[1]
    used = cluster.ok("sinfo", "-h", "-N", "-n", node, "-O", "NodeList:10,GresUsed:30")
    assert used.split()[1].startswith("gpu:2(IDX:")
    cluster.ok("scancel", str(gpu))
    failed = cluster.sbatch("--wrap", "exit 3")
    done = cluster.sbatch("--wrap", "true")
    cluster.wait_state(failed, "FAILED")
    cluster.wait_state(done, "COMPLETED")
    assert "JobState=FAILED Reason=NonZeroExitCode " in cluster.ok(
        "scontrol", "show", "job", str(failed))
    assert "JobState=COMPLETED Reason=None " in cluster.ok("scontrol", "show", "job", str(done))
    out = cluster.ok("squeue", "-h", "-t", "all", "-j", str(failed), "-o", "%T %r %R")
    assert out.split() == ["FAILED", "NonZeroExitCode", "(NonZeroExitCode)"]


def test_scontrol_ping_hostnames_config(cluster: Cluster, tmp_path: Path) -> None:
    r = cluster.run("scontrol", "ping")
    assert r.returncode == 0 and r.stdout.startswith("Slurmctld(primary) at ")
    assert r.stdout.endswith(" is UP\n")
    r = cluster.run("scontrol", "ping", env={"CORRAL_HOME": str(tmp_path)})
    assert r.returncode == 1 and r.stdout.splitlines()[0].endswith(" is DOWN")
    for args, err in ((["show", "hostnames", ""], "scontrol: error: host list is empty\n"),
                      (["show", "hostnames", "node-[1-"], "Invalid hostlist: node-[1-\n")):
        r = cluster.run("scontrol", *args)
        assert (r.returncode, r.stdout, r.stderr) == (0, "", err)
    out = cluster.ok("scontrol", "show", "config")
    keys = [ln.split(" = ")[0].rstrip() for ln in out.splitlines() if " = " in ln]
    assert len(keys) == 207 and "MaxTasksPerNode" in keys and "ClusterName" in keys
    assert "ClusterName             = testcluster\n" in out
    assert "MinJobAge               = 600 sec\n" in out


HIDDEN_CONFIG = """\
ClusterName=hid
NodeName=node-[1-2] CPUs=2 RealMemory=2000 Feature=a100,ib
PartitionName=open Nodes=node-[1-2] Default=YES MaxTime=INFINITE State=UP
PartitionName=secret Nodes=node-[1-2] Hidden=YES State=UP RootOnly=YES MaxCPUsPerNode=1 \
  DefCpuPerGPU=2 DefMemPerGPU=1000 DenyAccounts=guests DenyQos=low QOS=normal
"""


def test_sinfo_hidden_partitions_and_features(tmp_path: Path) -> None:
    c = Cluster(tmp_path / "corral", HIDDEN_CONFIG)
    try:
        c.start()
        assert c.ok("sinfo", "-h", "-o", "%R").split() == ["open"]
        assert c.ok("sinfo", "-a", "-h", "-o", "%R").split() == ["open", "secret"]
        assert c.ok("sinfo", "-h", "-o", "%f").split() == ["a100,ib"]
        assert c.ok("sinfo", "-h", "-N", "-O", "NodeList:8,Features:10").split() == [
            "node-1", "a100,ib", "node-2", "a100,ib"]
        shown = c.sbatch("-H", "-p", "open", "--wrap", "true")
        hidden = c.sbatch("-H", "-p", "secret", "--wrap", "true")
        assert c.squeue_ids() == [str(shown)]
        assert sorted(c.squeue_ids("-a"), key=int) == [str(shown), str(hidden)]
        assert c.squeue_ids("-p", "secret") == [str(hidden)]
        assert c.squeue_ids("-j", str(hidden)) == [str(hidden)]
        # the partition's policy settings, where Slurm prints them
        lines = c.ok("scontrol", "show", "partition", "secret").splitlines()
        assert lines[1:3] == ["   AllowGroups=ALL DenyAccounts=guests DenyQos=low",
                              "   AllocNodes=ALL Default=NO QoS=normal"]
        assert lines[4].endswith(" MaxCPUsPerNode=1") and " RootOnly=YES " in lines[6]
        assert lines[9] == "   JobDefaults=DefCpuPerGPU=2,DefMemPerGPU=1000"
        lines = c.ok("scontrol", "show", "partition", "open").splitlines()
        assert lines[1:3] == ["   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL",
                              "   AllocNodes=ALL Default=YES QoS=N/A"]
        assert lines[4].endswith(" MaxCPUsPerNode=UNLIMITED") and " RootOnly=NO " in lines[6]
        assert lines[9] == "   JobDefaults=(null)"
    finally:
        c.stop()


OTHER = "corral-clout-u"  # a user this test creates, and removes
_granted: list[tuple[str, int]] = []  # directories made traversable, with their old modes


@pytest.fixture(scope="module")
def other_user() -> Iterator[pwd.struct_passwd]:
    if not CAN_CREATE_USERS:
        pytest.skip("needs root and useradd to create a test user")
    _granted[:] = grant_traverse(sys.executable)
    made = False
    try:
        pwd.getpwnam(OTHER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", OTHER], check=True)
        made = True
    try:
        yield pwd.getpwnam(OTHER)
    finally:
        if made:
            subprocess.run(["userdel", OTHER], capture_output=True)
        restored: set[str] = set()
        for d, mode in _granted:  # each directory back to the mode it had first
            if d not in restored:
                os.chmod(d, mode)
                restored.add(d)


def _as(c: Cluster, user: pwd.struct_passwd, *args: str) -> subprocess.CompletedProcess[str]:
    # Other tests running at the same time may restore the interpreter's 0700 ancestors
    # when they end: grant traversal again right before each command (restored at the end).
    _granted.extend(grant_traverse(sys.executable))
    env = dict(c.env, HOME="/", USER=user.pw_name, LOGNAME=user.pw_name)
    return subprocess.run(list(args), capture_output=True, text=True, timeout=30, env=env,
                          cwd="/", user=user.pw_uid, group=user.pw_gid, extra_groups=[])


# Slurm 22.05's refusals of another user's job: job updates (hold, release, update) fail
# with ESLURM_USER_ID_MISSING, requeue and suspend with ESLURM_ACCESS_DENIED.
REFUSALS = [
    (["hold"], "Invalid user id", "slurm_suspend error"),
    (["release"], "Invalid user id", "slurm_suspend error"),
    (["requeue"], "Access/permission denied", "slurm_requeue error"),
    (["suspend"], "Access/permission denied", "slurm_suspend error"),
]


def test_refusals_of_another_users_job(tmp_path: Path, other_user: pwd.struct_passwd) -> None:
    home = Path(tempfile.mkdtemp(prefix="corral-out-"))
    home.chmod(0o755)  # the other user must reach the socket
    c = Cluster(home / "c")
    try:
        c.start()
        jid = c.sbatch("-H", "--wrap", "true")
        got = []
        for words, msg, perror in REFUSALS:
            r = _as(c, other_user, "scontrol", *words, str(jid))
            got.append((words[0], r.returncode, r.stderr))
            assert r.returncode == 1, (words, r.stderr)
            assert r.stderr == f"{msg} for job {jid}\n{perror}: {msg}\n", (words, r.stderr)
        r = _as(c, other_user, "scontrol", "update", f"JobId={jid}", "TimeLimit=5")
        assert (r.returncode, r.stderr) == (1, "slurm_update error: Invalid user id\n")
    finally:
        c.stop()
        shutil.rmtree(home, ignore_errors=True)


def test_update_dependency_is_shown(cluster: Cluster) -> None:
    first = cluster.sbatch("-H", "--wrap", "true")
    second = cluster.sbatch("-H", "--wrap", "true")
    cluster.ok("scontrol", "update", f"JobId={second}", f"Dependency=afterok:{first}")
    out = cluster.ok("scontrol", "show", "job", str(second))
    assert f" Dependency=afterok:{first}(unfulfilled)\n" in out
    cluster.ok("scancel", str(first), str(second))


@pytest.mark.parametrize("begin", ["teatime", "4:00 PM", "16:00:00"])
def test_begin_forms_reach_the_job(cluster: Cluster, begin: str) -> None:
    jid = cluster.sbatch(f"--begin={begin}", "--wrap", "true")
    try:
        out = cluster.ok("squeue", "-h", "-j", str(jid), "-o", "%S",
                         env={"SLURM_TIME_FORMAT": "%H:%M:%S"})
        assert out == "16:00:00\n"  # the next 16:00 to come, today or tomorrow
    finally:
        cluster.ok("scancel", str(jid))
