"""The step supervisor with real processes: output files, exit states, cancel, time limits,
signals, suspend/resume, memory limits, identity switching, detachment, notifications.

Every test bounds its waits and its fixture kills whatever it started."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from corral.agent import stepd
from corral.agent.cgroup import StepCgroup, detect_version, format_cpus
from tests.unit.clean_spawner import _close_clean_spawner, spawn_step  # noqa: F401

IS_ROOT = os.geteuid() == 0
V1_ROOT = "/sys/fs/cgroup"
V2_ROOT = "/sys/fs/cgroup/unified"


def _cgroup_writable(root: str, version: int) -> bool:
    if not IS_ROOT or detect_version(root) != version:
        return False
    probe = StepCgroup(root, f"probe{uuid.uuid4().hex[:8]}")
    try:
        probe.create()
    except OSError:
        return False
    probe.remove()
    return True


HAVE_V1 = _cgroup_writable(V1_ROOT, 1)
HAVE_V2 = _cgroup_writable(V2_ROOT, 2)

# The ways a step's processes are tracked: v1 controllers, a v2 hierarchy, none (fallback).
TRACKING = [
    pytest.param(V1_ROOT, id="cgroup-v1",
                 marks=pytest.mark.skipif(not HAVE_V1, reason="no writable cgroup v1 here")),
    pytest.param(V2_ROOT, id="cgroup-v2",
                 marks=pytest.mark.skipif(not HAVE_V2, reason="no writable cgroup v2 here")),
    pytest.param(None, id="no-cgroup"),
]


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_for(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


class Jobs:
    """Builds job directories and remembers what to clean up."""

    _next_id = 900000 + os.getpid() % 1000 * 10

    def __init__(self, base: str) -> None:
        self.base = base
        self.dirs: list[str] = []
        self.extra_pids: list[int] = []

    def make(self, body: str, **fields: Any) -> str:
        Jobs._next_id += 1
        job_id = Jobs._next_id
        job_dir = os.path.join(self.base, f"job{job_id}")
        os.mkdir(job_dir)
        script = os.path.join(job_dir, "script.sh")
        with open(script, "w") as f:
            f.write("#!/bin/bash\n" + body)
        os.chmod(script, 0o700)
        pw = pwd.getpwuid(os.getuid())
        launch: dict[str, Any] = {
            "job_id": job_id, "step": "batch", "uid": os.getuid(), "gid": os.getgid(),
            "user": pw.pw_name, "home": pw.pw_dir, "script": script, "argv": [],
            "work_dir": job_dir, "stdout": os.path.join(job_dir, "out"),
            "stderr": os.path.join(job_dir, "err"), "stdin": None, "open_mode": "truncate",
            "env": {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": pw.pw_dir,
                    "PYTHON": sys.executable},
            "time_limit": -1, "kill_wait": 2, "signal": None, "cpus": None, "mem_mb": None,
            "notify_socket": None, "cgroup_root": None,
        }
        launch.update(fields)
        with open(os.path.join(job_dir, "launch.json"), "w") as f:
            json.dump(launch, f)
        self.dirs.append(job_dir)
        return job_dir

    def start(self, body: str, direct: bool = False, **fields: Any) -> str:
        """Make and spawn a step: from a clean process (clean_spawner), or `direct`ly from
        this one where the caller's side of spawn_step is what the test checks."""
        job_dir = self.make(body, **fields)
        (stepd.spawn_step if direct else spawn_step)(job_dir)
        return job_dir

    def cleanup(self) -> None:
        for job_dir in self.dirs:
            if stepd.is_alive(job_dir):
                stepd.send_control(job_dir, {"op": "cancel"})
                try:
                    _wait_for(lambda d=job_dir: not stepd.is_alive(d), 10, "supervisor exit")
                except AssertionError:
                    with open(os.path.join(job_dir, stepd.PID_FILE)) as f:
                        os.kill(int(f.read().split()[0]), signal.SIGKILL)
        for pid in self.extra_pids:
            if _pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def jobs() -> Iterator[Jobs]:
    # Not pytest's tmp_path: its parents are mode 0700, which another uid cannot enter.
    base = tempfile.mkdtemp(prefix="corral-stepd-")
    os.chmod(base, 0o755)
    j = Jobs(base)
    try:
        yield j
    finally:
        j.cleanup()
        shutil.rmtree(base, ignore_errors=True)


def wait_status(job_dir: str, timeout: float = 15) -> dict[str, Any]:
    status: dict[str, Any] = _wait_for(lambda: stepd.read_status(job_dir), timeout,
                                       f"status of {job_dir}")
    return status


def read(job_dir: str, name: str) -> str:
    """A file of the job directory; "" while it does not exist yet."""
    try:
        with open(os.path.join(job_dir, name)) as f:
            return f.read()
    except FileNotFoundError:
        return ""


# ---------------------------------------------------------------------------------------

