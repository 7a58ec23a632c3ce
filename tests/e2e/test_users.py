"""Jobs run as their owner; one user cannot touch another's jobs. Needs root (creates users)."""

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

from tests.e2e.cluster import Cluster, needs_test_users

pytestmark = [
    pytest.mark.slow,
    needs_test_users,
]

USERS = ("corral-alice", "corral-bob")


def grant_traverse(path: str) -> list[tuple[str, int]]:
    """Let other users reach `path` (o+x on its ancestors); returns what to restore.

    The interpreter may live under root's 0700 home (pyenv); the test users must run it.
    """
    changed = []
    d = os.path.dirname(os.path.realpath(path))
    while True:
        mode = os.stat(d).st_mode & 0o7777
        if not mode & 0o001:
            os.chmod(d, mode | 0o001)
            changed.append((d, mode))
        if d == "/":
            break
        d = os.path.dirname(d)
    return changed


@pytest.fixture(scope="module")
def users() -> Iterator[dict[str, pwd.struct_passwd]]:
    restore = grant_traverse(os.path.realpath(sys.executable))
    made = []
    for name in USERS:
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True)
            made.append(name)
    try:
        yield {name: pwd.getpwnam(name) for name in USERS}
    finally:
        for name in made:
            subprocess.run(["userdel", "--remove", name], capture_output=True)
        for d, mode in restore:
            os.chmod(d, mode)


@pytest.fixture(scope="module")
def shared_cluster(users: dict[str, pwd.struct_passwd]) -> Iterator[Cluster]:
    # pytest's tmp dirs are private to root; the users must reach the socket
    home = Path(tempfile.mkdtemp(prefix="corral-users-"))
    home.chmod(0o755)
    c = Cluster(home / "c")
    c.start()
    try:
        yield c
    finally:
        c.stop()
        shutil.rmtree(home, ignore_errors=True)


def run_as(c: Cluster, user: pwd.struct_passwd, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(c.env, HOME=user.pw_dir, USER=user.pw_name, LOGNAME=user.pw_name)
    return subprocess.run(list(args), capture_output=True, text=True, timeout=30, env=env,
                          cwd=user.pw_dir, user=user.pw_uid, group=user.pw_gid, extra_groups=[])


def test_jobs_run_as_owner_and_others_are_refused(shared_cluster: Cluster,
                                                  users: dict[str, pwd.struct_passwd]) -> None:
    c = shared_cluster
    alice, bob = users["corral-alice"], users["corral-bob"]
    r = run_as(c, alice, "sbatch", "--parsable", "-o", "who-%j.out", "--wrap", "id -u; id -g; sleep 30")
    assert r.returncode == 0, r.stderr
    jid = int(r.stdout.strip())
    c.wait_state(jid, "RUNNING")
    out = Path(alice.pw_dir) / f"who-{jid}.out"
    c.wait_for(lambda: out.exists() and len(out.read_text().split()) == 2, what="job output")
    assert out.read_text().split() == [str(alice.pw_uid), str(alice.pw_gid)]
    assert out.stat().st_uid == alice.pw_uid

    # Slurm's words differ by command: scancel and requeue say "Access/permission denied",
    # hold and update "Invalid user id"
    for cmd, said in ((["scancel", str(jid)], "Access/permission denied"),
                      (["scontrol", "hold", str(jid)], "Invalid user id"),
                      (["scontrol", "requeue", str(jid)], "Access/permission denied"),
                      (["scontrol", "update", f"jobid={jid}", "TimeLimit=5"], "Invalid user id")):
        r = run_as(c, bob, *cmd)
        assert r.returncode != 0, cmd
        assert said in r.stderr, (cmd, r.stderr)
    r = run_as(c, bob, "srun", "--jobid", str(jid), "--overlap", "true")
    assert r.returncode != 0 and "Access/permission denied" in r.stderr, r.stderr
    r = run_as(c, bob, "cat", str(out))
    assert r.returncode != 0 and "Permission denied" in r.stderr  # output is private to its owner
    r = run_as(c, alice, "srun", "--jobid", str(jid), "--overlap", "id", "-u")
    assert r.returncode == 0 and r.stdout.strip() == str(alice.pw_uid), r.stderr
    r = run_as(c, bob, "scontrol", "update", "nodename=node-1", "state=drain", "reason=x")
    assert r.returncode != 0 and "Access/permission denied" in r.stderr
    assert c.state(jid) == "RUNNING"

    # the owner may, and so may root
    r = run_as(c, alice, "scontrol", "update", f"jobid={jid}", "TimeLimit=5")
    assert r.returncode == 0, r.stderr
    c.ok("scancel", str(jid))
    c.wait_state(jid, "CANCELLED")
    # bob's sacct shows only bob's jobs by default
    r = run_as(c, bob, "sacct", "-n", "-X", "-o", "JobID")
    assert r.returncode == 0 and str(jid) not in r.stdout.split()
