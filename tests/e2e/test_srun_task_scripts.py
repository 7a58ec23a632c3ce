"""srun's task prolog/epilog, --quit-on-interrupt, a step aborted from outside, and
--slurmd-debug, as Slurm 22.05 behaves (its testsuite/python checks them: issue 18 item 5),
through the real command on a running cluster."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    os.chmod(path, 0o755)
    return str(path)


def test_task_prolog_export_unset_and_print(cluster: Cluster) -> None:
    """Slurm's TaskProlog protocol: "export NAME=value" sets, "unset NAME" removes, "print
    TEXT" writes TEXT to the task's stdout; other lines are ignored.  The epilog runs too,
    and the prolog sees SLURM_TASK_PID and SLURM_SCRIPT_CONTEXT=prolog_task."""
    w = cluster.workdir
    prolog = _script(w / "tp-print", (
        'echo "print HEADER $SLURM_PROCID"\n'
        'echo "export TEST=prolog_qa"\n'
        'echo "export  SPACED = a=b "\n'
        'echo "unset DISPLAY"\n'
        'echo "not a directive"\n'
        f'echo "$SLURM_PROCID $SLURM_TASK_PID $SLURM_SCRIPT_CONTEXT" >> {w}/tp-print.seen\n'))
    epilog = _script(w / "te-print", f'echo "epilog $SLURM_PROCID" >> {w}/te-print.seen\n')
    r = cluster.run("srun", "-N2", "-n4", "-O", f"--task-prolog={prolog}",
                    f"--task-epilog={epilog}", "sh", "-c",
                    'echo "$SLURM_PROCID TEST==$TEST DISPLAY==${DISPLAY-unset} SPACED=[$SPACED]"',
                    env={"DISPLAY": ":7"}, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = sorted(r.stdout.splitlines())
    assert lines == sorted([f"HEADER {i}" for i in range(4)]
                           + [f"{i} TEST==prolog_qa DISPLAY==unset SPACED=[ a=b ]"
                              for i in range(4)])
    seen = sorted((w / "tp-print.seen").read_text().split("\n")[:-1])
    assert [s.split()[0] for s in seen] == ["0", "1", "2", "3"]
    assert all(s.split()[1].isdigit() and s.split()[2] == "prolog_task" for s in seen)
    assert sorted((w / "te-print.seen").read_text().splitlines()) == [
        f"epilog {i}" for i in range(4)]


def test_task_prolog_from_the_environment_and_its_failure(cluster: Cluster) -> None:
    """SLURM_TASK_PROLOG is --task-prolog; a prolog that fails ends the task with its
    status and slurmstepd's error, as Slurm's does, without running the task."""
    w = cluster.workdir
    ok = _script(w / "tp-env", "echo export FROM_ENV=yes\n")
    r = cluster.run("srun", "sh", "-c", "echo $FROM_ENV", env={"SLURM_TASK_PROLOG": ok},
                    timeout=60)
    assert r.returncode == 0 and r.stdout == "yes\n", r.stderr
    bad = _script(w / "tp-fail", "echo export X=1\nexit 3\n")
    r = cluster.run("srun", f"--task-prolog={bad}", "sh", "-c", f"touch {w}/ran", timeout=60)
    assert r.returncode == 3
    assert "slurmstepd: error: --task-prolog failed status=3\n" in r.stderr
    assert "srun: error: node-1: task 0: Exited with exit code 3\n" in r.stderr
    assert not (w / "ran").exists()


def _start_waiting(cluster: Cluster, *args: str) -> subprocess.Popen[str]:
    script = _script(cluster.workdir / "ignore-int", 'trap "" INT\necho WAITING\nsleep 1000\n')
    proc = subprocess.Popen(["srun", *args, "--unbuffered", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            cwd=cluster.workdir, env=cluster.env)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "WAITING\n"
    return proc


def test_quit_on_interrupt_ends_the_step_at_one_ctrl_c(cluster: Cluster) -> None:
    """-q: one SIGINT forwards Ctrl-C and kills the tasks at once (SIGKILL: the task
    ignores SIGINT and would outlive a SIGTERM grace), with Slurm's messages."""
    proc = _start_waiting(cluster, "-v", "-N1", "--quit-on-interrupt")
    try:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 137, err  # SIGKILL (a SIGTERM would give 143)
    assert re.search(r"srun: sending Ctrl-C to StepId=\d+\.0\n"
                     r"srun: forcing job termination\n", err), err
    assert "srun: node-1: task 0: Killed\n" in err  # verbose only: our own abort


def test_one_ctrl_c_reports_and_scancel_aborts_the_step(cluster: Cluster) -> None:
    """Without -q the first Ctrl-C only reports; a scancel of the job then ends the step
    and srun says so as Slurm's does ("Job step aborted: Waiting up to KillWait+2 s")."""
    proc = _start_waiting(cluster, "-N1")
    try:
        proc.send_signal(signal.SIGINT)
        time.sleep(1.5)
        assert proc.poll() is None
        job = cluster.squeue_ids()[-1]
        cluster.ok("scancel", job)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert "srun: interrupt (one more within 1 sec to abort)\n" in err
    # the cluster's KillWait is 2: Slurm waits KillWait + 2 s
    assert "srun: Job step aborted: Waiting up to 4 seconds for job step to finish.\n" in err
    assert proc.returncode != 0