def test_output_files_argv_env_and_workdir(jobs: Jobs) -> None:
    d = jobs.start('echo "out $1 $2 $GREETING"; echo "to err" >&2; pwd\n',
                   argv=["a b", "c"], env={"PATH": "/usr/bin:/bin", "GREETING": "hi"},
                   work_dir="/")
    status = wait_status(d)
    assert status["state"] == "COMPLETED" and (status["exit_code"], status["signal"]) == (0, 0)
    assert read(d, "out") == "out a b c hi\n/\n"
    assert read(d, "err") == "to err\n"
    assert status["pid"] > 0 and status["end_time"] >= status["start_time"] > 0


def test_shared_output_file_and_append_mode(jobs: Jobs) -> None:
    d = jobs.make("echo one; echo two >&2\n", open_mode="append")
    out = os.path.join(d, "out")
    with open(out, "w") as f:
        f.write("before\n")
    launch = json.loads(read(d, "launch.json"))
    launch["stderr"] = out
    with open(os.path.join(d, "launch.json"), "w") as f:
        json.dump(launch, f)
    spawn_step(d)
    assert wait_status(d)["state"] == "COMPLETED"
    assert read(d, "out") == "before\none\ntwo\n"


def test_stdin_file(jobs: Jobs) -> None:
    d = jobs.make("tr a-z A-Z\n")
    with open(os.path.join(d, "in"), "w") as f:
        f.write("shout\n")
    launch = json.loads(read(d, "launch.json"))
    launch["stdin"] = os.path.join(d, "in")
    with open(os.path.join(d, "launch.json"), "w") as f:
        json.dump(launch, f)
    spawn_step(d)
    wait_status(d)
    assert read(d, "out") == "SHOUT\n"


@pytest.mark.parametrize(("body", "state", "exit_code", "sig"), [
    ("exit 0\n", "COMPLETED", 0, 0),
    ("exit 3\n", "FAILED", 3, 0),
    ("false\n", "FAILED", 1, 0),
    ("kill -USR2 $$\nsleep 5\n", "FAILED", 0, signal.SIGUSR2),
])
def test_exit_states(jobs: Jobs, body: str, state: str, exit_code: int, sig: int) -> None:
    status = wait_status(jobs.start(body))
    assert (status["state"], status["exit_code"], status["signal"]) == (state, exit_code, sig)


def test_workdir_missing_falls_back_to_tmp(jobs: Jobs) -> None:
    d = jobs.start("pwd\n", work_dir="/nonexistent/dir")
    assert wait_status(d)["state"] == "COMPLETED"
    assert read(d, "out") == "/tmp\n"
    assert read(d, "err") == ("slurmstepd: error: couldn't chdir to `/nonexistent/dir': "
                              "No such file or directory: going to /tmp instead\n")


def test_output_directory_missing_fails_like_slurm(jobs: Jobs) -> None:
    d = jobs.start("echo never\n", stdout="/nonexistent/dir/out", stderr="/nonexistent/dir/out")
    status = wait_status(d)
    assert (status["state"], status["exit_code"], status["signal"]) == ("FAILED", 0, 53)
    assert "Could not open stdout file /nonexistent/dir/out" in read(d, stepd.LOG_FILE)


def test_script_not_executable(jobs: Jobs) -> None:
    d = jobs.make("echo never\n")
    os.chmod(os.path.join(d, "script.sh"), 0o600)
    spawn_step(d)
    status = wait_status(d)
    assert (status["state"], status["exit_code"], status["signal"]) == ("FAILED", 13, 0)
    assert read(d, "err") == (f"slurmstepd: error: execve(): {d}/script.sh: "
                              "Permission denied\n")


def test_bad_interpreter(jobs: Jobs) -> None:
    d = jobs.make("")
    with open(os.path.join(d, "script.sh"), "w") as f:
        f.write("#!/no/such/shell\necho never\n")
    spawn_step(d)
    status = wait_status(d)
    assert (status["state"], status["exit_code"]) == ("FAILED", 2)
    assert read(d, "err") == ("slurmstepd: error: execve(): bad interpreter(/no/such/shell): "
                              "No such file or directory\n")


def test_bad_launch_description_fails_the_job(jobs: Jobs) -> None:
    d = jobs.make("echo never\n")
    with open(os.path.join(d, "launch.json"), "w") as f:
        f.write("{not json")
    spawn_step(d)
    assert wait_status(d)["state"] == "FAILED"
    assert "bad launch.json" in read(d, stepd.LOG_FILE)


def _spawn_tree_script(pid_file: str) -> str:
    # A background child, a child that left the session with setsid, and a daemon that
    # double-forked away from the shell (reparented): cancel must reach all of them.
    return f"""
sleep 300 &
echo $! >> {pid_file}
setsid sleep 301 &
echo $! >> {pid_file}
$PYTHON -c 'import os,time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open("{pid_file}", "a").write(str(os.getpid()) + "\\n"); time.sleep(302)
    os._exit(0)
os.wait()'
echo $$ >> {pid_file}
sleep 303
"""


