"""Slurm 22.05 details through the real commands (issue 18): -O/--overcommit of sbatch, salloc
and srun, AllocNode:Sid= of srun's and salloc's jobs, SLURM_TASK_PID of the batch step,
sacct's refusal of the Restarts field (23.02's), and `scontrol update JobName=` without a
job id."""

from __future__ import annotations

import os
import re
import uuid

import pytest

from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow

HOST = os.uname().nodename.split(".")[0]


def _shown(c: Cluster, job: int | str) -> str:
    return c.ok("scontrol", "show", "job", str(job))


def _field(text: str, name: str) -> str:
    m = re.search(rf"(?:^| ){name}=(\S*)", text, re.M)
    assert m, (name, text)
    return m.group(1)


def _job_named(c: Cluster, name: str) -> str:
    ids = c.ok("sacct", "-X", "-n", "-P", f"--name={name}", "-o", "JobID").split()
    assert len(ids) == 1, ids
    return ids[0]


def test_sbatch_overcommit_runs_more_tasks_than_cpus(cluster: Cluster) -> None:
    # 30 tasks on one 16-CPU node: refused without -O ...
    r = cluster.run("sbatch", "-N1", "-n30", "--wrap", "true")
    assert r.returncode == 1 and "Requested node configuration is not available" in r.stderr
    # ... with -O the job holds one task's CPUs on its node and its steps run 30 tasks there
    script = cluster.workdir / "overcommit.sh"
    out = cluster.workdir / "overcommit.out"
    script.write_text("#!/bin/bash\n"
                      'echo "env $SLURM_OVERCOMMIT $SLURM_NTASKS $SLURM_TASKS_PER_NODE"\n'
                      'echo "pid $SLURM_TASK_PID $$"\n'
                      "echo steps $(srun hostname | wc -l) $(srun -n1 --overlap true && echo ok)\n")
    job = cluster.sbatch("-O", "-N1", "-n30", "-o", str(out), str(script))
    assert cluster.wait_state(job, {"COMPLETED", "FAILED"}, timeout=60) == "COMPLETED", \
        out.read_text()
    lines = out.read_text().splitlines()
    assert lines[0] == "env 1 30 30", lines
    pid, shell = lines[1].split()[1:]
    assert pid == shell and pid.isdigit(), lines  # the batch script's own pid
    assert lines[2] == "steps 30 ok", lines
    shown = _shown(cluster, job)
    assert (_field(shown, "NumNodes"), _field(shown, "NumCPUs"), _field(shown, "NumTasks")) \
        == ("1", "1", "30"), shown
    assert " OverSubscribe=OK " in shown  # -O is not --oversubscribe: the layout is Slurm's


def test_sbatch_overcommit_from_the_environment_and_without_nodes(cluster: Cluster) -> None:
    # SBATCH_OVERCOMMIT, and -n30 without -N: one node (slurmctld's min_cpus is the node count)
    job = cluster.sbatch("-H", "-n30", "-c2", "--ntasks-per-node=30", "--wrap", "true",
                         env={"SBATCH_OVERCOMMIT": "1"})
    try:
        # pending: the CPUs asked for are one task's per node (squeue %C, NumCPUs=), and
        # --ntasks-per-node does not raise the CPUs per node (%c, MinCPUsNode=)
        assert cluster.ok("squeue", "-h", "-j", str(job), "-o", "%C %c").split() == ["2", "2"]
        shown = _shown(cluster, job)
        assert (_field(shown, "NumCPUs"), _field(shown, "MinCPUsNode")) == ("2", "2"), shown
        cluster.ok("scontrol", "release", str(job))
        cluster.wait_state(job, {"COMPLETED"}, timeout=60)
        shown = _shown(cluster, job)
        assert (_field(shown, "NumNodes"), _field(shown, "NumCPUs"),
                _field(shown, "NumTasks"), _field(shown, "CPUs/Task")) == ("1", "2", "30", "2"), \
            shown
    finally:
        cluster.run("scancel", str(job))


