"""Advanced reservations through the real commands on a running cluster: the maintenance
flow of docs/POLICY.md as written, backfill before a reservation, a user's reservation,
update and delete, Slurm's refusals, and a controller restart."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import DEFAULT_CONFIG, Cluster, needs_test_users

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
MAINT_REASON = "ReqNodeNotAvail, Reserved for maintenance"
USERS = ("corral-resv-ann", "corral-resv-ben")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    # reachable by the test users too (their module fixture below)
    home = Path(tempfile.mkdtemp(prefix="corral-resv-"))
    home.chmod(0o755)
    c = Cluster(home / "c", DEFAULT_CONFIG)
    c.start()
    try:
        yield c
    finally:
        c.stop()
        shutil.rmtree(home, ignore_errors=True)


def reason(c: Cluster, job: int) -> str:
    return c.ok("squeue", "-h", "-j", str(job), "-o", "%r").strip()


def wait_reason(c: Cluster, job: int, want: str) -> None:
    c.wait_for(lambda: reason(c, job) == want, timeout=30, what=f"job {job} reason {want!r}")


def cleanup(c: Cluster, *names: str) -> None:
    """Cancel the test's jobs, delete its reservations, and wait for an empty queue."""
    c.run("scancel", "-u", "root")
    for name in names:
        c.run("scontrol", "delete", f"ReservationName={name}")
    c.wait_for(lambda: not c.squeue_ids(), timeout=60, what="an empty queue")


