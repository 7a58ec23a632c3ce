"""`scontrol reconfigure` applies slurm.conf's scheduling cadence, health check and
EpilogSlurmctld settings at once, as slurmctld does: a shorter `sched_interval` starts a
job whose begin time passed without waiting out the old interval, a shorter
`HealthCheckInterval` (with a new program and `HealthCheckNodeState`) runs the check
without waiting out the old one, and an `EpilogSlurmctld` added by a reconfigure runs at
the next job's end.  `scontrol show config` shows the new values.
(Prolog/Epilog/PrologSlurmctld: tests/e2e/test_reconfigure_settings.py.)"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, running

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

# a periodic pass every 60 s; a health check every hour (its first run at the first tick)
BASE = """\
ClusterName=testcluster
KillWait=2
MinJobAge=600
SchedulerParameters=sched_interval=60
NodeName=node-[1-2] CPUs=4 RealMemory=4000
PartitionName=debug Nodes=node-[1-2] Default=YES MaxTime=INFINITE State=UP
"""

# writes "<context> <node or job>" lines
SCRIPT = """#!/bin/sh
echo "${{SLURM_SCRIPT_CONTEXT:-health}} ${{SLURMD_NODENAME:-$SLURM_JOB_ID}}" >> {log}
exit 0
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory, BASE, "reconf-cadence") as c:
        yield c


def config_value(c: Cluster, key: str) -> str:
    m = re.search(rf"^{key}\s+= (.*)$", c.ok("scontrol", "show", "config"), re.M)
    assert m, key
    return m.group(1)


def script(c: Cluster, name: str) -> tuple[Path, Path]:
    log = c.home / f"{name}.log"
    path = c.home / f"{name}.sh"
    path.write_text(SCRIPT.format(log=log))
    path.chmod(0o755)
    return path, log


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_a_shorter_sched_interval_applies_at_once(cluster: Cluster) -> None:
    c = cluster
    assert config_value(c, "SchedulerParameters") == "sched_interval=60"
    # its begin time passes after its submission's pass and the reconfigure's: only a
    # periodic pass starts it
    job = c.sbatch("--begin=now+8", "-o", "/dev/null", "--wrap", "true")
    t0 = time.monotonic()
    c.reconfigure(BASE.replace("sched_interval=60", "sched_interval=1"))
    assert config_value(c, "SchedulerParameters") == "sched_interval=1"
    assert c.state(job) == "PENDING"
    # within seconds of its begin time, well before the old interval's 60 s are out
    assert c.wait_state(job, "COMPLETED", timeout=30) == "COMPLETED"
    assert time.monotonic() - t0 >= 6  # not before its begin time


def test_health_check_settings_apply_at_once(cluster: Cluster) -> None:
    c = cluster
    program, log = script(c, "health")
    fast = BASE.replace("sched_interval=60", "sched_interval=1")
    c.reconfigure(fast + f"HealthCheckProgram={program}\nHealthCheckInterval=3600\n")
    c.wait_for(lambda: sorted(lines(log)) == ["health node-1", "health node-2"], timeout=30,
               what=f"the first health check on both nodes: {lines(log)}")
    # node-1 busy, node-2 idle: with HealthCheckNodeState=ALLOC only node-1 is checked,
    # every 2 s now, not an hour after the last check
    job = c.sbatch("-w", "node-1", "--exclusive", "-o", "/dev/null", "--wrap", "sleep 60")
    try:
        c.wait_state(job, "RUNNING")
        log.write_text("")
        c.reconfigure(fast + f"HealthCheckProgram={program}\nHealthCheckInterval=2\n"
                    "HealthCheckNodeState=ALLOC\n")
        assert config_value(c, "HealthCheckInterval") == "2 sec"
        assert config_value(c, "HealthCheckNodeState") == "ALLOC"
        c.wait_for(lambda: lines(log).count("health node-1") >= 2, timeout=30,
                   what=f"node-1's health checks every 2 s: {lines(log)}")
        assert "health node-2" not in lines(log)
    finally:
        c.run("scancel", str(job))
    # dropped from the file: no more checks
    c.reconfigure(fast)
    assert config_value(c, "HealthCheckProgram") == "(null)"
    time.sleep(1)  # a check already under way ends
    log.write_text("")
    time.sleep(4)
    assert lines(log) == []


def test_epilog_slurmctld_added_by_reconfigure_runs(cluster: Cluster) -> None:
    c = cluster
    epilog, log = script(c, "epilog")
    fast = BASE.replace("sched_interval=60", "sched_interval=1")
    c.reconfigure(fast + f"EpilogSlurmctld={epilog}\n")
    assert config_value(c, "EpilogSlurmctld") == str(epilog)
    job = c.sbatch("-o", "/dev/null", "--wrap", "true")
    c.wait_state(job, "COMPLETED", timeout=60)
    c.wait_for(lambda: f"epilog_slurmctld {job}" in lines(log), timeout=30,
               what=f"the EpilogSlurmctld of job {job}: {lines(log)}")
    c.reconfigure(fast)
    after = c.sbatch("-o", "/dev/null", "--wrap", "true")
    c.wait_state(after, "COMPLETED", timeout=60)
    time.sleep(2)
    assert not any(ln.endswith(f" {after}") for ln in lines(log))
