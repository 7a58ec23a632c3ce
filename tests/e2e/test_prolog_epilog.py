"""Prolog and Epilog through the real commands: they run as root on every allocated node
with Slurm's environment; a failing Prolog drains the node ("Prolog error") and requeues
the job held; a hanging Epilog is killed at PrologEpilogTimeout and drains the node."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster

CONFIG = """\
ClusterName=testcluster
KillWait=2
MinJobAge=600
SchedulerInterval=1
Prolog={prolog}
Epilog={epilog}
PrologFlags=Alloc
PrologEpilogTimeout=3
NodeName=node-[1-3] CPUs=4 RealMemory=4000
PartitionName=debug Nodes=node-[1-3] Default=YES MaxTime=INFINITE State=UP
"""

# each run leaves a line per node; a flag file makes it fail or hang on one node
SCRIPT = """#!/bin/sh
echo "$SLURM_SCRIPT_CONTEXT $SLURMD_NODENAME $SLURM_JOB_ID $SLURM_JOB_USER $SLURM_JOB_UID \
$SLURM_JOB_NODELIST $SLURM_JOB_PARTITION $(id -u)" >> {out}/{kind}.log
[ -e {out}/{kind}-fail-$SLURMD_NODENAME ] && exit 3
[ -e {out}/{kind}-hang-$SLURMD_NODENAME ] && sleep 60
exit 0
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    home = Path(tmp_path_factory.mktemp("prolog"))
    out = home / "runs"
    out.mkdir()
    paths = {}
    for kind in ("prolog", "epilog"):
        p = home / f"{kind}.sh"
        p.write_text(SCRIPT.format(out=out, kind=kind))
        p.chmod(0o755)
        paths[kind] = p
    c = Cluster(home, CONFIG.format(**paths))
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _lines(c: Cluster, kind: str, job: int) -> list[list[str]]:
    f = c.home / "runs" / f"{kind}.log"
    if not f.exists():
        return []
    return [ln.split() for ln in f.read_text().splitlines() if ln.split()[2:3] == [str(job)]]


def _node(c: Cluster, name: str) -> tuple[str, str]:
    out = c.ok("sinfo", "-h", "-N", "-n", name, "-o", "%t|%E").strip()
    state, _, reason = out.partition("|")
    return state, reason


def test_prolog_and_epilog_run_on_every_node_with_slurms_environment(cluster: Cluster) -> None:
    c = cluster
    job = c.sbatch("-N", "2", "-w", "node-[1-2]", "-o", "/dev/null", "--wrap", "true")
    c.wait_state(job, "COMPLETED", timeout=60)
    c.wait_for(lambda: len(_lines(c, "epilog", job)) == 2, timeout=30, what="both epilogs")
    pro = sorted(_lines(c, "prolog", job), key=lambda x: x[1])
    assert [ln[1] for ln in pro] == ["node-1", "node-2"]  # every node, with PrologFlags=Alloc
    for ln in pro:
        assert ln[0] == "prolog_slurmd"
        assert ln[3:] == ["root", "0", "node-[1-2]", "debug", "0"]  # run as root
    assert {ln[0] for ln in _lines(c, "epilog", job)} == {"epilog_slurmd"}


def test_a_failing_prolog_drains_the_node_and_requeues_the_job_held(cluster: Cluster) -> None:
    c = cluster
    flag = c.home / "runs" / "prolog-fail-node-3"
    flag.touch()
    try:
        ran = c.home / "runs" / "ran"
        job = c.sbatch("-w", "node-3", "-o", "/dev/null", "--wrap", f"touch {ran}")
        c.wait_for(lambda: _node(c, "node-3")[0] in ("drain", "drng"), timeout=60,
                   what="node-3 drained by its Prolog")
        assert _node(c, "node-3")[1] == "Prolog error"
        c.wait_for(lambda: c.ok("squeue", "-h", "-j", str(job), "-o", "%T").strip()
                   == "PENDING", timeout=60, what="the job pending again")
        out = c.ok("scontrol", "show", "job", str(job))
        assert "Restarts=1" in out
        assert "JobState=PENDING" in out and "Priority=0" in out  # held
        assert not ran.exists()  # the batch step never started
    finally:
        flag.unlink()
        c.run("scancel", str(job))
        c.ok("scontrol", "update", "nodename=node-3", "state=resume")


def test_a_hanging_epilog_is_killed_at_the_timeout_and_drains(cluster: Cluster) -> None:
    c = cluster
    flag = c.home / "runs" / "epilog-hang-node-2"
    flag.touch()
    try:
        job = c.sbatch("-w", "node-2", "-o", "/dev/null", "--wrap", "true")
        c.wait_state(job, "COMPLETED", timeout=60)
        c.wait_for(lambda: _node(c, "node-2")[0] == "drain", timeout=60,
                   what="node-2 drained by its hanging Epilog")
        assert _node(c, "node-2")[1] == "Epilog error"
        out = c.ok("sacctmgr", "-nP", "list", "event", "all_time", "nodes=node-2",
                   "format=nodename,state,reason,user")
        assert "node-2|DRAIN|Epilog error|root(0)" in out.splitlines()
    finally:
        flag.unlink()
        c.ok("scontrol", "update", "nodename=node-2", "state=resume")


@pytest.fixture(scope="module")
def at_step(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Without PrologFlags=Alloc: the Prolog runs before the batch step and each node's
    first srun step."""
    home = Path(tmp_path_factory.mktemp("prolog-at-step"))
    out = home / "runs"
    out.mkdir()
    paths = {}
    for kind in ("prolog", "epilog"):
        p = home / f"{kind}.sh"
        p.write_text(SCRIPT.format(out=out, kind=kind))
        p.chmod(0o755)
        paths[kind] = p
    config = CONFIG.format(**paths).replace("PrologFlags=Alloc\n", "")
    c = Cluster(home, config)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def test_without_alloc_the_prolog_runs_where_the_job_runs_something(at_step: Cluster) -> None:
    c = at_step
    alone = c.sbatch("-N2", "-w", "node-[1-2]", "-o", "/dev/null", "--wrap", "true")
    c.wait_state(alone, "COMPLETED", timeout=60)
    c.wait_for(lambda: len(_lines(c, "epilog", alone)) == 2, timeout=30, what="epilogs")
    assert [ln[1] for ln in _lines(c, "prolog", alone)] == ["node-1"]  # the batch host only
    stepped = c.sbatch("-N2", "-w", "node-[1-2]", "-o", "/dev/null", "--wrap", "srun true")
    c.wait_state(stepped, "COMPLETED", timeout=60)
    assert sorted(ln[1] for ln in _lines(c, "prolog", stepped)) == ["node-1", "node-2"]