@pytest.mark.parametrize("cgroup_root", TRACKING)
def test_cancel_kills_every_process(jobs: Jobs, cgroup_root: str | None) -> None:
    pid_file = os.path.join(jobs.base, f"pids-{uuid.uuid4().hex}")
    d = jobs.start(_spawn_tree_script(pid_file), cgroup_root=cgroup_root, kill_wait=1)

    def pids() -> list[int]:
        try:
            with open(pid_file) as f:
                values = [int(x) for x in f.read().split()]
        except FileNotFoundError:
            return []
        return values if len(values) == 4 else []

    started = _wait_for(pids, 10, "the job's processes")
    jobs.extra_pids.extend(started)
    assert all(_pid_alive(p) for p in started)
    assert stepd.send_control(d, {"op": "cancel"})
    status = wait_status(d)
    assert (status["state"], status["signal"]) == ("CANCELLED", signal.SIGTERM)
    _wait_for(lambda: not any(_pid_alive(p) for p in started), 5, "all job processes gone")
    assert "CANCELLED AT" in read(d, "err")
    _wait_for(lambda: not stepd.is_alive(d), 5, "supervisor exit")
    assert not stepd.send_control(d, {"op": "cancel"})
    if cgroup_root is not None:
        job_id = json.loads(read(d, "launch.json"))["job_id"]
        sub = "freezer" if cgroup_root == V1_ROOT else ""
        assert not os.path.exists(os.path.join(cgroup_root, sub, "corral", f"job_{job_id}"))


def test_leftover_background_processes_are_killed_at_step_end(jobs: Jobs) -> None:
    d = jobs.start("sleep 300 &\necho $!\n")
    assert wait_status(d)["state"] == "COMPLETED"
    leftover = int(read(d, "out"))
    jobs.extra_pids.append(leftover)
    _wait_for(lambda: not _pid_alive(leftover), 5, "the background sleep to be killed")


def test_cancel_escalates_to_sigkill_after_kill_wait(jobs: Jobs) -> None:
    d = jobs.start("trap 'echo got TERM' TERM\necho ready\nwhile true; do sleep 0.05; done\n",
                   kill_wait=1)
    _wait_for(lambda: read(d, "out") == "ready\n", 10, "the script to start")
    t0 = time.monotonic()
    stepd.send_control(d, {"op": "cancel"})
    status = wait_status(d)
    waited = time.monotonic() - t0
    assert (status["state"], status["signal"]) == ("CANCELLED", signal.SIGKILL)
    assert "got TERM" in read(d, "out")
    assert 0.9 <= waited < 5


def test_requeue(jobs: Jobs) -> None:
    d = jobs.start("echo ready\nsleep 300\n")
    _wait_for(lambda: read(d, "out") == "ready\n", 10, "the script to start")
    stepd.send_control(d, {"op": "requeue"})
    assert wait_status(d)["state"] == "REQUEUED"
    assert "DUE TO JOB REQUEUE ***" in read(d, "err")


def test_time_limit_with_batch_warning_signal(jobs: Jobs) -> None:
    body = ("trap 'echo USR1 >> marker' USR1\n"
            "while true; do sleep 0.05; done\n")
    d = jobs.start(body, time_limit=2, kill_wait=1,
                   signal={"num": int(signal.SIGUSR1), "secs": 1, "batch_only": True})
    t0 = time.monotonic()
    _wait_for(lambda: os.path.exists(os.path.join(d, "marker")), 5, "the USR1 marker")
    # at limit - secs; the marker read at the end proves it came before the kill
    assert 0.7 < time.monotonic() - t0 < 3.5
    status = wait_status(d)
    assert (status["state"], status["signal"]) == ("TIMEOUT", signal.SIGTERM)
    assert 1.8 < status["end_time"] - status["start_time"] < 6
    assert read(d, "marker") == "USR1\n"
    assert "DUE TO TIME LIMIT ***" in read(d, "err")


def test_time_limit_can_be_extended(jobs: Jobs) -> None:
    d = jobs.start("sleep 2\n", time_limit=1)
    stepd.send_control(d, {"op": "time_limit", "seconds": 10})
    assert wait_status(d)["state"] == "COMPLETED"


