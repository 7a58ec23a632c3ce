"""Adversarial tests of the node side (docs/SECURITY.md): jobs of real unprivileged users
attack the root agent and step supervisor; each attack is refused and the cluster stays
healthy (nodes up, a normal job runs).  Needs root (creates users, writes cgroups).

Each test names the rule it proves.  The fork bomb is bounded (it stops at 400 processes
even if containment failed): this suite runs on shared machines.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.agent.cgroup import cluster_group_name
from tests.e2e.cluster import Cluster, needs_test_users
from tests.e2e.test_users import run_as, users  # noqa: F401  (the `users` fixture)

pytestmark = [
    pytest.mark.slow,
    needs_test_users,
]

PIDS_MAX = 64
MEM_CAP_MB = 300  # the default memory limit of a job without --mem, through MaxRAMPercent
CGROUP_V1_MEMORY = "/sys/fs/cgroup/memory"
CGROUP_V1_PIDS = "/sys/fs/cgroup/pids"


def _total_mem_mb() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    raise AssertionError("no MemTotal in /proc/meminfo")


@pytest.fixture(scope="module")
def sec_cluster(users: dict[str, pwd.struct_passwd]) -> Iterator[Cluster]:  # noqa: F811
    base = Path(tempfile.mkdtemp(prefix="corral-sec-"))
    base.chmod(0o755)  # the users reach the socket and their scripts
    c = Cluster(base / "c")
    c.home.mkdir()
    percent = MEM_CAP_MB * 100 / _total_mem_mb()
    (c.home / "cgroup.conf").write_text(
        f"ConstrainRAMSpace=yes\nMaxRAMPercent={percent:.6f}\nCorralPidsMax={PIDS_MAX}\n")
    c.start()
    try:
        yield c
    finally:
        c.stop()
        shutil.rmtree(base, ignore_errors=True)


def _job_dir(c: Cluster, jid: int) -> Path:
    return c.home / "spool" / f"job{jid}"


def _sbatch(c: Cluster, user: pwd.struct_passwd, *args: str) -> int:
    r = run_as(c, user, "sbatch", "--parsable", *args)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.strip().split(";")[0])


def _assert_healthy(c: Cluster, user: pwd.struct_passwd) -> None:
    """Every node responds and is usable, and a normal job of `user` runs to completion."""
    states = c.ok("sinfo", "-h", "-N", "-o", "%N %T").split()
    assert states and all(s in ("idle", "mixed", "allocated", "completing")
                          for s in states[1::2]), states
    name = f"ok-{uuid.uuid4().hex[:6]}.out"
    jid = _sbatch(c, user, "-o", name, "--wrap", "echo fine")
    assert c.wait_state(jid, {"COMPLETED", "FAILED"}) == "COMPLETED"
    out = Path(user.pw_dir) / name
    c.wait_for(lambda: out.exists() and out.read_text() == "fine\n", what="a normal job's output")


def _victim(tag: str) -> Path:
    """A root-owned file in /etc that no job may change."""
    path = Path(f"/etc/corral-victim-{tag}-{uuid.uuid4().hex[:8]}")
    path.write_text("precious\n")
    path.chmod(0o644)
    return path


# ---------------------------------------------------------------------------------------

ATTACK = r"""
d=$(dirname "$0")
echo "dir=$d"
for n in status.json .status.json.tmp.1 launch.json.tmp ctl.sock stepd.pid stepd.log x; do
  ln -s "/etc/corral-pwned-$n" "$d/$n" 2>/dev/null && echo "LINKED $n"
  { echo '{"state": "COMPLETED"}' > "$d/$n"; } 2>/dev/null && echo "WROTE $n"
done
for n in ctl.sock stepd.pid launch.json script; do
  rm "$d/$n" 2>/dev/null && echo "REMOVED $n"
  mv "$d/$n" "$d/$n.x" 2>/dev/null && echo "MOVED $n"
