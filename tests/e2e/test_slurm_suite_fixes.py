"""Differences from Slurm 22.05 that Slurm's own test suite (testsuite/python) found, fixed
and checked here through the real commands (README.md, "Slurm's own Python test suite")."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.cluster import Cluster, running

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory, name="suitefix") as cl:
        yield cl


def test_cancelled_pending_array_task_is_gone(c: Cluster) -> None:
    """scancel J_7 of a task still in the array's pending record: the task is gone, as in
    Slurm (job_arrays/test_basics), the others stay pending, a cancel of the array ends it."""
    arr = c.sbatch("-N1", "--array=0-7", "--begin=now+1hour", "--output=/dev/null",
                   "--wrap", "sleep 10")
    c.ok("scancel", f"{arr}_7")
    r = c.run("scontrol", "show", "job", f"{arr}_7")
    assert r.returncode == 1 and "Invalid job id specified" in r.stderr, r
    assert c.squeue_ids("-r", "-j", str(arr)) == [f"{arr}_{t}" for t in range(7)]
    assert "ArrayTaskId=0-6 " in c.ok("scontrol", "show", "job", str(arr))
    # a range of them, then one already gone: an invalid job id, which scancel keeps quiet about
    # without -v
    c.ok("scancel", f"{arr}_[1-2]")
    assert c.squeue_ids("-r", "-j", str(arr)) == [f"{arr}_{t}" for t in (0, 3, 4, 5, 6)]
    r = c.run("scancel", "-v", f"{arr}_7")
    assert r.stderr.endswith(f"Kill job error on job id {arr}_7: Invalid job id specified\n"), r
    c.ok("scancel", str(arr))
    c.wait_state(arr, "CANCELLED")



def test_debugger_test_prints_the_mpir_process_table(c: Cluster) -> None:
    """srun --debugger-test (srun/test_--multi-prog): one line per task, its host and
    program (a --multi-prog file's per rank); the tasks still run under Corral."""
    conf = c.workdir / "mpmd.conf"
    conf.write_text("1-2   hostname\n0,3   echo hi %t\n")
    r = c.run("srun", "--debugger-test", "-n4", "-N1", "-O", "-l", "--multi-prog",
              str(conf), timeout=60)
    assert r.returncode == 0, r
    table = sorted(ln for ln in r.stderr.splitlines() if ln.startswith("srun: task:"))
    node = table[0].split("host:")[1].split(",")[0]
    assert node.startswith("node-")
    assert table == [f"srun: task:{t}, host:{node}, pid:0, executable:{exe}"
                     for t, exe in enumerate(["echo", "hostname", "hostname", "echo"])]
    assert "0: hi 0" in r.stdout and "3: hi 3" in r.stdout
    r = c.run("srun", "--debugger-test", "-n2", "true", timeout=60)
    assert r.returncode == 0 and r.stderr.count("executable:true") == 2, r
    # a task the file does not name: refused before anything runs, as in Slurm
    r = c.run("srun", "--debugger-test", "-n5", "--multi-prog", str(conf), timeout=60)
    assert r.returncode != 0 and f"Configuration file {conf} invalid" in r.stderr, r


def test_sstat_fields_of_its_own(c: Cluster) -> None:
    """sstat -e lists Slurm's 51 sstat fields (sstat/test_-e); -o takes sstat's own names and
    widths: Nodelist (the step's nodes), Pids (empty: not reported), AveDiskRead at 12."""
    names = c.ok("sstat", "-e").split()
    assert len(names) == 51 and {"Nodelist", "Pids", "TRESUsageInTot", "MinCPU"} <= set(names)
    job = c.sbatch("--acctg-freq=1", "--wrap", "sleep 60")
    try:
        c.wait_state(job, "RUNNING")
        node = c.ok("squeue", "-h", "-j", str(job), "-o", "%N").strip()
        rows: list[str] = []

        def sampled() -> bool:
            nonlocal rows
            r = c.run("sstat", "-j", str(job), "-n", "-P", "-o", "JobID,Nodelist,NTasks,Pids")
            rows = [ln for ln in r.stdout.splitlines() if ln]
            return r.returncode == 0 and bool(rows)
        c.wait_for(sampled, timeout=30, what="sstat figures")
        assert rows == [f"{job}.batch|{node}|1|"], rows
        header = c.ok("sstat", "-j", str(job), "-o", "nodel,avediskr").splitlines()[0]
        assert header == f"{'Nodelist':>20} {'AveDiskRead':>12} "
    finally:
        c.run("scancel", str(job))


def test_signal_sent_before_the_job_runs_is_retried(c: Cluster) -> None:
    """scancel --signal to a job that is still pending (srun/test_signal_forwarding sends
    it right after sbatch): the controller answers "try again later", as slurmctld does, and
    scancel tries again after 5 s, so the signal reaches the job's step once it runs."""
    trap = c.workdir / "trap.py"
    trap.write_text(
        "import signal, sys, time\n"
        "seen = []\n"
        "def got(n, f):\n"
        "    print('Received:', n, flush=True)\n"
        "    seen.append(n)\n"
        "signal.signal(signal.SIGUSR1, got)\n"
        "signal.signal(signal.SIGUSR2, got)\n"
        "end = time.time() + 60\n"
        "while len(seen) < 2 and time.time() < end:\n"
        "    time.sleep(0.1)\n")
    out = c.workdir / "trap.out"
    jid = c.sbatch("--begin=now+2", "-o", "/dev/null", "--wrap",
                   f"srun --output={out} python3 {trap}")
    assert c.state(jid) == "PENDING"
    r = c.run("scancel", "-v", "--signal", "USR1", str(jid), timeout=120)
    assert r.returncode == 0, r
    assert "scancel: Job is in transitional state, retrying\n" in r.stderr, r
    c.wait_for(lambda: out.is_file() and "Received: 10" in out.read_text(), timeout=30)
    c.ok("scancel", "--signal", "USR2", str(jid))  # running: no retry
    c.wait_state(jid, "COMPLETED", timeout=60)
    assert out.read_text().split("\n")[:2] == ["Received: 10", "Received: 12"]