def test_srun_overcommit_allocation_and_alloc_node(cluster: Cluster) -> None:
    name = f"oc-{uuid.uuid4().hex[:8]}"
    r = cluster.run("srun", "-O", "-N1", "-n20", "-J", name, "sh", "-c", 'echo "$SLURM_OVERCOMMIT"',
                    timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1"] * 20
    shown = _shown(cluster, _job_named(cluster, name))
    assert (_field(shown, "NumCPUs"), _field(shown, "NumTasks")) == ("1", "20"), shown
    # the host and session srun ran in (display only), as sbatch sends them
    assert f" AllocNode:Sid={HOST}:{os.getsid(0)}\n" in shown, shown


def test_salloc_overcommit_and_alloc_node(cluster: Cluster) -> None:
    name = f"oc-{uuid.uuid4().hex[:8]}"
    r = cluster.run("salloc", "-O", "-N1", "-n20", "-J", name, "sh", "-c",
                    'echo "$SLURM_OVERCOMMIT"; srun hostname | wc -l', timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "20"], r.stdout + r.stderr
    shown = _shown(cluster, _job_named(cluster, name))
    assert (_field(shown, "NumCPUs"), _field(shown, "NumTasks")) == ("1", "20"), shown
    assert f" AllocNode:Sid={HOST}:{os.getsid(0)}\n" in shown, shown


def test_batch_step_has_its_task_pid(cluster: Cluster) -> None:
    out = cluster.workdir / "taskpid.out"
    job = cluster.sbatch("-o", str(out), "--wrap", 'echo "$SLURM_TASK_PID $$"')
    cluster.wait_state(job, {"COMPLETED"}, timeout=60)
    pid, shell = out.read_text().split()
    assert pid == shell and pid.isdigit()


def test_sacct_refuses_restarts_as_22_05_does(cluster: Cluster) -> None:
    r = cluster.run("sacct", "-X", "-o", "JobID,Restarts")
    assert (r.returncode, r.stdout, r.stderr) == \
        (1, "", 'sacct: error: Invalid field requested: "Restarts"\n')


def test_scontrol_update_by_job_name(cluster: Cluster) -> None:
    name = f"rn-{uuid.uuid4().hex[:8]}"
    jobs = [cluster.sbatch("-H", "-J", name, "--wrap", "true") for _ in range(2)]
    other = cluster.sbatch("-H", "-J", f"{name}x", "--wrap", "true")
    try:
        # no JobId=: every job of that name is updated, as scontrol's _job_name2id finds them
        r = cluster.run("scontrol", "update", f"JobName={name}", "TimeLimit=7")
        assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
        for job in jobs:
            assert _field(_shown(cluster, job), "TimeLimit") == "00:07:00"
        assert _field(_shown(cluster, other), "TimeLimit") != "00:07:00"
        r = cluster.run("scontrol", "update", f"JobName={name}", "UserId=0", "TimeLimit=9")
        assert r.returncode == 0, r.stderr
        assert all(_field(_shown(cluster, j), "TimeLimit") == "00:09:00" for j in jobs)
        r = cluster.run("scontrol", "update", f"JobName={name}", "UserId=4242", "TimeLimit=5")
        assert (r.returncode, r.stderr) == \
            (1, f"scontrol: error: No jobs with user ID 4242 and name '{name}'\n")
        r = cluster.run("scontrol", "update", "JobName=no-such-name", "TimeLimit=5")
        assert (r.returncode, r.stderr) == (1, "scontrol: error: No jobs with name 'no-such-name'\n")
        r = cluster.run("scontrol", "update", f"JobName={name}", "UserId=no-such-user")
        assert (r.returncode, r.stderr) == (1, "Invalid UserID: no-such-user\nRequest aborted\n")
    finally:
        cluster.run("scancel", *[str(j) for j in [*jobs, other]])
