"""`corral pam-adopt`, called as pam_exec calls it from sshd's PAM `account` stage: the PAM_*
variables in the environment, the session process as its parent (here a shell that then
reports its own cgroup), exit 0 to allow and non-zero to refuse."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.agent.cgroup import cluster_group_name
from tests.e2e.cluster import CAN_CREATE_USERS, Cluster
from tests.e2e.test_users import grant_traverse

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

USER = "corral-adopt-u"
CONFIG = """\
ClusterName=adopttest
KillWait=2
MinJobAge=600
SchedulerInterval=1
NodeName=node-[1-2] CPUs=2 RealMemory=2000
PartitionName=debug Nodes=node-[1-2] Default=YES MaxTime=INFINITE State=UP
"""
# What the session process (the helper's parent) does after the helper: say the helper's
# status and its own cgroups, then live on as a session would.
SESSION = 'corral pam-adopt "$@"; echo "rc=$?"; cat /proc/$$/cgroup; echo end; exec sleep 120'


@pytest.fixture(scope="module")
def user() -> Iterator[pwd.struct_passwd]:
    if not CAN_CREATE_USERS:
        pytest.skip("needs root and useradd to create a test user")
    restore = grant_traverse(os.path.realpath(sys.executable))
    made = False
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", USER], check=True)
        made = True
    try:
        yield pwd.getpwnam(USER)
    finally:
        if made:
            subprocess.run(["userdel", "--remove", USER], capture_output=True)
        for d, mode in restore:
            os.chmod(d, mode)


@pytest.fixture(scope="module")
def cluster(user: pwd.struct_passwd) -> Iterator[Cluster]:
    # pytest's tmp dirs are private to root; the user must reach the socket
    home = Path(tempfile.mkdtemp(prefix="corral-adopt-"))
    home.chmod(0o755)
    c = Cluster(home / "c", CONFIG)
    try:
        c.start()
        yield c
    finally:
        c.stop()
        shutil.rmtree(home, ignore_errors=True)


def pam_session(c: Cluster, user: str, *options: str) -> tuple[int, str, str, int]:
    """Run the helper as pam_exec would (as root, PAM_* set); its status, stdout up to the
    session's report, the session's /proc/PID/cgroup text, and the session's pid."""
    env = dict(c.env, PAM_USER=user, PAM_TYPE="account", PAM_SERVICE="sshd",
               PAM_RHOST="127.0.0.1", PAM_TTY="ssh")
    p = subprocess.Popen(["sh", "-c", SESSION, "sh", *options], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, cwd=str(c.workdir))
    assert p.stdout is not None
    lines = []
    for line in p.stdout:
        if line.strip() == "end":
            break
        lines.append(line)
    pid = p.pid
    text = "".join(lines)
    said = text.split("rc=")[0]
    rc = int(text.split("rc=")[1].split()[0])
    cgroups = text.split("rc=")[1]
    c.sessions.append(p)  # type: ignore[attr-defined]
    return rc, said, cgroups, pid


@pytest.fixture(autouse=True)
def _reap(cluster: Cluster) -> Iterator[None]:
    cluster.sessions = []  # type: ignore[attr-defined]
    yield
    for p in cluster.sessions:  # type: ignore[attr-defined]
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)
        p.stdout.close()
        p.stderr.close()


def user_job(c: Cluster, user: pwd.struct_passwd, node: str) -> int:
    env = dict(c.env, HOME=user.pw_dir, USER=user.pw_name, LOGNAME=user.pw_name)
    r = subprocess.run(["sbatch", "--parsable", "-w", node, "--wrap", "sleep 120"],
                       capture_output=True, text=True, timeout=30, env=env, cwd=user.pw_dir,
                       user=user.pw_uid, group=user.pw_gid)
    assert r.returncode == 0, r.stderr
    job = int(r.stdout.strip().split(";")[0])
    c.wait_state(job, "RUNNING")
    return job


def test_denied_without_a_job_allowed_with_one(cluster: Cluster,
                                              user: pwd.struct_passwd) -> None:
    c = cluster
    rc, said, _, _ = pam_session(c, USER, "nodename=node-1")
    assert rc == 1
    assert said == "Access denied by pam_slurm_adopt: you have no active jobs on this node\n"
    rc, said, _, _ = pam_session(c, USER, "nodename=node-1", "action_no_jobs=allow")
    assert (rc, said) == (0, "")
    rc, _, _, _ = pam_session(c, "root", "nodename=node-1")
    assert rc == 0  # root is always let in
    rc, _, _, _ = pam_session(c, "no-such-user-here", "nodename=node-1",
                              "action_generic_failure=deny")
    assert rc == 1
    job = user_job(c, user, "node-1")
    try:
        rc, said, _, _ = pam_session(c, USER, "nodename=node-1")
        assert (rc, said) == (0, "")
        rc, said, _, _ = pam_session(c, USER, "nodename=node-2")  # the job is not there
        assert rc == 1 and "no active jobs" in said
        # another PAM stage is not this helper's to judge
        env = dict(c.env, PAM_USER=USER, PAM_TYPE="password")
        r = subprocess.run(["corral", "pam-adopt", "nodename=node-2"], env=env,
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0
    finally:
        c.ok("scancel", str(job))
    c.wait_state(job, "CANCELLED")
    rc, _, _, _ = pam_session(c, USER, "nodename=node-1")
    assert rc == 1


def test_bad_option_refuses(cluster: Cluster, user: pwd.struct_passwd) -> None:
    r = cluster.run("corral", "pam-adopt", "action_no_jobs=maybe",
                    env={"PAM_USER": "root", "PAM_TYPE": "account"})
    assert r.returncode != 0
    assert "bad value 'maybe' for action_no_jobs" in r.stderr


def test_session_joins_the_jobs_cgroup(cluster: Cluster, user: pwd.struct_passwd) -> None:
    c = cluster
    job = user_job(c, user, "node-2")
    try:
        group = f"corral/{cluster_group_name(str(c.home))}/job_{job}/"
        mine = [ln for ln in open("/proc/self/cgroup") if ln.strip()]
        roots = ["/sys/fs/cgroup"] + [f"/sys/fs/cgroup/{c}" for c in
                                       ("freezer", "memory", "cpuset", "pids")]
        if not any(os.path.isdir(os.path.join(r, group)) for r in roots) or not mine:
            pytest.skip("the agent could not make job cgroups here (cgroups not writable)")
        rc, said, cgroups, pid = pam_session(c, USER, "nodename=node-2",
                                             "action_adopt_failure=deny")
        assert (rc, said) == (0, ""), said
        assert f"/{group}step_" in cgroups, cgroups
    finally:
        c.ok("scancel", str(job))
    c.wait_state(job, "CANCELLED")
    # the session was killed with the job
    c.wait_for(lambda: not os.path.exists(f"/proc/{pid}") or
               open(f"/proc/{pid}/stat").read().split()[2] == "Z", timeout=30,
               what="the adopted session to be killed with its job")


def test_options_parse_as_pam_slurm_adopts() -> None:
    from corral.admin.adopt import OptionError, parse_options

    assert parse_options([]) == {"action_no_jobs": "deny", "action_unknown": "newest",
                                 "action_adopt_failure": "allow",
                                 "action_generic_failure": "ignore"}
    opts = parse_options(["action_unknown=deny", "nodename=gpu-7", "log_level=debug5"])
    assert opts["action_unknown"] == "deny" and opts["nodename"] == "gpu-7"
    for bad in (["action_no_jobs"], ["frobnicate=1"], ["action_adopt_failure=ignore"]):
        with pytest.raises(OptionError):
            parse_options(bad)
