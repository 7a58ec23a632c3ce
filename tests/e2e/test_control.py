"""End-to-end: scontrol actions, scancel filters, squeue --start, sbatch --wait, sinfo views."""

from __future__ import annotations

import re
import time

import pytest

from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow


def test_requeue_runs_the_job_again(cluster: Cluster) -> None:
    log = cluster.workdir / "requeue.log"
    jid = cluster.sbatch("--wrap", f"echo run ${{SLURM_RESTART_COUNT:-0}} >> {log}; sleep 30")
    cluster.wait_for(lambda: log.exists() and "run 0" in log.read_text(), what="first run")
    cluster.ok("scontrol", "requeue", str(jid))
    cluster.wait_for(lambda: "run 1" in log.read_text(), timeout=30, what="second run")
    out = cluster.ok("scontrol", "show", "job", str(jid))
    assert "Restarts=1" in out
    cluster.ok("scontrol", "requeuehold", str(jid))
    cluster.wait_for(lambda: cluster.ok("squeue", "-h", "-j", str(jid), "-o", "%T %r").split()
                     == ["PENDING", "JobHeldAdmin"], what="requeued and held")
    cluster.ok("scontrol", "release", str(jid))
    cluster.wait_for(lambda: "run 2" in log.read_text(), timeout=30, what="third run")
    cluster.ok("scancel", str(jid))
    cluster.wait_state(jid, "CANCELLED")


def test_suspend_and_resume(cluster: Cluster) -> None:
    counter = cluster.workdir / "counter"
    jid = cluster.sbatch("--wrap", f"i=0; while true; do i=$((i+1)); echo $i > {counter}; sleep 0.1; done")
    cluster.wait_for(lambda: counter.exists() and counter.read_text().strip() not in ("", "1"), what="counting")
    cluster.ok("scontrol", "suspend", str(jid))
    assert cluster.ok("squeue", "-h", "-j", str(jid), "-o", "%T").strip() == "SUSPENDED"
    time.sleep(0.5)
    frozen = counter.read_text()
    time.sleep(1.0)
    assert counter.read_text() == frozen
    cluster.ok("scontrol", "resume", str(jid))
    cluster.wait_for(lambda: counter.read_text() != frozen, what="counting again")
    assert cluster.ok("squeue", "-h", "-j", str(jid), "-o", "%T").strip() == "RUNNING"
    cluster.ok("scancel", str(jid))
    cluster.wait_state(jid, "CANCELLED")


def test_update_pending_job(cluster: Cluster) -> None:
    jid = cluster.sbatch("-H", "-J", "before", "-t", "30", "--wrap", "true")
    cluster.ok("scontrol", "update", f"jobid={jid}", "JobName=after", "TimeLimit=10", "Partition=short")
    out = cluster.ok("squeue", "-h", "-j", str(jid), "-o", "%j %l %P")
    assert out.split() == ["after", "10:00", "short"]
    r = cluster.run("scontrol", "update", f"jobid={jid}", "Partition=nosuch")
    assert r.returncode == 1 and "Invalid partition name specified" in r.stderr
    cluster.ok("scancel", str(jid))


def test_scancel_filters(cluster: Cluster) -> None:
    a = cluster.sbatch("-H", "-J", "filt-a", "--wrap", "true")
    b = cluster.sbatch("-H", "-J", "filt-b", "--wrap", "true")
    cluster.ok("scancel", "-n", "filt-a")
    cluster.wait_state(a, "CANCELLED")
    assert cluster.state(b) == "PENDING"
    cluster.ok("scancel", "-t", "PENDING", "-n", "filt-b")
    cluster.wait_state(b, "CANCELLED")
    arr = cluster.sbatch("-H", "--array=0-4", "--wrap", "true")
    cluster.ok("scancel", f"{arr}_2")
    ids = cluster.squeue_ids("-j", str(arr), "-r")
    assert f"{arr}_2" not in ids and f"{arr}_3" in ids
    cluster.ok("scancel", str(arr))
    cluster.wait_for(lambda: cluster.squeue_ids("-j", str(arr)) == [], what="array gone")


def test_sbatch_wait_returns_exit_code(cluster: Cluster) -> None:
    r = cluster.run("sbatch", "-W", "--wrap", "exit 7", timeout=60)
    assert r.returncode == 7, r.stderr
    assert r.stdout.startswith("Submitted batch job ")
    r = cluster.run("sbatch", "--wait", "--wrap", "true", timeout=60)
    assert r.returncode == 0


def test_squeue_start_shows_backfill_plan(cluster: Cluster) -> None:
    # occupy every CPU of the short partition's two nodes with time-limited jobs
    blockers = [cluster.sbatch("-p", "short", "-N1", "-c16", "-t", "5", "--wrap", "sleep 60")
                for _ in range(2)]
    for b in blockers:
        cluster.wait_state(b, "RUNNING")
    waiting = cluster.sbatch("-p", "short", "-N2", "-c16", "-t", "5", "--wrap", "true")
    cluster.wait_for(lambda: cluster.ok("squeue", "-h", "-j", str(waiting), "-o", "%r").strip() == "Resources",
                     what="Resources reason")
    out = cluster.ok("squeue", "--start", "-j", str(waiting))
    header, row = out.splitlines()[:2]
    assert header.split() == ["JOBID", "PARTITION", "NAME", "USER", "ST", "START_TIME", "NODES",
                              "SCHEDNODES", "NODELIST(REASON)"]
    start = row.split()[5]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", start), row
    planned = time.mktime(time.strptime(start, "%Y-%m-%dT%H:%M:%S"))
    assert 200 < planned - time.time() < 330  # when the 5-minute blockers end
    cluster.ok("scancel", str(waiting), *map(str, blockers))


def test_sinfo_node_views(cluster: Cluster) -> None:
    out = cluster.ok("sinfo", "-N")
    lines = out.splitlines()
    assert lines[0].split() == ["NODELIST", "NODES", "PARTITION", "STATE"]
    assert any(re.fullmatch(r"node-1\s+1\s+debug\*\s+(idle|mix|alloc)\s*", ln) for ln in lines), out
    out = cluster.ok("sinfo", "-h", "-N", "-o", "%N %c %m %G")
    assert "node-1 16 64000 gpu:4" in out.splitlines()
    out = cluster.ok("sinfo", "-s")
    assert out.splitlines()[0].split() == ["PARTITION", "AVAIL", "TIMELIMIT", "NODES(A/I/O/T)", "NODELIST"]
    show = cluster.ok("scontrol", "show", "node", "node-2")
    assert "NodeName=node-2" in show and "Gres=gpu:4" in show and "RealMemory=64000" in show