def policy_block() -> str:
    text = (ROOT / "docs" / "POLICY.md").read_text()
    section = text.split("## Reservations", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    assert len(blocks) == 1
    return blocks[0]


def test_maintenance_flow_as_documented(cluster: Cluster) -> None:
    c = cluster
    r = subprocess.run(["bash", "-c", "set -euo pipefail\n" + policy_block()],
                       capture_output=True, text=True, timeout=60, cwd=str(c.workdir), env=c.env)
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        lines = r.stdout.splitlines()
        assert lines[0] == "Reservation created: maint"
        assert re.fullmatch(r"ReservationName=maint StartTime=\S+T08:00:00 "
                            r"EndTime=\S+T12:00:00 Duration=04:00:00", lines[1]), lines[1]
        assert lines[2] == ("   Nodes=node-[1-4] NodeCnt=4 CoreCnt=64 Features=(null) "
                            "PartitionName=(null) Flags=MAINT,IGNORE_JOBS,SPEC_NODES,ALL_NODES")
        assert lines[3] == "   TRES=cpu=64"
        assert lines[4].startswith("   Users=root Groups=(null) Accounts=(null) Licenses=(null) "
                                   "State=INACTIVE")
        assert re.fullmatch(r"RESV_NAME +STATE +START_TIME +END_TIME +DURATION +NODELIST",
                            lines[7]), lines[7]
        assert lines[8].split() == ["maint", "INACTIVE", lines[1].split()[1][10:],
                                    lines[1].split()[2][8:], "04:00:00", "node-[1-4]"]
        # a job that ends before Tuesday runs; one without a time limit waits for after it
        short = c.sbatch("--time=10", "--wrap", "sleep 60")
        forever = c.sbatch("--time=UNLIMITED", "--wrap", "true")
        c.wait_state(short, "RUNNING")
        wait_reason(c, forever, MAINT_REASON)
        assert c.state(forever) == "PENDING"
        # the cluster stays in service until then
        assert "maint" not in c.ok("sinfo", "-h", "-o", "%t")
    finally:
        cleanup(c, "maint")


def test_backfill_fills_the_time_before_a_reservation(cluster: Cluster) -> None:
    c = cluster
    try:
        out = c.ok("scontrol", "create", "reservation", "ReservationName=soon",
                   "StartTime=now+30minutes", "Duration=60", "Nodes=ALL",
                   "Flags=MAINT,IGNORE_JOBS", "Users=root")
        assert out == "Reservation created: soon\n"
        short = [c.sbatch("--time=20", "-N1", "--exclusive", "--wrap", "sleep 60")
                 for _ in range(2)]
        long = c.sbatch("--time=45", "--wrap", "true")
        for j in short:
            c.wait_state(j, "RUNNING")
        wait_reason(c, long, MAINT_REASON)
        assert c.state(long) == "PENDING"
        # the reservation's own jobs wait for it to start
        mine = c.sbatch("--reservation=soon", "--time=5", "--wrap", "true")
        wait_reason(c, mine, "Reservation")
        # moved to start now: its job runs, the others stay off its nodes
        assert c.ok("scontrol", "update", "ReservationName=soon",
                    "StartTime=now") == "Reservation updated.\n"
        c.wait_state(mine, "COMPLETED")
        assert c.ok("srun", "--reservation=soon", "-t", "1", "hostname", timeout=60).strip()
        blocked = c.sbatch("--time=1", "--wrap", "true")
        wait_reason(c, blocked, MAINT_REASON)
        states = c.ok("sinfo", "-h", "-o", "%t").split()
        assert "maint" in states and "idle" not in states, states
    finally:
        cleanup(c, "soon")


def test_partial_maintenance_keeps_jobs_off_its_nodes(cluster: Cluster) -> None:
    c = cluster
    try:
        c.ok("scontrol", "create", "res", "StartTime=now", "Duration=30",
             "Nodes=node-[1-2]", "Flags=MAINT", "Users=root", "ReservationName=half")
        # the short partition is node-[1-2]: its jobs wait for the window to end
        in_short = c.sbatch("-p", "short", "--time=1", "--wrap", "true")
        wait_reason(c, in_short, MAINT_REASON)
        # debug jobs run on node-[3-4] only
        jobs = [c.sbatch("-N1", "--exclusive", "--time=5", "--wrap", "sleep 30")
                for _ in range(3)]
        c.wait_for(lambda: sum(c.state(j) == "RUNNING" for j in jobs) == 2,
                   what="two jobs running")
        time.sleep(1.5)  # a pass or more later, still only two
        running = [j for j in jobs if c.state(j) == "RUNNING"]
        assert len(running) == 2
        nodes = {c.ok("squeue", "-h", "-j", str(j), "-o", "%N").strip() for j in running}
        assert nodes == {"node-3", "node-4"}
        assert c.ok("sinfo", "-h", "-N", "-p", "debug", "-n", "node-[1-2]", "-o", "%N %t").split() == \
            ["node-1", "maint", "node-2", "maint"]
        # the reservation's users run in it
        inside = c.sbatch("--reservation=half", "-N2", "--time=1", "--wrap", "hostname")
        c.wait_state(inside, "COMPLETED")
        assert c.ok("sacct", "-j", str(inside), "-X", "-n", "-o", "NodeList%20").strip() == \
            "node-[1-2]"
        assert "\n   Reservation=half\n" in c.ok("scontrol", "show", "job", str(inside))
        assert c.ok("squeue", "-h", "-t", "all", "-j", str(inside), "-o", "%v") == "half\n"
        assert c.ok("sacct", "-j", str(inside), "-X", "-n", "-P", "-o", "Reservation") == \
            "half\n"
        # ended early: the waiting job runs
        assert c.ok("scontrol", "delete", "ReservationName=half") == ""
        c.wait_state(in_short, "COMPLETED")
    finally:
        cleanup(c, "half")


def test_update_show_and_delete(cluster: Cluster) -> None:
    c = cluster
    try:
        c.ok("scontrol", "create", "reservation", "ReservationName=course",
             "StartTime=now+1hour", "Duration=2:00:00", "NodeCnt=2", "Users=root")
        show = c.ok("scontrol", "show", "reservation", "course")
        assert "Nodes=node-[1-2] NodeCnt=2 CoreCnt=32 " in show and "Duration=02:00:00" in show
        assert c.ok("scontrol", "update", "ReservationName=course", "Duration+=30",
                    "Accounts=root", "Flags=FLEX") == "Reservation updated.\n"
        show = c.ok("scontrol", "-o", "show", "res", "course")
        assert " Duration=02:30:00 " in show and " Accounts=root " in show
        assert " Flags=FLEX " in show and show.count("\n") == 1
        assert c.ok("scontrol", "delete", "reservation", "course") == ""
        r = c.run("scontrol", "show", "reservation", "course")
        assert (r.returncode, r.stdout) == (1, "Reservation course not found\n")
        assert c.ok("scontrol", "show", "reservation") == "No reservations in the system\n"
        assert c.ok("sinfo", "-T") == "No reservations in the system\n"
        r = c.run("scontrol", "delete", "ReservationName=course")
        assert (r.returncode, r.stderr) == (
            1, "delete_reservation ReservationName=course: Requested reservation is invalid\n")
        r = c.run("scontrol", "update", "ReservationName=course", "Duration=10")
        assert (r.returncode, r.stderr) == (
            1, "Error updating the reservation: Requested reservation is invalid\n")
    finally:
        cleanup(c, "course")


@pytest.mark.parametrize(("args", "stdout", "stderr"), [
    (["Duration=60", "Nodes=node-1", "Users=root"], "",
     "scontrol: error: A start time must be given.  No reservation created.\n"),
    (["StartTime=now", "Duration=60", "Nodes=node-1"], "",
     "scontrol: error: Either Users/Groups and/or Accounts must be specified.  "
     "No reservation created.\n"),
    (["StartTime=now", "Duration=60", "Nodes=node-1", "Users=root", "Flags=BOGUS"], "",
     "scontrol: error: Error parsing flags BOGUS.  No reservation created.\n"),
    (["StartTime=later", "Duration=60", "Nodes=node-1", "Users=root"], "",
     "scontrol: error: Invalid start time StartTime=later.  No reservation created.\n"),
    (["StartTime=now", "Duration=60", "Nodes=node-9", "Users=root"], "",
     "Error creating the reservation: Invalid node name specified\n"),
    (["StartTime=now", "Duration=60", "Nodes=node-1", "Users=no-such-user-x"], "",
     "Error creating the reservation: Invalid user id\n"),
    (["StartTime=now", "Duration=60", "NodeCnt=9", "Users=root"],
     "Note, unless nodes are directly requested a reservation must exist in a single "
     "partition.\nIf no partition is requested the default partition is assumed.\n",
     "Error creating the reservation: Requested node configuration is not available\n"),
])
def test_bad_requests_get_slurms_errors(cluster: Cluster, args: list[str], stdout: str,
                                        stderr: str) -> None:
    r = cluster.run("scontrol", "create", "reservation", *args)
    assert (r.returncode, r.stdout, r.stderr) == (1, stdout, stderr)
    assert cluster.ok("scontrol", "show", "reservation") == "No reservations in the system\n"


def test_busy_and_overlapping_nodes_are_refused(cluster: Cluster) -> None:
    c = cluster
    try:
        job = c.sbatch("-w", "node-4", "--time=5", "--wrap", "sleep 60")
        c.wait_state(job, "RUNNING")
        r = c.run("scontrol", "create", "reservation", "ReservationName=a", "StartTime=now",
                  "Duration=10", "Nodes=node-4", "Users=root")
        assert (r.returncode, r.stderr) == (1, "Error creating the reservation: "
                                               "Requested nodes are busy\n")
        c.ok("scontrol", "create", "reservation", "ReservationName=a", "StartTime=now+1hour",
             "Duration=10", "Nodes=node-[3-4]", "Users=root")
        r = c.run("scontrol", "create", "reservation", "ReservationName=b",
                  "StartTime=now+1hour", "Duration=10", "Nodes=node-3", "Users=root")
        assert (r.returncode, r.stderr) == (
            1, "Error creating the reservation: Requested reservation overlaps with another "
               "reservation\n")
        r = c.run("scontrol", "create", "reservation", "ReservationName=a",
                  "StartTime=now+3hours", "Duration=10", "Nodes=node-1", "Users=root")
        assert (r.returncode, r.stderr) == (
            1, "Error creating the reservation: Duplicate reservation name\n")
        r = c.run("sbatch", "--reservation=nope", "--wrap", "true")
        assert (r.returncode, r.stderr) == (
            1, "sbatch: error: Batch job submission failed: Requested reservation is invalid\n")
    finally:
        cleanup(c, "a", "b")


def test_reservations_survive_a_controller_restart(cluster: Cluster) -> None:
    c = cluster
    try:
        c.ok("scontrol", "create", "reservation", "ReservationName=keep", "StartTime=now+2hours",
             "Duration=60", "Nodes=node-2", "Users=root", "Flags=DAILY")
        before = c.ok("scontrol", "show", "reservation", "keep")
        os.kill(int((c.home / "controller.pid").read_text()), signal.SIGKILL)
        time.sleep(0.5)
        c.ok("corral", "up", timeout=60)
        assert c.ok("scontrol", "show", "reservation", "keep") == before
        assert "Flags=DAILY,SPEC_NODES" in before
    finally:
        cleanup(c, "keep")


# ---- users ------------------------------------------------------------------------------
def grant_traverse(path: str) -> list[tuple[str, int]]:
    """o+x on `path`'s ancestors (the interpreter may live under root's 0700 home)."""
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
    import sys

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


def run_as(c: Cluster, user: pwd.struct_passwd, *args: str,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = dict(c.env, HOME=user.pw_dir, USER=user.pw_name, LOGNAME=user.pw_name, **(env or {}))
    return subprocess.run(list(args), capture_output=True, text=True, timeout=30, env=e,
                          cwd=user.pw_dir, user=user.pw_uid, group=user.pw_gid, extra_groups=[])


def job_of(r: subprocess.CompletedProcess[str]) -> int:
    assert r.returncode == 0, r.stdout + r.stderr
    return int(r.stdout.strip().split(";")[0])


@needs_test_users
def test_a_users_job_runs_in_their_reservation(cluster: Cluster,
                                               users: dict[str, pwd.struct_passwd]) -> None:
    c = cluster
    ann, ben = users[USERS[0]], users[USERS[1]]
    try:
        r = run_as(c, ann, "scontrol", "create", "reservation", "ReservationName=lab",
                   "StartTime=now", "Duration=30", "Nodes=node-4", f"Users={ann.pw_name}")
        assert (r.returncode, r.stderr) == (1, "Error creating the reservation: Invalid user id\n")
        c.ok("scontrol", "create", "reservation", "ReservationName=lab", "StartTime=now",
             "Duration=30", "Nodes=node-4", f"Users={ann.pw_name}")
        assert c.ok("sinfo", "-h", "-p", "debug", "-n", "node-4", "-o", "%t") == "resv\n"
        mine = job_of(run_as(c, ann, "sbatch", "--parsable", "--time=1", "--wrap", "hostname",
                             env={"SBATCH_RESERVATION": "lab"}))
        c.wait_state(mine, "COMPLETED")
        assert c.ok("sacct", "-j", str(mine), "-X", "-n", "-o", "NodeList").strip() == "node-4"
        r = run_as(c, ben, "sbatch", "--reservation=lab", "--wrap", "true")
        assert (r.returncode, r.stderr) == (
            1, "sbatch: error: Batch job submission failed: Access denied to requested "
               "reservation\n")
        other = job_of(run_as(c, ben, "sbatch", "--parsable", "-w", "node-4", "--time=1",
                              "--wrap", "true"))
        time.sleep(2)  # passes go by: it stays off the reserved node
        assert c.state(other) == "PENDING"
        r = run_as(c, ben, "scontrol", "delete", "ReservationName=lab")
        assert (r.returncode, r.stderr) == (
            1, "delete_reservation ReservationName=lab: Invalid user id\n")
        c.ok("scontrol", "delete", "ReservationName=lab")
        c.wait_state(other, "COMPLETED")
    finally:
        c.run("scancel", "-u", ann.pw_name)
        c.run("scancel", "-u", ben.pw_name)
        cleanup(c, "lab")