def test_signal_batch_only_or_all(jobs: Jobs) -> None:
    body = ("trap 'echo shell got USR1' USR1\n"
            "( trap 'echo child got USR1; exit 0' USR1; while true; do sleep 0.05; done ) &\n"
            "echo ready\n"
            "while true; do sleep 0.05; done\n")
    d = jobs.start(body)
    _wait_for(lambda: "ready" in read(d, "out"), 10, "the script to start")
    stepd.send_control(d, {"op": "signal", "signal": int(signal.SIGUSR1), "batch_only": True})
    _wait_for(lambda: "shell got USR1" in read(d, "out"), 5, "USR1 in the shell")
    time.sleep(0.3)
    assert "child got USR1" not in read(d, "out")
    stepd.send_control(d, {"op": "signal", "signal": int(signal.SIGUSR1), "batch_only": False})
    _wait_for(lambda: "child got USR1" in read(d, "out"), 5, "USR1 in the child")
    # Nonsense is logged and ignored; the supervisor keeps running the job.
    assert stepd.send_control(d, {"op": "signal", "signal": 999, "batch_only": False})
    assert stepd.send_control(d, {"op": "no-such-op"})
    time.sleep(0.2)
    assert stepd.is_alive(d) and stepd.read_status(d) is None
    log_text = read(d, stepd.LOG_FILE)
    assert "unknown message op 'no-such-op'" in log_text
    assert "signal.signal: 999 is out of range" in log_text
    stepd.send_control(d, {"op": "cancel"})
    assert wait_status(d)["state"] == "CANCELLED"


@pytest.mark.parametrize("cgroup_root", TRACKING)
def test_suspend_and_resume(jobs: Jobs, cgroup_root: str | None) -> None:
    body = "n=0\nwhile true; do n=$((n+1)); echo $n > count.tmp; mv count.tmp count; " \
           "sleep 0.02; done\n"
    d = jobs.start(body, cgroup_root=cgroup_root)

    def count() -> int:
        try:
            return int(read(d, "count"))
        except (FileNotFoundError, ValueError):
            return 0

    _wait_for(lambda: count() > 3, 10, "the counter to run")
    stepd.send_control(d, {"op": "suspend"})
    time.sleep(0.3)
    frozen_at = count()
    time.sleep(0.6)
    assert count() == frozen_at, "the counter advanced while suspended"
    stepd.send_control(d, {"op": "resume"})
    _wait_for(lambda: count() > frozen_at + 3, 5, "the counter to advance after resume")
    stepd.send_control(d, {"op": "suspend"})
    time.sleep(0.2)
    stepd.send_control(d, {"op": "cancel"})  # a suspended job can still be cancelled
    assert wait_status(d)["state"] == "CANCELLED"


def test_suspended_time_does_not_count_toward_the_limit(jobs: Jobs) -> None:
    d = jobs.start("sleep 1.5\n", time_limit=2)
    stepd.send_control(d, {"op": "suspend"})
    time.sleep(1.5)
    stepd.send_control(d, {"op": "resume"})
    assert wait_status(d)["state"] == "COMPLETED"


@pytest.mark.skipif(not HAVE_V1, reason="needs a writable cgroup v1 memory controller (root)")
def test_memory_limit_out_of_memory(jobs: Jobs) -> None:
    body = ('$PYTHON -c "\nblocks = []\nfor _ in range(64):\n'
            '    blocks.append(bytearray(16 * 1024 * 1024))\nprint(\'survived\')"\n')
    d = jobs.start(body, cgroup_root=V1_ROOT, mem_mb=64)
    status = wait_status(d, timeout=30)
    assert status["state"] == "OUT_OF_MEMORY"
    assert "survived" not in read(d, "out")
    assert "oom-kill event(s) in StepId=" in read(d, "err")


@pytest.mark.skipif(not HAVE_V1, reason="needs a writable cgroup v1 memory controller (root)")
def test_memory_limit_not_reached_completes(jobs: Jobs) -> None:
    d = jobs.start("$PYTHON -c 'x = bytearray(8 * 1024 * 1024)'\n", cgroup_root=V1_ROOT,
                   mem_mb=256, cpus=[0])
    assert wait_status(d, timeout=30)["state"] == "COMPLETED"


def test_cpu_affinity(jobs: Jobs) -> None:
    cpu = sorted(os.sched_getaffinity(0))[-1]
    d = jobs.start("$PYTHON -c 'import os; print(sorted(os.sched_getaffinity(0)))'\n",
                   cpus=[cpu], cgroup_root=V1_ROOT if HAVE_V1 else None)
    assert wait_status(d)["state"] == "COMPLETED"
    assert read(d, "out") == f"[{cpu}]\n"


@pytest.fixture
def other_user() -> Iterator[pwd.struct_passwd]:
    if not IS_ROOT or shutil.which("useradd") is None or shutil.which("userdel") is None:
        pytest.skip("needs root and useradd to create a temporary user")
    name = f"crl{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True,
                   capture_output=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True)


def _owner_dir(jobs: Jobs, user: pwd.struct_passwd) -> str:
    """A directory of `user` for its job's output (the job directory is the supervisor's)."""
    path = tempfile.mkdtemp(prefix="out-", dir=jobs.base)
    os.chown(path, user.pw_uid, user.pw_gid)
    return path


