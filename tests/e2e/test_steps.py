"""End-to-end: srun steps (inside and outside allocations), salloc, srun --pty."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import time

import pytest

from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow


def test_srun_two_nodes_labelled(cluster: Cluster) -> None:
    r = cluster.run("srun", "-N2", "-l", "bash", "-c", "echo $SLURMD_NODENAME $SLURM_PROCID")
    assert r.returncode == 0, r.stderr
    lines = sorted(r.stdout.splitlines())
    assert len(lines) == 2
    m0 = re.fullmatch(r"0: (node-\d) 0", lines[0])
    m1 = re.fullmatch(r"1: (node-\d) 1", lines[1])
    assert m0 and m1 and m0.group(1) != m1.group(1), lines


def test_batch_job_step_ranks_on_every_node(cluster: Cluster) -> None:
    script = cluster.workdir / "ranks.sh"
    script.write_text("#!/bin/bash\n#SBATCH -N2 --ntasks-per-node=2\n"
                      "srun bash -c 'echo $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME "
                      "$SLURM_NTASKS $SLURM_STEP_NUM_NODES $SLURM_STEP_ID'\n")
    jid = cluster.sbatch("-o", "ranks-%j.out", str(script))
    cluster.wait_state(jid, "COMPLETED", timeout=60)
    rows = sorted(line.split() for line in (cluster.workdir / f"ranks-{jid}.out").read_text().splitlines())
    assert [r[0] for r in rows] == ["0", "1", "2", "3"]
    assert [(r[1], r[2]) for r in rows] == [("0", "0"), ("1", "0"), ("0", "1"), ("1", "1")]
    assert rows[0][3] == rows[1][3] != rows[2][3] == rows[3][3]
    assert all(r[4:] == ["4", "2", "0"] for r in rows)
    steps = cluster.ok("sacct", "-j", str(jid), "-P", "-n", "-o", "JobID,State").split()
    assert f"{jid}.batch|COMPLETED" in steps and f"{jid}.0|COMPLETED" in steps


def test_srun_exit_code_stdin_and_gpus(cluster: Cluster) -> None:
    r = cluster.run("srun", "-n2", "bash", "-c", "exit $((SLURM_PROCID + 3))")
    assert r.returncode == 4
    assert "task 1: Exited with exit code 4" in r.stderr
    r = cluster.run("srun", "cat", input="through stdin\n")
    assert r.returncode == 0 and r.stdout == "through stdin\n"
    r = cluster.run("srun", "--gres=gpu:2", "bash", "-c", "echo $CUDA_VISIBLE_DEVICES")
    assert r.returncode == 0 and len(r.stdout.strip().split(",")) == 2


def test_srun_too_many_nodes(cluster: Cluster) -> None:
    r = cluster.run("srun", "--immediate=1", "-N", "10", "true")
    assert r.returncode == 1
    assert r.stderr == ("srun: error: Unable to allocate resources: "
                        "Requested partition configuration not available now\n")


def test_salloc_runs_command_in_allocation(cluster: Cluster) -> None:
    r = cluster.run("salloc", "-N2", "bash", "-c",
                    "echo JOB=$SLURM_JOB_ID NODES=$SLURM_JOB_NODELIST; srun -l hostname | wc -l", timeout=60)
    assert r.returncode == 0, r.stderr
    m = re.search(r"JOB=(\d+) NODES=(node-\[\d-\d\]|node-\d,node-\d)", r.stdout)
    assert m, r.stdout
    assert r.stdout.strip().endswith("2")
    assert f"salloc: Granted job allocation {m.group(1)}" in r.stderr
    assert f"salloc: Relinquishing job allocation {m.group(1)}" in r.stderr
    cluster.wait_state(m.group(1), "COMPLETED")


def test_salloc_no_shell_and_gres_zero_enters_busy_allocation(cluster: Cluster) -> None:
    r = cluster.run("salloc", "--no-shell", "-N1", "--gres=gpu:4", timeout=60)
    assert r.returncode == 0, r.stderr
    jid = int(re.search(r"Granted job allocation (\d+)", r.stderr).group(1))  # type: ignore[union-attr]
    try:
        hog = subprocess.Popen(["srun", "--jobid", str(jid), "sleep", "30"], env=cluster.env,
                               cwd=cluster.workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cluster.wait_for(lambda: f"{jid}.0" in cluster.ok("sacct", "-j", str(jid), "-n", "-P", "-o", "JobID"),
                         what="first step")
        steps = cluster.ok("squeue", "-s", "-h", "-j", str(jid)).split()
        assert steps[:2] == [f"{jid}.0", "sleep"], steps
        r = cluster.run("srun", "--jobid", str(jid), "--overlap", "--gres=gpu:0", "bash", "-c",
                        "echo [$CUDA_VISIBLE_DEVICES]")
        assert r.returncode == 0 and r.stdout == "[]\n", r.stdout + r.stderr
        cluster.ok("scancel", f"{jid}.0")
        assert hog.wait(timeout=30) != 0
    finally:
        cluster.ok("scancel", str(jid))
    cluster.wait_state(jid, "CANCELLED")


def test_srun_pty_gives_a_real_terminal(cluster: Cluster) -> None:
    pid, fd = pty.fork()
    if pid == 0:  # the child: srun on a terminal
        os.chdir(cluster.workdir)
        os.execvpe("srun", ["srun", "--pty", "bash", "--norc", "-i"], cluster.env)
    out = b""

    def read_until(token: bytes, timeout: float = 20) -> bytes:
        nonlocal out
        deadline = time.monotonic() + timeout
        while token not in out:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {token!r} in {out!r}")
            r, _, _ = select.select([fd], [], [], left)
            if r:
                try:
                    out += os.read(fd, 4096)
                except OSError:
                    break
        return out

    try:
        os.write(fd, b"echo TTY=$(tty) JOB=$SLURM_JOB_ID; stty size\r")
        text = read_until(b"JOB=").decode(errors="replace")
        read_until(b"\n", 5)
        time.sleep(0.5)
        os.write(fd, b"exit 5\r")
        deadline = time.monotonic() + 20
        status = None
        while time.monotonic() < deadline:
            try:
                out += os.read(fd, 4096)
            except OSError:
                pass
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        text = out.decode(errors="replace")
        assert re.search(r"TTY=/dev/pts/\d+ JOB=\d+", text), text
        assert status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 5, (status, text)
    finally:
        try:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)


def _on_a_terminal(cluster: Cluster, argv: list[str], timeout: float = 30) -> tuple[int, str]:
    """Run srun on a pseudo-terminal to its end: (exit status, what the terminal showed)."""
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(cluster.workdir)
        os.execvpe("srun", ["srun", *argv], cluster.env)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            r, _, _ = select.select([fd], [], [], 0.2)
            if r:
                try:
                    out += os.read(fd, 4096)
                except OSError:
                    pass
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status), out.decode(errors="replace")
        raise AssertionError(f"srun did not end: {out!r}")
    finally:
        try:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)


def test_pty_in_a_multi_node_step_connects_only_task_0(cluster: Cluster) -> None:
    # srun(1): --pty sends the output of every task but task 0 to /dev/null
    rc, text = _on_a_terminal(cluster, ["-N2", "--pty", "bash", "-c",
                                        "echo rank$SLURM_PROCID; tty -s && echo tty; true"])
    assert rc == 0, text
    assert "rank0" in text and "tty" in text and "rank1" not in text, text


def test_multi_prog_runs_each_ranks_program(cluster: Cluster) -> None:
    conf = cluster.workdir / "multi.conf"
    conf.write_text("# rank  program\n"
                    "0      echo first %t %o\n"
                    "1-2    echo range %t %o\n"
                    "3      sh -c 'echo quoted $SLURM_PROCID'\n")
    r = cluster.run("srun", "-l", "--multi-prog", "multi.conf", timeout=60)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["0: first 0 0", "1: range 1 0", "2: range 2 1",
                                             "3: quoted 3"]
    conf.write_text("0 echo a\n0 echo b\n")
    r = cluster.run("srun", "--multi-prog", "multi.conf")
    assert (r.returncode, r.stderr) == (1, "srun: error: Duplicate record for task 0\n"
                                           "srun: error: Line 2 of configuration file "
                                           "multi.conf invalid\n")
    r = cluster.run("srun", "-n3", "--multi-prog", "multi.conf")
    assert r.returncode == 1
    r = cluster.run("srun", "--multi-prog", "absent.conf")
    assert (r.returncode, r.stderr) == (1, "srun: error: Unable to open configuration file "
                                           "absent.conf\n")


def test_verbose_prints_the_job_and_launch_lines(cluster: Cluster) -> None:
    r = cluster.run("srun", "-v", "-N2", "-n3", "true", timeout=60)
    assert r.returncode == 0, r.stderr
    job = re.search(r"^srun: jobid (\d+): nodes\(2\):`node-\[1-2\]', cpu counts: \S+$",
                    r.stderr, re.M)
    assert job, r.stderr
    jid = job.group(1)
    assert f"srun: launching StepId={jid}.0 on host node-1, 2 tasks: [0-1]" in r.stderr
    assert f"srun: launching StepId={jid}.0 on host node-2, 1 tasks: 2" in r.stderr
    assert "srun: launch/slurm: _task_finish: node-2: task 2: Completed" in r.stderr
    assert (f"srun: launch/slurm: _task_finish: Received task exit notification for 1 task "
            f"of StepId={jid}.0 (status=0x0000).") in r.stderr
    # inside an allocation: the allocation's line from the environment
    out = cluster.workdir / "v.out"
    jid2 = cluster.sbatch("-N1", "-n2", "-o", str(out), "--wrap", "srun -v true")
    assert cluster.wait_state(jid2, "COMPLETED", 60) == "COMPLETED"
    assert f"srun: jobid {jid2}: nodes(1):`node-1', cpu counts: 2(x1)" in out.read_text()


def test_task_environment_has_cpus_per_task_and_the_shells_umask(cluster: Cluster) -> None:
    r = cluster.run("srun", "-c2", "bash", "-c", "echo $SLURM_CPUS_PER_TASK $SLURM_UMASK; umask",
                    env={"SLURM_UMASK": ""}, timeout=60)
    assert r.returncode == 0, r.stderr
    cpus, mask, real = r.stdout.split()
    assert cpus == "2" and mask == f"{_umask():04o}" and real == mask
    r = subprocess.run(["bash", "-c", "umask 0027; srun bash -c 'echo $SLURM_UMASK; umask'"],
                       capture_output=True, text=True, env=cluster.env, cwd=cluster.workdir,
                       timeout=60)
    assert r.stdout.split() == ["0027", "0027"], r.stderr
    r = cluster.run("srun", "bash", "-c", "echo ${SLURM_CPUS_PER_TASK-unset}", timeout=60)
    assert r.stdout == "unset\n"


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_suspend_reaches_the_srun_tasks_of_a_batch_job(cluster: Cluster) -> None:
    # the srun step has its own cgroup beside the batch step's: suspend reaches it as well
    counter = cluster.workdir / "step_counter"
    loop = f"i=0; while true; do i=$((i+1)); echo $i > {counter}; sleep 0.1; done"
    jid = cluster.sbatch("--wrap", f"srun bash -c '{loop}'")
    cluster.wait_for(lambda: counter.exists() and counter.read_text().strip() not in ("", "1"),
                     what="counting")
    cluster.ok("scontrol", "suspend", str(jid))
    time.sleep(0.5)
    frozen = counter.read_text()
    time.sleep(1.0)
    assert counter.read_text() == frozen
    cluster.ok("scontrol", "resume", str(jid))
    cluster.wait_for(lambda: counter.read_text() != frozen, what="counting again")
    cluster.ok("scancel", str(jid))
    cluster.wait_state(jid, "CANCELLED")