done
chmod 777 "$d" 2>/dev/null && echo "CHMODDED"
kill -KILL $PPID 2>/dev/null && echo "KILLED the supervisor"
# leave the job's cgroups or lift their limits
while IFS=: read -r _ ctrl path; do
  base=/sys/fs/cgroup/${ctrl#name=}
  [ -n "$ctrl" ] || base=/sys/fs/cgroup/unified
  echo $$ > "$base/cgroup.procs" 2>/dev/null && echo "ESCAPED $ctrl"
  for f in pids.max memory.limit_in_bytes memory.max; do
    [ -e "$base$path/$f" ] && { echo max > "$base$path/$f"; } 2>/dev/null && echo "LIFTED $f"
  done
done < /proc/self/cgroup
cat "$d/launch.json" >/dev/null 2>&1 && echo "READ launch.json"
$PY -c '
import socket, sys, json
for path, msg in ((sys.argv[1] + "/ctl.sock", {"op": "time_limit", "seconds": 1e9}),
                  (sys.argv[2], {"job_id": int(sys.argv[3]), "event": "exited"})):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.sendto(json.dumps(msg).encode(), path)
        print("SENT", path)
    except OSError:
        pass
' "$d" "$(dirname "$d")/notify.sock" "$SLURM_JOB_ID"
echo ATTACKED
sleep 300
"""


def test_job_cannot_touch_its_supervisors_state(sec_cluster: Cluster,
                                                users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    """Rules 1, 3, 5: the job directory is root's (0711); the job can plant no link there,
    write no status, replace no control socket, reach no supervisor or agent socket, kill
    its supervisor, leave its cgroups or lift their limits."""
    c, alice = sec_cluster, users["corral-alice"]
    script = Path(alice.pw_dir) / "attack.sh"
    script.write_text("#!/bin/bash\n" + ATTACK)
    os.chown(script, alice.pw_uid, alice.pw_gid)
    name = f"attack-{uuid.uuid4().hex[:6]}.out"
    jid = _sbatch(c, alice, "-o", name, f"--export=ALL,PY={sys.executable}",
                  str(script))
    out = Path(alice.pw_dir) / name
    c.wait_for(lambda: out.exists() and "ATTACKED" in out.read_text(), what="the attack")
    text = out.read_text()
    for marker in ("LINKED", "WROTE", "REMOVED", "MOVED", "CHMODDED", "READ", "SENT", "KILLED",
                   "ESCAPED", "LIFTED"):
        assert marker not in text, text
    assert not list(Path("/etc").glob("corral-pwned-*"))
    d = _job_dir(c, jid)
    for path, mode in ((d.parent, 0o711), (d, 0o711), (d / "ctl.sock", 0o600),
                       (d.parent / "notify.sock", 0o600), (d / "stepd.pid", 0o600)):
        st = path.lstat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, mode), path
    time.sleep(1.5)  # the agent's scan has run: the job did not end itself
    assert c.state(jid) == "RUNNING"
    c.ok("scancel", str(jid))
    assert c.wait_state(jid, {"CANCELLED", "COMPLETED", "FAILED"}) == "CANCELLED"
    c.wait_for(lambda: "CANCELLED AT" in out.read_text(), what="the CANCELLED line")
    _assert_healthy(c, alice)


def test_secrets_of_a_job_are_private(sec_cluster: Cluster,
                                      users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    """Rule 4: launch.json (the environment) is root's 0600; the script copy is its owner's
    0500; another user reads neither; the owner cannot change what the supervisor reads."""
    c, alice, bob = sec_cluster, users["corral-alice"], users["corral-bob"]
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    r = run_as(c, alice, "sbatch", "--parsable", "-o", "/dev/null",
               f"--export=ALL,API_KEY={secret}", "--wrap", f"sleep 300 # {secret}")
    assert r.returncode == 0, r.stderr
    jid = int(r.stdout.strip())
    c.wait_state(jid, "RUNNING")
    d = _job_dir(c, jid)
    launch, script = d / "launch.json", d / "script"
    assert secret in launch.read_text() and secret in script.read_text()
    st = launch.lstat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o600)
    st = script.lstat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (alice.pw_uid, 0o500)
    for f in (launch, script, d / "stepd.log"):
        r = run_as(c, bob, "cat", str(f))
        assert r.returncode != 0 and secret not in r.stdout, f
    r = run_as(c, bob, "ls", str(d))
    assert r.returncode != 0  # 0711: no listing
    r = run_as(c, bob, "grep", "-r", secret, str(c.home / "spool"))
    assert secret not in r.stdout
    r = run_as(c, alice, "cat", str(launch))
    assert r.returncode != 0
    c.ok("scancel", str(jid))
    c.wait_state(jid, "CANCELLED")


def test_output_swapped_for_a_link_is_not_written_by_root(
        sec_cluster: Cluster, users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    """Rule 2: the CANCELLED line goes through the descriptor the job opened as its user;
    a link the job puts in place of its output leads root nowhere."""
    c, alice = sec_cluster, users["corral-alice"]
    victim = _victim("out")
    try:
        name = f"swap-{uuid.uuid4().hex[:6]}"
        jid = _sbatch(c, alice, "-o", f"{name}.out", "--wrap",
                      f"echo ready; mv {name}.out {name}.opened; ln -s {victim} {name}.out;"
                      " echo swapped; sleep 300")
        opened = Path(alice.pw_dir) / f"{name}.opened"
        c.wait_for(lambda: opened.exists() and "swapped" in opened.read_text(), what="the swap")
        c.ok("scancel", str(jid))
        c.wait_state(jid, "CANCELLED")
        c.wait_for(lambda: "CANCELLED AT" in opened.read_text(), what="the CANCELLED line")
        assert victim.read_text() == "precious\n"
        st = victim.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o644)
    finally:
        victim.unlink()
    _assert_healthy(c, alice)


def test_fifo_as_output_does_not_hold_the_node(sec_cluster: Cluster,
                                               users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    """Rule 2: output is opened with O_NONBLOCK as the user; a FIFO with no reader fails the
    job at once, and a FIFO nobody empties blocks only the job, never the supervisor."""
    c, alice = sec_cluster, users["corral-alice"]
    tag = uuid.uuid4().hex[:6]
    fifo = Path(alice.pw_dir) / f"fifo-{tag}"
    r = run_as(c, alice, "mkfifo", str(fifo))
    assert r.returncode == 0, r.stderr
    try:
        jid = _sbatch(c, alice, "-o", str(fifo), "--wrap", "echo never")
        assert c.wait_state(jid, {"FAILED", "COMPLETED"}, timeout=15) == "FAILED"
        # A reader that never reads: the job fills the pipe and blocks; cancel still ends it.
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            jid = _sbatch(c, alice, "-o", f"fifo-{tag}.out", "-e", str(fifo), "--wrap",
                          "echo started; head -c 300000 /dev/zero >&2; echo unblocked")
            out = Path(alice.pw_dir) / f"fifo-{tag}.out"
            c.wait_for(lambda: out.exists() and "started" in out.read_text(), what="the job")
            c.ok("scancel", str(jid))
            # KillWait=2: SIGTERM, SIGKILL, and the node is free again within seconds
            assert c.wait_state(jid, "CANCELLED", timeout=15) == "CANCELLED"
            assert "unblocked" not in out.read_text()
        finally:
            os.close(reader)
    finally:
        fifo.unlink()
    c.wait_for(lambda: c.ok("squeue", "-h", "-t", "CG", "-o", "%i").strip() == "",
               timeout=15, what="no job left COMPLETING")
    _assert_healthy(c, alice)


def _step_cgroup(c: Cluster, controller: str, jid: int) -> Path:
    return (Path("/sys/fs/cgroup") / controller / "corral" / cluster_group_name(str(c.home))
            / f"job_{jid}" / "step_batch")


BOMB = r"""$PY -c '
import os, time
made = 0
for _ in range(400):
    try:
        pid = os.fork()
    except BlockingIOError:
        break
    if pid == 0:
        time.sleep(20)
        os._exit(0)
    made += 1
print("made", made, flush=True)
time.sleep(3)
'
"""


@pytest.mark.skipif(not os.path.exists(os.path.join(CGROUP_V1_PIDS, "cgroup.procs")),
                    reason="needs the cgroup v1 pids controller")
def test_fork_bomb_is_contained(sec_cluster: Cluster,
                                users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    """Rule 5: each job step gets pids.max (CorralPidsMax in cgroup.conf): forking stops
    there, the job ends normally, and the node stays healthy."""
    c, alice = sec_cluster, users["corral-alice"]
    name = f"bomb-{uuid.uuid4().hex[:6]}.out"
    jid = _sbatch(c, alice, "-o", name, f"--export=ALL,PY={sys.executable}",
                  "--wrap", BOMB)
    out = Path(alice.pw_dir) / name
    c.wait_for(lambda: out.exists() and "made" in out.read_text(), what="the fork bomb")
    pids_max = (_step_cgroup(c, "pids", jid) / "pids.max").read_text().strip()
    assert pids_max == str(PIDS_MAX)
    made = int(out.read_text().split("made", 1)[1].split()[0])
    assert 0 < made < PIDS_MAX, out.read_text()
    assert c.wait_state(jid, {"COMPLETED", "FAILED"}, timeout=30) == "COMPLETED"
    _assert_healthy(c, alice)


HOG = r"""$PY -c '
blocks = []
for _ in range(64):
    blocks.append(bytearray(32 * 1024 * 1024))
print("survived")
'
"""


@pytest.mark.skipif(not os.path.exists(os.path.join(CGROUP_V1_MEMORY, "cgroup.procs")),
                    reason="needs the cgroup v1 memory controller")
def test_memory_hog_without_mem_is_contained(sec_cluster: Cluster,
                                             users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    """Rule 5: a job without --mem still gets a memory limit (the node's memory, bounded by
    cgroup.conf's MaxRAMPercent, here ~300 MB): a 2 GB hog is OUT_OF_MEMORY."""
    c, alice = sec_cluster, users["corral-alice"]
    name = f"hog-{uuid.uuid4().hex[:6]}.out"
    jid = _sbatch(c, alice, "-o", name, f"--export=ALL,PY={sys.executable}",
                  "--wrap", "sleep 1; " + HOG)
    c.wait_state(jid, {"RUNNING", "OUT_OF_MEMORY", "FAILED"})
    limit_file = _step_cgroup(c, "memory", jid) / "memory.limit_in_bytes"
    try:
        limit_mb = int(limit_file.read_text()) // (1024 * 1024)
        assert abs(limit_mb - MEM_CAP_MB) <= 1, limit_mb
    except FileNotFoundError:
        pass  # already over: the state below still shows the limit held
    assert c.wait_state(jid, {"OUT_OF_MEMORY", "COMPLETED", "FAILED"},
                        timeout=60) == "OUT_OF_MEMORY"
    assert "survived" not in (Path(alice.pw_dir) / name).read_text()
    _assert_healthy(c, alice)


def test_garbage_status_is_ignored_and_the_link_survives(
        sec_cluster: Cluster, users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    """Rule 3: the agent validates status files; an invalid one (here written by root, as
    no job can) is logged and ignored: no link dropped, no job ended, accounting intact."""
    c, alice = sec_cluster, users["corral-alice"]
    jid = _sbatch(c, alice, "-o", "/dev/null", "--wrap", "sleep 300")
    c.wait_state(jid, "RUNNING")
    status = _job_dir(c, jid) / "status.json"
    status.write_text(json.dumps({"state": "BOGUS", "exit_code": "x", "end_time": "never"}))
    time.sleep(2.5)  # two scans of the agent
    assert c.state(jid) == "RUNNING"
    nodes = c.ok("sinfo", "-h", "-N", "-o", "%N %T").split()
    assert all(s in ("idle", "mixed", "allocated") for s in nodes[1::2]), nodes
    c.ok("scancel", str(jid))
    assert c.wait_state(jid, "CANCELLED") == "CANCELLED"
    _assert_healthy(c, alice)