def _as_owner(jobs: Jobs, body: str, user: pwd.struct_passwd, **fields: Any) -> tuple[str, str]:
    out_dir = _owner_dir(jobs, user)
    fields = {"stdout": os.path.join(out_dir, "out"), "stderr": os.path.join(out_dir, "err"),
              "work_dir": out_dir, **fields}
    d = jobs.make(body, uid=user.pw_uid, gid=user.pw_gid, user=user.pw_name, **fields)
    os.chown(os.path.join(d, "script.sh"), user.pw_uid, user.pw_gid)
    return d, out_dir


def test_runs_as_the_owner_when_root(jobs: Jobs, other_user: pwd.struct_passwd) -> None:
    d, out_dir = _as_owner(jobs, "id -u\nid -g\n", other_user)
    spawn_step(d)
    assert wait_status(d)["state"] == "COMPLETED"
    assert read(out_dir, "out") == f"{other_user.pw_uid}\n{other_user.pw_gid}\n"
    assert os.stat(os.path.join(out_dir, "out")).st_uid == other_user.pw_uid


@pytest.mark.parametrize("how", ["other owner", "group writable", "symlink"])
def test_job_dir_others_can_write_is_refused(jobs: Jobs, other_user: pwd.struct_passwd,
                                             how: str) -> None:
    """Rule: the supervisor writes only into a directory that is its own and no one else's."""
    d = jobs.make("echo never\n")
    if how == "other owner":
        os.chown(d, other_user.pw_uid, other_user.pw_gid)
    elif how == "group writable":
        os.chmod(d, 0o775)
    else:
        real = d + ".real"
        os.rename(d, real)
        os.symlink(real, d)
    with pytest.raises(RuntimeError, match="did not start"):
        spawn_step(d)
    assert stepd.read_status(d) is None and not os.path.exists(os.path.join(d, "out"))


def test_write_atomic_does_not_follow_a_planted_link(jobs: Jobs) -> None:
    victim = os.path.join(jobs.base, "victim")
    with open(victim, "w") as f:
        f.write("precious\n")
    d = jobs.make("true\n")
    os.symlink(victim, os.path.join(d, f".{stepd.STATUS_FILE}.tmp.{os.getpid()}"))
    fd = stepd.open_job_dir(d)
    try:
        stepd.write_atomic(fd, stepd.STATUS_FILE, b'{"state": "COMPLETED"}\n')
    finally:
        os.close(fd)
    assert read(jobs.base, "victim") == "precious\n"
    assert stepd.read_status(d) == {"state": "COMPLETED", "exit_code": 0, "signal": 0}


@pytest.mark.parametrize("content", [
    '{"state": "BOGUS"}', '{"state": "COMPLETED", "exit_code": "3"}',
    '{"state": "COMPLETED", "signal": 1e9}', '{"state": "FAILED", "end_time": "x"}',
    '["COMPLETED"]', '{not json', "\xff\xfe",
])
def test_garbage_status_is_ignored(jobs: Jobs, content: str) -> None:
    d = jobs.make("true\n")
    with open(os.path.join(d, stepd.STATUS_FILE), "w", encoding="latin-1") as f:
        f.write(content)
    assert stepd.read_status(d) is None


def test_status_and_pid_files_that_are_not_regular_files_are_ignored(jobs: Jobs) -> None:
    d = jobs.make("true\n")
    os.symlink("/etc/hostname", os.path.join(d, stepd.STATUS_FILE))
    os.mkfifo(os.path.join(d, stepd.PID_FILE))  # would block a reader without O_NONBLOCK
    t0 = time.monotonic()
    assert stepd.read_status(d) is None
    assert not stepd.is_alive(d)
    assert time.monotonic() - t0 < 5  # a blocking open would hang


def test_cancel_line_goes_through_the_descriptor_not_the_path(
        jobs: Jobs, other_user: pwd.struct_passwd) -> None:
    """The job swaps its output for a link to a root-owned file; the supervisor's CANCELLED
    line still lands in the file the job opened, and the root-owned file is untouched."""
    victim = os.path.join(jobs.base, "victim")
    with open(victim, "w") as f:
        f.write("precious\n")
    d, out_dir = _as_owner(jobs, f"echo ready\nmv err err.opened\nln -s {victim} err\n"
                           "echo swapped\nsleep 300\n", other_user)
    spawn_step(d)
    _wait_for(lambda: read(out_dir, "out") == "ready\nswapped\n", 10, "the swap")
    assert stepd.send_control(d, {"op": "cancel"})
    assert wait_status(d)["state"] == "CANCELLED"
    assert read(jobs.base, "victim") == "precious\n"
    assert "CANCELLED AT" in read(out_dir, "err.opened")


def test_fifo_output_without_reader_fails_at_once(jobs: Jobs) -> None:
    fifo = os.path.join(jobs.base, f"fifo-{uuid.uuid4().hex[:6]}")
    os.mkfifo(fifo)
    d = jobs.start("echo never\n", stdout=fifo, stderr=fifo)
    status = wait_status(d, timeout=5)
    assert (status["state"], status["signal"]) == ("FAILED", stepd.OUTPUT_FAILED_SIGNAL)
    assert "Could not open stdout file" in read(d, stepd.LOG_FILE)


