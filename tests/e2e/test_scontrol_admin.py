"""scontrol ping, top, notify and reconfigure through the real commands."""

from __future__ import annotations

import pytest

from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow


def test_ping_says_the_controller_is_up(cluster: Cluster) -> None:
    out = cluster.ok("scontrol", "ping")
    assert out.startswith("Slurmctld(primary) at ") and out.endswith(" is UP\n"), out


def test_top_moves_a_job_ahead_of_the_users_other_jobs(cluster: Cluster) -> None:
    c = cluster
    jobs = [c.sbatch("--begin=now+1hour", "-p", "short", "--wrap", "true") for _ in range(3)]

    def prio(j: int) -> int:
        return int(c.ok("squeue", "-h", "-j", str(j), "-o", "%Q").strip())

    c.ok("scontrol", "update", f"JobId={jobs[0]}", "Priority=500")
    c.ok("scontrol", "update", f"JobId={jobs[1]}", "Priority=400")
    c.ok("scontrol", "update", f"JobId={jobs[2]}", "Priority=300")
    c.ok("scontrol", "top", str(jobs[2]))
    after = [prio(j) for j in jobs]
    assert after[2] == max(after), after
    c.ok("scancel", *map(str, jobs))


def test_notify_reaches_a_running_job(cluster: Cluster) -> None:
    c = cluster
    jid = c.sbatch("--wrap", "sleep 30")
    c.wait_state(jid, "RUNNING")
    c.ok("scontrol", "notify", str(jid), "checkpoint soon")
    log = (c.home / "log" / "controller.log").read_text()
    assert "checkpoint soon" in log
    r = c.run("scontrol", "notify", "999999", "x")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    c.ok("scancel", str(jid))


def test_reconfigure_applies_a_new_partition_without_a_restart(cluster: Cluster) -> None:
    c = cluster
    conf = c.home / "slurm.conf"
    started = c.ok("scontrol", "show", "config")
    conf.write_text(conf.read_text() + "PartitionName=extra Nodes=node-[3-4] MaxTime=5 State=UP\n")
    c.ok("scontrol", "reconfigure")
    assert c.ok("sinfo", "-h", "-p", "extra", "-o", "%P %l %D").split() == ["extra", "5:00", "2"]
    jid = c.sbatch("-p", "extra", "--wrap", "true")
    c.wait_state(jid, "COMPLETED")
    assert "BOOT_TIME" in started  # the controller was not restarted: same process answers
    assert c.ok("scontrol", "show", "config").split("BOOT_TIME")[1].split("\n")[0] == \
        started.split("BOOT_TIME")[1].split("\n")[0]
