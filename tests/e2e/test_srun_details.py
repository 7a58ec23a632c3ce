"""srun details through the real commands (issue 9): --input=<task id>, resource limits
propagated to the tasks, FIFO output files that never hold the agent, allocations refused
before they reach the controller, het job components, and a controller restart under srun."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest

from corral import paths
from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow


def _srun(c: Cluster, *args: str, input: str | None = None,
          timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return c.run("srun", *args, input=input, timeout=timeout)


def test_input_to_one_task(cluster: Cluster) -> None:
    r = _srun(cluster, "-N1", "-n3", "--input=1", "-l", "bash", "-c", "echo got:$(cat)",
              input="hello\n")
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["0: got:", "1: got:hello", "2: got:"]


def test_shell_resource_limits_reach_the_tasks(cluster: Cluster) -> None:
    r = cluster.run("bash", "-c", "ulimit -S -n 200; ulimit -S -c 0; "
                    "srun -N2 -n2 bash -c 'echo $(ulimit -n) $(ulimit -c)'")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["200 0", "200 0"]
    r = cluster.run("bash", "-c", "ulimit -S -n 300; "
                    "srun -N1 --propagate=NONE bash -c 'ulimit -n'")
    assert r.returncode == 0 and r.stdout.strip() != "300", r.stdout + r.stderr


def test_fifo_as_output_does_not_hold_the_agent(cluster: Cluster) -> None:
    fifo = cluster.workdir / "srun.fifo"
    os.mkfifo(fifo)
    try:
        t0 = time.monotonic()
        r = _srun(cluster, "-N1", "-w", "node-1", "-o", str(fifo), "echo", "lost", timeout=30)
        assert time.monotonic() - t0 < 20
        assert r.returncode == 1
        assert f"Could not open stdout file {fifo}: No such device or address" in r.stderr
        # the agent serving the node goes on
        assert _srun(cluster, "-N1", "-w", "node-1", "echo", "ok").stdout == "ok\n"
        # with a reader the task writes into it
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
        reader.start()
        r = _srun(cluster, "-N1", "-w", "node-1", "-o", str(fifo), "echo", "through")
        reader.join(timeout=30)
        assert r.returncode == 0 and got == [b"through\n"], r.stderr
    finally:
        fifo.unlink()


@pytest.mark.parametrize(("args", "stderr"), [
    (["-p", "", "true"], "srun: error: invalid partition specified: \n"
     "srun: error: Unable to allocate resources: Invalid partition name specified\n"),
    (["-I", "-H", "true"], "srun: error: Unable to allocate resources: Immediate execution "
     "impossible, insufficient priority\n"),
    (["-n1", "true", ":", "-n1", "true"],
     "srun: error: heterogeneous jobs are not supported by Corral\n"
     "srun: error: Unable to allocate resources: Requested operation not supported on this "
     "system\n"),
])
def test_allocations_refused_as_slurm_refuses_them(cluster: Cluster, args: list[str],
                                                   stderr: str) -> None:
    before = cluster.ok("squeue", "-h", "-t", "all", "-o", "%i")
    r = _srun(cluster, *args)
    assert (r.returncode, r.stdout, r.stderr) == (1, "", stderr)
    assert cluster.ok("squeue", "-h", "-t", "all", "-o", "%i") == before


def test_task_prolog_and_epilog(cluster: Cluster) -> None:
    w = cluster.workdir
    (w / "tprolog").write_text("#!/bin/sh\necho export STAGE=prolog-$SLURM_PROCID\n")
    (w / "tepilog").write_text("#!/bin/sh\necho $SLURM_PROCID > epilog-$SLURM_PROCID.done\n")
    for name in ("tprolog", "tepilog"):
        (w / name).chmod(0o755)
    r = _srun(cluster, "-N2", "-n2", f"--task-prolog={w / 'tprolog'}",
              f"--task-epilog={w / 'tepilog'}", "bash", "-c", "echo $STAGE")
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["prolog-0", "prolog-1"]
    # each epilog ran before srun heard of its task's end
    assert (w / "epilog-0.done").read_text() == "0\n"
    assert (w / "epilog-1.done").read_text() == "1\n"


def _batch_output(c: Cluster, script: str, *args: str, timeout: float = 60) -> str:
    out = c.workdir / f"layout-{time.monotonic_ns()}.out"
    job = c.sbatch("-o", str(out), *args, "--wrap", script)
    state = c.wait_state(job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=timeout)
    text = out.read_text()
    assert state == "COMPLETED", text
    return text


def test_a_step_goes_to_the_node_where_its_cpus_are_free(cluster: Cluster) -> None:
    """Slurm's step layout: a one-node step launched while another step holds every CPU of
    the first node runs on the second node at once instead of waiting."""
    text = _batch_output(cluster, (
        "srun -N1 -n1 -c16 bash -c 'echo A $SLURMD_NODENAME; sleep 4' & "
        "sleep 1; srun -N1 -n1 -c16 bash -c 'echo B $SLURMD_NODENAME'; wait"),
        "-N2", "--ntasks-per-node=1", "-c16")
    lines = sorted(ln for ln in text.splitlines() if ln[:2] in ("A ", "B "))
    assert len(lines) == 2 and lines[0].split()[1] != lines[1].split()[1], text
    assert "busy" not in text


def test_exclusive_steps_spread_over_the_allocation(cluster: Cluster) -> None:
    text = _batch_output(cluster, (
        "for i in 1 2 3 4; do srun --exclusive -n1 -c8 bash -c "
        "'echo S $SLURMD_NODENAME; sleep 2' & done; wait"),
        "-N2", "--ntasks-per-node=1", "-c16")
    nodes = sorted(ln.split()[1] for ln in text.splitlines() if ln.startswith("S "))
    assert len(nodes) == 4 and len(set(nodes)) == 2, text
    assert nodes.count(nodes[0]) == 2 and "busy" not in text


def test_overcommit_runs_more_tasks_than_cpus(cluster: Cluster) -> None:
    text = _batch_output(cluster, "srun -n3 true; echo rc=$?; srun -O -n3 echo hi",
                         "-N1", "-n1")
    assert "More processors requested than permitted" in text
    assert text.count("hi\n") == 3
    r = _srun(cluster, "-O", "-n20", "-N1", "echo", "x")  # 20 tasks, 16 CPUs per node
    assert r.returncode == 0 and r.stdout == "x\n" * 20, r.stderr


def test_step_memory_is_held_as_slurm_holds_it(cluster: Cluster) -> None:
    """In a job with memory, a step takes all of it by default (a concurrent step waits),
    --mem/--mem-per-cpu what it asks, --mem=0 and --overlap none; more than the job has is
    refused."""
    two = ("srun -n1 {o} bash -c 'sleep 3; echo first' & sleep 1; "
           "srun -n1 {o} bash -c 'echo second'; wait")
    text = _batch_output(cluster, two.format(o=""), "-N1", "-n2", "--mem=1000")
    assert "Requested nodes are busy" in text
    assert text.index("first") < text.index("second"), text
    for opt in ("--mem=400", "--mem-per-cpu=300", "--mem=0", "--overlap"):
        text = _batch_output(cluster, two.format(o=opt), "-N1", "-n2", "--mem=1000")
        assert "busy" not in text and text.index("second") < text.index("first"), (opt, text)
    text = _batch_output(cluster, "srun --mem=2000 true; echo rc=$?", "-N1", "--mem=1000")
    assert "Memory required by task is not available" in text and "rc=1" in text, text


def test_no_allocate_runs_for_an_operator_beside_a_full_node(cluster: Cluster) -> None:
    job = cluster.sbatch("-w", "node-3", "--exclusive", "--wrap", "sleep 30")
    try:
        cluster.wait_state(job, "RUNNING")
        before = cluster.ok("squeue", "-h", "-t", "all", "-o", "%i")
        r = _srun(cluster, "-Z", "-w", "node-3", "-n2", "-l", "bash", "-c",
                  "echo $SLURMD_NODENAME $SLURM_STEP_NUM_TASKS")
        assert r.returncode == 0, r.stderr
        assert sorted(r.stdout.splitlines()) == ["0: node-3 2", "1: node-3 2"]
        # no job was made for it
        assert cluster.ok("squeue", "-h", "-t", "all", "-o", "%i") == before
    finally:
        cluster.run("scancel", str(job))


def test_srun_rides_out_a_controller_restart(cluster: Cluster) -> None:
    """Last in this file: it restarts the module's controller."""
    with open(paths.pid_file("controller", str(cluster.home))) as f:
        pid = int(f.read().split()[0])
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    env = dict(cluster.env, CORRAL_MESSAGE_TIMEOUT="60")
    proc = subprocess.Popen(["srun", "-N1", "echo", "after-restart"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env,
                            cwd=str(cluster.workdir))
    try:
        time.sleep(1.5)
        assert proc.poll() is None  # waiting for a controller, not failed
        cluster.ok("corral", "up", timeout=60)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out == "after-restart\n"
    assert "Slurm controller not responding, sleeping and retrying." in err


@pytest.mark.parametrize("command", ["srun", "salloc"])
def test_scontrol_notify_reaches_the_allocating_command(cluster: Cluster, command: str) -> None:
    # Slurm's SRUN_USER_MSG: the srun or salloc that holds the allocation prints it on stderr
    proc = subprocess.Popen([command, "-N1", "bash", "-c", "echo $SLURM_JOB_ID; sleep 8"],
                            env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        job = proc.stdout.readline().strip()
        cluster.ok("scontrol", "notify", job, "disk", "is", "full")
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert f"{command}: disk is full\n" in err, err


def test_mincpus_picks_nodes_that_offer_that_many_cpus(cluster: Cluster) -> None:
    # the test cluster's nodes have 16 CPUs: 16 fits, 17 fits nowhere (Slurm's refusal)
    assert cluster.ok("srun", "--mincpus=16", "-N1", "echo", "ok") == "ok\n"
    r = cluster.run("srun", "--mincpus=17", "-N1", "true")
    assert r.returncode == 1
    assert r.stderr == ("srun: error: Unable to allocate resources: Requested node "
                        "configuration is not available\n")
    assert cluster.ok("salloc", "--mincpus=16", "-N1", "srun", "echo", "in") == "in\n"