def test_full_fifo_as_stderr_does_not_block_the_supervisor(jobs: Jobs) -> None:
    """A reader that never reads: the job blocks writing, but cancel still ends the step
    (the supervisor writes its own lines only to regular files)."""
    fifo = os.path.join(jobs.base, f"fifo-{uuid.uuid4().hex[:6]}")
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        d = jobs.start("echo ready > ready\nhead -c 200000 /dev/zero >&2\nsleep 300\n",
                       stderr=fifo, kill_wait=1)
        _wait_for(lambda: read(d, "ready") == "ready\n", 10, "the job to start")
        time.sleep(0.2)
        assert stepd.send_control(d, {"op": "cancel"})
        assert wait_status(d, timeout=10)["state"] == "CANCELLED"
        assert "CANCELLED AT" in read(d, stepd.LOG_FILE)  # noted where it could go
    finally:
        os.close(reader)


def test_launch_failure_output_is_opened_as_the_owner(jobs: Jobs,
                                                      other_user: pwd.struct_passwd) -> None:
    """A job that cannot start gets its error line in its stderr file, opened as its user:
    a path the user may not create stays uncreated (root would have created it)."""
    private = tempfile.mkdtemp(prefix="private-", dir=jobs.base)  # root's, 0700
    target = os.path.join(private, "err")
    d, out_dir = _as_owner(jobs, "echo never\n", other_user, stderr=target,
                           time_limit="not a number")
    spawn_step(d)
    assert wait_status(d)["state"] == "FAILED"
    assert not os.path.exists(target)
    log_text = read(d, stepd.LOG_FILE)
    assert "bad launch description" in log_text and "Permission denied" in log_text
    # the same failure with a path the user may write: the line is there
    d, out_dir = _as_owner(jobs, "echo never\n", other_user, time_limit="not a number")
    spawn_step(d)
    assert wait_status(d)["state"] == "FAILED"
    assert "bad launch description" in read(out_dir, "err")
    assert os.stat(os.path.join(out_dir, "err")).st_uid == other_user.pw_uid


@pytest.mark.skipif(not HAVE_V1, reason="needs a writable cgroup v1 pids controller (root)")
def test_pids_limit_contains_a_bounded_fork_bomb(jobs: Jobs) -> None:
    # Bounded (at most 200 processes even if the limit failed): safe on a shared machine.
    body = ('$PYTHON -c "\nimport os, time\nmade = 0\nfor _ in range(200):\n'
            '    try:\n        pid = os.fork()\n    except BlockingIOError:\n        break\n'
            '    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n    made += 1\n'
            'print(made)"\n')
    d = jobs.start(body, cgroup_root=V1_ROOT, pids_max=20)
    assert wait_status(d, timeout=30)["state"] == "COMPLETED"
    made = int(read(d, "out"))
    assert 5 < made < 20  # bash, python and the children share the 20


def test_non_root_supervisor_refuses_other_uid(jobs: Jobs,
                                               other_user: pwd.struct_passwd) -> None:
    d = jobs.make("echo never\n", uid=0, gid=0)
    os.chown(d, other_user.pw_uid, other_user.pw_gid)  # the non-root supervisor's own
    # Supervise in the foreground from a forked process that dropped root; the job asks
    # for root.  (A fresh interpreter may not be able to read root's Python installation.)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(other_user.pw_gid)
            os.setuid(other_user.pw_uid)
            code = stepd.run_foreground(d)
        finally:
            os._exit(code)
    deadline = time.monotonic() + 30
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise AssertionError("the foreground supervisor did not finish")
    assert os.waitstatus_to_exitcode(done[1]) == 0
    status = stepd.read_status(d)
    assert status is not None and (status["state"], status["exit_code"]) == ("FAILED", 1)
    assert f"cannot run job {json.loads(read(d, 'launch.json'))['job_id']} as uid 0" \
        in read(d, "err")