@pytest.mark.parametrize(("level", "shown", "debug_lines"), [
    ("error", "verbose", ()),
    ("info", "debug", ("debug:  ",)),
    ("verbose", "debug2", ("debug:  ", "debug2: ")),
    ("2", "verbose", ()),
])
def test_slurmd_debug_sends_the_node_log_to_the_first_task(
        cluster: Cluster, level: str, shown: str, debug_lines: tuple[str, ...]) -> None:
    r = cluster.run("srun", "-N2", "-n3", f"--slurmd-debug={level}", "true", timeout=60)
    assert r.returncode == 0, r.stderr
    err = r.stderr
    # one header per node, at ERROR + the increment
    assert err.count(f"slurmstepd: debug levels are stderr='{shown}'") == 2, err
    assert len(re.findall(r"slurmstepd: task \d \(\d+\) started ", err)) == 3, err
    assert len(re.findall(r"slurmstepd: task \d \(\d+\) exited with exit code 0\.", err)) == 3
    for prefix in ("debug:  ", "debug2: "):
        assert (f"slurmstepd: {prefix}" in err) == (prefix in debug_lines), err
    quiet = cluster.run("srun", "true", timeout=60)
    assert quiet.returncode == 0 and "slurmstepd" not in quiet.stderr


def test_slurmd_debug_is_capped_at_debug2(cluster: Cluster) -> None:
    r = cluster.run("srun", "--slurmd-debug=debug5", "true", timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stderr.startswith("srun: Using srun's max debug increment of 4\n"), r.stderr
    assert "stderr='debug2'" in r.stderr


def test_wait_kills_the_others_and_groups_their_exit_lines(cluster: Cluster) -> None:
    """-W: N seconds after the first task ends the others are killed (SIGKILL), and their
    ends are errors, one line per node for tasks that ended alike (testsuite: test_--wait)."""
    script = _script(cluster.workdir / "one-ends",
                     '[ "$SLURM_PROCID" = 1 ] && exit 0\nsleep 20\n')
    r = cluster.run("srun", "-n10", "-N1", "-O", "-W2", script, timeout=60)
    assert re.search(r"srun: First task exited 2s ago\n"
                     r"srun: StepId=\d+\.0 tasks 0,2-9: running\n"
                     r"srun: StepId=\d+\.0 task 1: exited\n", r.stderr), r.stderr
    assert "srun: error: node-1: tasks 0,2-9: Killed\n" in r.stderr
    assert "forcing job termination" not in r.stderr
    r = cluster.run("srun", "-N2", "-n4", "sh", "-c", 'exit $((3 + SLURM_PROCID / 3))',
                    timeout=60)
    assert r.returncode == 4
    assert sorted(r.stderr.splitlines()) == [
        "srun: error: node-1: tasks 0-1: Exited with exit code 3",
        "srun: error: node-2: task 2: Exited with exit code 3",
        "srun: error: node-2: task 3: Exited with exit code 4"]


def test_srun_reads_slurm_overcommit(cluster: Cluster) -> None:
    """SLURM_OVERCOMMIT is -O (20 tasks on a 16-CPU node), as in Slurm's
    env_vars table (testsuite: test_slurm_directed_env_variables)."""
    r = cluster.run("srun", "-N1", "-n20", "true", timeout=60)
    assert r.returncode == 1
    r = cluster.run("srun", "-N1", "-n20", "true", env={"SLURM_OVERCOMMIT": "1"}, timeout=60)
    assert r.returncode == 0, r.stderr


def test_output_of_one_task_and_a_node_range_from_zero(cluster: Cluster) -> None:
    """--output=N shows only task N's stdout (--error=N its stderr), as Slurm's srun does;
    -N-3 is Slurm's node range 0-3, one node at least (testsuite: test_--input--output_taskid,
    test_parallel_launch_srun)."""
    r = cluster.run("srun", "--output=4", "-O", "-N1", "-n10", "sh", "-c",
                    "echo out $SLURM_PROCID; echo err $SLURM_PROCID >&2", timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "out 4\n"
    assert sorted(r.stderr.splitlines()) == [f"err {i}" for i in range(10)]
    r = cluster.run("srun", "--error=1", "-n3", "-O", "sh", "-c",
                    "echo out $SLURM_PROCID; echo err $SLURM_PROCID >&2", timeout=60)
    assert sorted(r.stdout.splitlines()) == ["out 0", "out 1", "out 2"]
    assert r.stderr == "err 1\n"
    r = cluster.run("srun", "-N-3", "-n4", "-O", "--overlap", "srun", "-l", "-n2", "-O",
                    "--overlap", "sh", "-c", "echo hi", timeout=60)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["0: hi"] * 4 + ["1: hi"] * 4


def test_tasks_sharing_an_output_file_never_overwrite_each_other(cluster: Cluster) -> None:
    """The agent opens --output files O_APPEND as slurmstepd does: a write lands at the end
    whatever the offset (GNU cat's copy_file_range moved a shared offset unlocked, and one
    task's output was lost about once in 15 runs; testsuite: stress/test_stdin_broadcast)."""
    w = cluster.workdir
    r = cluster.run("srun", f"--output={w}/seek.out", "sh", "-c",
                    "echo first; python3 -c 'import os; os.lseek(1, 0, 0); "
                    "os.write(1, b\"second\\n\")'", timeout=60)
    assert r.returncode == 0, r.stderr
    assert (w / "seek.out").read_text() == "first\nsecond\n"
    (w / "in.txt").write_text("".join(f"{i:09d}\n" for i in range(1000)))
    for _ in range(5):
        r = cluster.run("srun", f"--input={w}/in.txt", f"--output={w}/cat.out", "-N4", "-n4",
                        "cat", "-", timeout=60)
        assert r.returncode == 0, r.stderr
        assert (w / "cat.out").stat().st_size == 4 * 10000
