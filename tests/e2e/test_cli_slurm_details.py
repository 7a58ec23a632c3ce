"""Details of scontrol, squeue, sacct and sbatch that follow Slurm 22.05, through the real
commands on one cluster."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.e2e.cluster import Cluster, running


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory) as c:
        yield c


def test_show_takes_entity_equals_value(cluster: Cluster) -> None:
    job = cluster.sbatch("-H", "--wrap", "true")
    try:
        assert cluster.ok("scontrol", "show", f"job={job}") == \
            cluster.ok("scontrol", "show", "job", str(job))
        assert cluster.ok("scontrol", "show", "node=node-2") == \
            cluster.ok("scontrol", "show", "node", "node-2")
        assert cluster.ok("scontrol", "show", "Partition=short") == \
            cluster.ok("scontrol", "show", "partition", "short")
        cluster.ok("scontrol", "create", "reservation", "ReservationName=maint",
                   "StartTime=now", "Duration=10", "Nodes=node-4", "Users=root")
        try:
            shown = cluster.ok("scontrol", "show", "reservation=maint")
            assert shown.startswith("ReservationName=maint ")
            assert shown == cluster.ok("scontrol", "show", "reservation", "maint")
        finally:
            cluster.ok("scontrol", "delete", "ReservationName=maint")
    finally:
        cluster.ok("scancel", str(job))


def test_update_entity_is_a_case_insensitive_prefix(cluster: Cluster) -> None:
    cluster.ok("scontrol", "update", "partition=short", "state=down")
    try:
        assert " State=DOWN " in cluster.ok("scontrol", "show", "partition", "short")
    finally:
        cluster.ok("scontrol", "update", "PAR=short", "State=UP")
    assert " State=UP " in cluster.ok("scontrol", "show", "partition", "short")

    cluster.ok("scontrol", "update", "nod=node-3", "state=drain", "reason=checking")
    try:
        assert "Reason=checking " in cluster.ok("scontrol", "show", "node", "node-3")
    finally:
        cluster.ok("scontrol", "update", "NODE=node-3", "state=resume")

    job = cluster.sbatch("-H", "--wrap", "true")
    try:
        cluster.ok("scontrol", "update", f"job={job}", "TimeLimit=7", "partition=short")
        shown = cluster.ok("scontrol", "show", "job", str(job))
        assert " TimeLimit=00:07:00 " in shown and " Partition=short " in shown
    finally:
        cluster.ok("scancel", str(job))

    r = cluster.run("scontrol", "update", "pa=short", "state=down")  # too short for an entity
    assert r.returncode == 1
    assert r.stderr == ("No valid entity in update command\n"
                        'Input line must include "NodeName", "PartitionName", "Reservation", '
                        '"JobId", or "SlurmctldDebug"\n')


def _dependency_shown(cluster: Cluster, job: int) -> str:
    shown = cluster.ok("scontrol", "show", "job", str(job))
    return shown.split(" Dependency=", 1)[1].split()[0]


def test_squeue_dependency_column_is_the_controllers_text(cluster: Cluster) -> None:
    held = cluster.sbatch("-H", "--wrap", "true")
    failing = cluster.sbatch("--wrap", "false")
    waiting = cluster.sbatch(f"--dependency=afterok:{held}", "--wrap", "true")
    doomed = cluster.sbatch(f"--dependency=afterok:{failing}", "--wrap", "true")
    try:
        cluster.wait_state(failing, "FAILED")
        cluster.wait_for(lambda: "(failed)" in _dependency_shown(cluster, doomed),
                         what="the dependency on a failed job to show as failed")
        column = cluster.ok("squeue", "-h", "-o", "%i %E", "-j", f"{waiting},{doomed}")
        assert sorted(column.splitlines(), key=lambda line: int(line.split()[0])) == [f"{waiting} afterok:{held}(unfulfilled)",
                                       f"{doomed} afterok:{failing}(failed)"]
        assert _dependency_shown(cluster, waiting) == f"afterok:{held}(unfulfilled)"
    finally:
        cluster.ok("scancel", str(held), str(waiting), str(doomed))


def test_sacct_user_after_allusers_limits_to_that_user(cluster: Cluster) -> None:
    job = cluster.sbatch("--wrap", "true")
    cluster.wait_state(job, "COMPLETED")

    def ids(*args: str) -> set[str]:
        return set(cluster.ok("sacct", "-X", "-n", "-P", "-o", "JobID", *args).split())

    assert str(job) in ids("-a")
    assert str(job) not in ids("-a", "-u", "nobody")  # -u after -a: nobody's jobs only
    assert str(job) in ids("-u", "nobody", "-a")      # -a after -u: everyone's
    assert str(job) in ids("-a", "-u", "root")


def test_squeue_format_all_is_every_letter(cluster: Cluster) -> None:
    job = cluster.sbatch("-H", "-J", "allfields", "--wrap", "true")
    try:
        letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + \
            [chr(c) for c in range(ord("A"), ord("Z") + 1)]
        spelled = "|".join("%" + c for c in letters)
        for spec in ("%all", "%ALL"):
            out = cluster.ok("squeue", "-j", str(job), "-o", spec)
            assert out == cluster.ok("squeue", "-j", str(job), "-o", spelled)
            header, row = out.splitlines()
            assert header.startswith("ACCOUNT|TRES_PER_NODE|MIN_CPUS|")
            assert len(header.split("|")) == 52 and len(row.split("|")) >= 52
            assert "|allfields|" in row
    finally:
        cluster.ok("scancel", str(job))


def test_sbatch_applies_slurm_lines_and_says_so_once(cluster: Cluster) -> None:
    script = cluster.workdir / "old-style.sh"
    script.write_text("#!/bin/sh\n#SLURM -J oldstyle\n# a comment\n#SLURM --comment=kept\n"
                      "#SBATCH -t 5\ntrue\n#SLURM -J ignored-after-the-first-command\n")
    r = cluster.run("sbatch", "-H", "--parsable", str(script))
    assert r.returncode == 0, r.stderr
    assert r.stderr == ("sbatch: error: Change from #SLURM to #SBATCH in your script and "
                        "verify the options are valid in sbatch\n")
    job = int(r.stdout.strip())
    try:
        shown = cluster.ok("scontrol", "show", "job", str(job))
        assert " JobName=oldstyle\n" in shown and " Comment=kept " in shown.replace("\n", " ")
        assert " TimeLimit=00:05:00 " in shown
    finally:
        cluster.ok("scancel", str(job))


def test_sbatch_records_its_host_and_session(cluster: Cluster) -> None:
    job = cluster.sbatch("-H", "--wrap", "true")
    try:
        host = os.uname().nodename.split(".")[0]
        sid = os.getsid(0)  # sbatch runs in this process's session
        assert f" AllocNode:Sid={host}:{sid}\n" in cluster.ok("scontrol", "show", "job", str(job))
        out = cluster.ok("squeue", "-h", "-j", str(job), "-O", "allocnodes:30,allocsid:12")
        assert out.split() == [host, str(sid)]
    finally:
        cluster.ok("scancel", str(job))


def test_show_step_prints_the_running_steps(cluster: Cluster) -> None:
    job = cluster.sbatch("-n", "2", "-J", "stepper", "--wrap", "srun -n 2 sleep 60")
    try:
        cluster.wait_for(lambda: f"{job}.0" in cluster.ok("squeue", "-h", "-s"), timeout=30,
                         what="step 0 to run")
        one = cluster.ok("scontrol", "show", "step", f"{job}.0")
        lines = one.split("\n")
        assert lines[0].startswith(f"StepId={job}.0 UserId={os.getuid()} StartTime=")
        assert lines[0].endswith(" TimeLimit=UNLIMITED")
        assert lines[1].startswith("   State=RUNNING Partition=debug NodeList=node-")
        assert lines[2] == "   Nodes=1 CPUs=2 Tasks=2 Name=sleep Network=(null)"
        assert lines[-3:] == ["   SrunHost:Pid=(null):0", "", ""]
        everything = cluster.ok("scontrol", "show", "steps", str(job))
        assert f"StepId={job}.batch " in everything and one in everything
        assert everything == cluster.ok("scontrol", "show", f"st={job}")
        assert cluster.ok("scontrol", "-o", "show", "step", f"{job}.0") == \
            one.replace("\n   ", " ").rstrip("\n") + "\n"
        r = cluster.run("scontrol", "show", "step", f"{job}.7")
        assert (r.returncode, r.stdout) == (1, f"Job step {job}.7 not found\n")
        r = cluster.run("scontrol", "show", "step", "999999")
        assert (r.returncode, r.stderr) == (1, "slurm_get_job_steps error: Invalid job id "
                                               "specified\n")
    finally:
        cluster.ok("scancel", str(job))