def test_supervisor_survives_its_spawner(jobs: Jobs) -> None:
    d = jobs.make("sleep 1\necho done\n")
    code = "import sys; from corral.agent import stepd; print(stepd.spawn_step(sys.argv[1]))"
    proc = subprocess.run([sys.executable, "-c", code, d], timeout=30, capture_output=True,
                          text=True, check=True)
    supervisor = int(proc.stdout)
    assert stepd.is_alive(d)  # the spawner is gone, the supervisor is not
    with open(f"/proc/{supervisor}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ppid, session = int(fields[1]), int(fields[3])
    assert session != os.getsid(0), "the supervisor runs in a session of its own"
    assert ppid != session and not _pid_alive(session), "double-forked: its parent is gone"
    assert wait_status(d)["state"] == "COMPLETED"
    assert read(d, "out") == "done\n"
    _wait_for(lambda: not stepd.is_alive(d), 5, "supervisor exit")


def test_notify_socket_receives_started_and_exited(jobs: Jobs) -> None:
    sock_path = os.path.join(jobs.base, "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    sock.settimeout(10)
    try:
        d = jobs.start("exit 4\n", notify_socket=sock_path)
        job_id = json.loads(read(d, "launch.json"))["job_id"]
        started = json.loads(sock.recv(65536))
        exited = json.loads(sock.recv(65536))
    finally:
        sock.close()
    status = wait_status(d)
    assert started == {"job_id": job_id, "step": "batch", "event": "started",
                       "pid": status["pid"]}
    assert exited["event"] == "exited" and exited["job_id"] == job_id
    assert (exited["state"], exited["exit_code"]) == ("FAILED", 4)


def test_notify_socket_gone_does_not_matter(jobs: Jobs) -> None:
    d = jobs.start("true\n", notify_socket=os.path.join(jobs.base, "nobody-listens.sock"))
    assert wait_status(d)["state"] == "COMPLETED"


def test_long_job_directory_path(jobs: Jobs) -> None:
    deep = os.path.join(jobs.base, *(["d" * 40] * 3))
    os.makedirs(deep)
    jobs.base, saved = deep, jobs.base
    try:
        d = jobs.start("echo ready\nsleep 300\n")
    finally:
        jobs.base = saved
    assert len(os.path.join(d, stepd.CTL_SOCKET)) > 108
    _wait_for(lambda: read(d, "out") == "ready\n", 10, "the script to start")
    assert stepd.send_control(d, {"op": "cancel"})
    assert wait_status(d)["state"] == "CANCELLED"


def test_no_fd_or_zombie_leaks(jobs: Jobs) -> None:
    fds_before = set(os.listdir("/proc/self/fd"))
    dirs = [jobs.start(f"exit {i}\n", direct=True) for i in range(5)]
    for i, d in enumerate(dirs):
        assert wait_status(d)["exit_code"] == i
    assert set(os.listdir("/proc/self/fd")) == fds_before
    try:  # spawn_step reaped its middle process itself (the clean spawner may be a child)
        zombie = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        zombie = (0, 0)
    assert zombie == (0, 0)
    # The job sees only stdin/stdout/stderr: nothing of the supervisor or the spawner.
    d = jobs.start("ls /proc/$$/fd\n", direct=True)
    wait_status(d)
    assert read(d, "out").split() == ["0", "1", "2", "255"]  # 255: bash's script fd


def test_foreground_mode(jobs: Jobs) -> None:
    d = jobs.make("echo fg\n")
    proc = subprocess.run([sys.executable, "-m", "corral.agent.stepd", d], timeout=30)
    assert proc.returncode == 0
    assert stepd.read_status(d)["state"] == "COMPLETED"  # type: ignore[index]
    assert read(d, "out") == "fg\n"
    bad = subprocess.run([sys.executable, "-m", "corral.agent.stepd", "/nonexistent"],
                         timeout=30, capture_output=True, text=True)
    assert bad.returncode != 0 and "No such file" in bad.stderr


def test_twenty_spawned_steps_all_complete(jobs: Jobs) -> None:
    """spawn_step returns before the step ends; its speed is bench/bench_stepd.py's."""
    dirs = [jobs.make("true\n") for _ in range(20)]
    for d in dirs:
        spawn_step(d)
    assert [wait_status(d)["state"] for d in dirs] == ["COMPLETED"] * 20


def test_format_cpus() -> None:
    assert format_cpus([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"
    assert format_cpus([3]) == "3"


def test_read_status_and_is_alive_without_a_step(tmp_path: Any) -> None:
    assert stepd.read_status(str(tmp_path)) is None
    assert not stepd.is_alive(str(tmp_path))
    assert not stepd.send_control(str(tmp_path), {"op": "cancel"})
    (tmp_path / stepd.PID_FILE).write_text(f"{os.getpid()} 1\n")  # a live pid, wrong start
    assert not stepd.is_alive(str(tmp_path))


def test_supervisor_files_are_private(jobs: Jobs) -> None:
    """Nothing the supervisor writes is readable by other users (the job's own user
    included: it reaches the job directory only to run its script)."""
    d = jobs.start("true\n")
    wait_status(d)
    for name in (stepd.STATUS_FILE, stepd.PID_FILE, stepd.LOG_FILE):
        st = os.stat(os.path.join(d, name))
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (os.geteuid(), 0o600), name


def test_cgroup_conf_keys_and_defaults(tmp_path: Any) -> None:
    from corral.agent.cgroup import DEFAULT_PIDS_MAX, CgroupConf

    conf = CgroupConf.load(str(tmp_path / "missing.conf"))
    assert conf.pids_max == DEFAULT_PIDS_MAX and conf.constrain_ram and not conf.notes
    # a job without --mem gets the node's memory, capped by the machine's
    assert conf.memory_limit_mb(None, 64000, 24000) == 24000
    assert conf.memory_limit_mb(None, 8000, 24000) == 8000
    assert conf.memory_limit_mb(512, 8000, 24000) == 512
    path = tmp_path / "cgroup.conf"
    path.write_text("# comment\nConstrainCores=yes\nAllowedRAMSpace=150\nmaxrampercent=50\n"
                    "MinRAMSpace=100\nCorralPidsMax=64  # per step\nCorralPidsMax=lots\n"
                    "MaxRAMPercent=0\nnonsense\n")
    conf = CgroupConf.load(str(path))
    assert conf.pids_max == 64 and conf.allowed_ram_percent == 150
    assert conf.memory_limit_mb(1000, 8000, 24000) == 1500
    assert conf.memory_limit_mb(None, 64000, 24000) == 12000  # MaxRAMPercent=50
    assert conf.memory_limit_mb(10, 8000, 24000) == 100  # MinRAMSpace
    assert [n.split(":")[1] for n in conf.notes] == ["7", "8", "9"]  # bad lines, defaults kept
    path.write_text("ConstrainRAMSpace=no\nCorralPidsMax=infinity\n")
    conf = CgroupConf.load(str(path))
    assert conf.memory_limit_mb(1000, 8000, 24000) is None and conf.pids_max is None


@pytest.mark.parametrize(("fields", "problem"), [
    ({"step": "../../escape"}, "is not a step name"),
    ({"job_id": "1/../../x"}, "job_id: expected an integer"),
    ({"uid": "0"}, "uid: expected an integer"),
    ({"uid": -1}, "uid: -1 is out of range"),
    ({"gid": None}, "missing field 'gid'"),
    ({"groups": [0, "wheel"]}, "groups[1]: expected an integer"),
    ({"stdout": ["/etc/passwd"]}, "stdout: expected a string"),
    ({"env": {"PATH": 1}}, "expected a string"),
    ({"time_limit": "soon"}, "time_limit: expected a number"),
])
def test_launch_fields_that_name_identities_or_paths_are_checked(
        jobs: Jobs, fields: dict[str, Any], problem: str) -> None:
    d = jobs.make("echo never > ran\n")
    launch = json.loads(read(d, "launch.json"))
    launch.update(fields)
    if launch.get("gid", 0) is None:
        del launch["gid"]
    with open(os.path.join(d, "launch.json"), "w") as f:
        json.dump(launch, f)
    spawn_step(d)
    assert wait_status(d)["state"] == "FAILED"
    assert problem in read(d, stepd.LOG_FILE)
    assert not os.path.exists(os.path.join(d, "ran"))


def test_agent_drops_descriptors_it_inherited() -> None:
    """`python -m corral.agent` starts with Spawner.start(): a descriptor without
    close-on-exec left by whatever started the agent must not reach the spawner (hence the
    supervisors) or the agent (hence its posix_spawned srun tasks)."""
    r, w = os.pipe()
    os.set_inheritable(w, True)
    code = ("import json, os\n"
            "from corral.agent.spawner import Spawner\n"
            f"inherited = os.path.exists('/proc/self/fd/{w}')\n"
            "s = Spawner.start()\n"
            "print(json.dumps([inherited, s.sock.fileno(), os.listdir('/proc/self/fd'),\n"
            "                  os.listdir(f'/proc/{s.pid}/fd')]))\n"
            "s.close()\n")
    try:
        out = subprocess.run([sys.executable, "-c", code], pass_fds=(w,), capture_output=True,
                             text=True, timeout=30)
    finally:
        os.close(r)
        os.close(w)
    assert out.returncode == 0, out.stderr
    inherited, sock, agent_fds, spawner_fds = json.loads(out.stdout)
    assert inherited  # the test hands one down
    assert str(w) not in agent_fds and str(w) not in spawner_fds
    # the agent keeps stdio, its end of the spawner's socket and the listing's own fd
    assert len(set(agent_fds) - {"0", "1", "2", str(sock)}) <= 1


def test_batch_step_gets_the_submitters_resource_limits(jobs: Jobs) -> None:
    """SLURM_RLIMIT_* (as srun sends them) are set on the job's process by the shared launch
    path (agent/launch.py) and taken out of its environment; a malformed one is ignored."""
    pw = pwd.getpwuid(os.getuid())
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": pw.pw_dir,
           "SLURM_RLIMIT_NOFILE": "321", "SLURM_RLIMIT_CORE": "0",
           "SLURM_RLIMIT_STACK": "lots"}
    d = jobs.start("ulimit -n; ulimit -c; env | grep -c SLURM_RLIMIT_ || true\n", env=env)
    assert wait_status(d)["state"] == "COMPLETED"
    assert read(d, "out") == "321\n0\n0\n"
