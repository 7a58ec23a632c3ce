"""A notice reaches an ordinary user's batch job's output, as `scontrol notify`'s does in
Slurm (`slurmstepd: error: MESSAGE` on the job's stderr): idle-GPU reclaim's notice and the
owner's own `scontrol notify`, written as the user through the file the job opened.  Another
user's notify is refused and writes nothing.  Needs root (creates users); simulated GPUs."""

from __future__ import annotations

import pwd
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.agent.gpu import SIM_FILE, write_simulated
from tests.e2e.cluster import Cluster, needs_test_users
from tests.e2e.test_users import users  # noqa: F401  (the fixture: real unprivileged users)

pytestmark = [pytest.mark.slow, needs_test_users]

CONFIG = """\
ClusterName=notifycluster
KillWait=2
MinJobAge=600
SchedulerInterval=1
JobAcctGatherFrequency=1
CorralIdleGpuReclaim=notice=2s,after=600s,action=none
NodeName=node-[1-2] CPUs=2 RealMemory=2000 Gres=gpu:1
PartitionName=debug Nodes=node-[1-2] Default=YES MaxTime=INFINITE State=UP
"""


@pytest.fixture(scope="module")
def c(users: dict[str, pwd.struct_passwd]) -> Iterator[Cluster]:  # noqa: F811
    home = Path(tempfile.mkdtemp(prefix="corral-notify-"))
    home.chmod(0o755)  # the users must reach the socket
    cl = Cluster(home / "c", CONFIG)
    (home / "c").mkdir()
    write_simulated(str(home / "c" / SIM_FILE), [
        {"node": f"node-{i}", "index": 0, "util": 0.0, "memory_used": 0,
         "memory_total": 16 << 30, "power_w": 50.0, "processes": []} for i in (1, 2)])
    try:
        cl.start()
        (home / "c").chmod(0o755)
        yield cl
    finally:
        cl.stop()
        shutil.rmtree(home, ignore_errors=True)


def run_as(c: Cluster, user: pwd.struct_passwd, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(c.env, HOME=user.pw_dir, USER=user.pw_name, LOGNAME=user.pw_name)
    return subprocess.run(list(args), capture_output=True, text=True, timeout=30, env=env,
                          cwd=user.pw_dir, user=user.pw_uid, group=user.pw_gid, extra_groups=[])


def test_idle_gpu_notice_and_scontrol_notify_reach_the_batch_jobs_output(
        c: Cluster, users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    alice, bob = users["corral-alice"], users["corral-bob"]
    r = run_as(c, alice, "sbatch", "--parsable", "--gres=gpu:1", "-o", "notify-%j.out",
               "--wrap", "echo started; sleep 300")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    out = Path(alice.pw_dir) / f"notify-{job}.out"
    try:
        c.wait_state(job, "RUNNING")
        c.wait_for(lambda: out.exists() and "started" in out.read_text(), what="the job's output")
        # the idle GPU's notice, a line of its own in the job's stderr (here: its output)
        c.wait_for(lambda: "GPU(s) of job" in out.read_text(), timeout=30, what="the notice")
        lines = out.read_text().splitlines()
        notice = [ln for ln in lines if "GPU(s) of job" in ln]
        assert len(notice) == 1 and re.fullmatch(
            rf"slurmstepd: error: Corral: the 1 GPU\(s\) of job {job} have shown no "
            r"utilisation and no process since \S+; no action will be taken", notice[0]), lines
        # the owner's own notify takes the same path
        r = run_as(c, alice, "scontrol", "notify", job, "checkpoint", "soon")
        assert r.returncode == 0 and r.stdout == r.stderr == "", r
        c.wait_for(lambda: "checkpoint soon" in out.read_text(), what="the owner's notify")
        assert "slurmstepd: error: checkpoint soon\n" in out.read_text()
        # another user's is refused and writes nothing
        r = run_as(c, bob, "scontrol", "notify", job, "from-bob")
        assert r.returncode != 0 and "Traceback" not in r.stderr, r
        # the file is still the owner's, written by nobody else
        st = out.stat()
        assert (st.st_uid, st.st_gid) == (alice.pw_uid, alice.pw_gid)
        assert "from-bob" not in out.read_text()
        assert c.state(job) == "RUNNING"  # action=none: noticed, not reclaimed
    finally:
        c.run("scancel", job)
    c.wait_state(job, "CANCELLED")
    c.wait_for(lambda: "CANCELLED AT" in out.read_text(), what="the CANCELLED line")
    assert "from-bob" not in out.read_text()
