"""Node health through the real commands: HealthCheckProgram drains a node that fails it and
`scontrol update state=resume` brings it back only once it passes; simulated GPU XIDs drain
(hardware) or not (the user's); `sacctmgr list event all_time` keeps the drain after the
resume, and sreport counts its down time."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.agent.gpu import SIM_FILE, write_simulated
from tests.e2e.cluster import Cluster

CONFIG = """\
ClusterName=testcluster
KillWait=2
MinJobAge=600
SchedulerInterval=1
SlurmdTimeout=30
HealthCheckInterval=1
HealthCheckNodeState=ANY
HealthCheckTimeout={timeout}
HealthCheckProgram={program}
NodeName=node-[1-3] CPUs=4 RealMemory=4000 Gres=gpu:2
PartitionName=debug Nodes=node-[1-3] Default=YES MaxTime=INFINITE State=UP
"""
HEALTH_CHECK_TIMEOUT_S = 5

# fails on a node whose flag file exists, with a first line naming what it saw
PROGRAM = """#!/bin/sh
if [ -e "{flags}/fail-$SLURMD_NODENAME" ]; then
    echo "NHC: disk /scratch full on $SLURMD_NODENAME"
    echo "a second line nobody reads"
    exit 1
fi
if [ -e "{flags}/nhc-$SLURMD_NODENAME" ]; then
    # as NHC does: drain through scontrol itself, and exit 0
    scontrol update nodename="$SLURMD_NODENAME" state=drain reason="NHC: /scratch not mounted"
    exit 0
fi
if [ -e "{flags}/hang-$SLURMD_NODENAME" ]; then
    sleep 60
fi
exit 0
"""


def _gpus(xids: dict[tuple[str, int], int]) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for n in ("node-1", "node-2", "node-3"):
        for i in range(2):
            g: dict[str, object] = {"node": n, "index": i, "memory_total": 1 << 34}
            if (n, i) in xids:
                g["xid"] = xids[(n, i)]
            out.append(g)
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    home = Path(tmp_path_factory.mktemp("health"))
    flags = home / "flags"
    flags.mkdir()
    program = home / "healthcheck.sh"
    program.write_text(PROGRAM.format(flags=flags))
    program.chmod(0o755)
    write_simulated(str(home / SIM_FILE), _gpus({}))
    c = Cluster(home, CONFIG.format(program=program, timeout=HEALTH_CHECK_TIMEOUT_S))
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _node(c: Cluster, name: str) -> tuple[str, str]:
    """(compact state, reason) as sinfo prints them."""
    out = c.ok("sinfo", "-h", "-N", "-n", name, "-o", "%t|%E").strip()
    state, _, reason = out.partition("|")
    return state, reason


def test_a_failing_check_drains_and_resume_waits_for_a_pass(cluster: Cluster) -> None:
    c = cluster
    flags = c.home / "flags"
    (flags / "fail-node-2").touch()
    c.wait_for(lambda: _node(c, "node-2")[0] in ("drain", "drng"), timeout=60,
               what="node-2 drained by its health check")
    assert _node(c, "node-2")[1] == "NHC: disk /scratch full on node-2"
    assert _node(c, "node-1")[0] == "idle"  # only the failing node
    r = c.run("scontrol", "update", "nodename=node-2", "state=resume")
    assert r.returncode != 0
    assert "still fails its health check" in r.stderr
    assert _node(c, "node-2")[0] == "drain"
    (flags / "fail-node-2").unlink()

    def resumed() -> bool:
        return c.run("scontrol", "update", "nodename=node-2", "state=resume").returncode == 0

    c.wait_for(resumed, timeout=60, what="node-2 resumed once its check passes")
    assert _node(c, "node-2") == ("idle", "none")
    # the drain stays in the node's history after the resume, with its end
    out = c.ok("sacctmgr", "-nP", "list", "event", "all_time", "nodes=node-2",
               "format=nodename,state,reason,user,end")
    lines = [ln.split("|") for ln in out.splitlines()]
    assert len(lines) == 1, out
    name, state, reason, user, end = lines[0]
    assert (name, state, reason, user) == ("node-2", "DRAIN",
                                            "NHC: disk /scratch full on node-2", "root(0)")
    assert end != "Unknown"
    # sreport counts the drained time as down time after the node is back
    out = c.ok("sreport", "-nP", "-t", "seconds", "-T", "cpu", "cluster", "utilization",
               "start=now-1hours", "end=now+1hours")
    _cluster, _tres, _alloc, down, *_ = out.splitlines()[0].split("|")
    assert int(down) >= 4, out  # node-2's 4 CPUs for a second at least


def test_an_nhc_style_program_drains_through_scontrol_itself(cluster: Cluster) -> None:
    c = cluster
    flag = c.home / "flags" / "nhc-node-1"
    flag.touch()
    try:
        c.wait_for(lambda: _node(c, "node-1")[0] == "drain", timeout=60,
                   what="node-1 drained by the program's scontrol")
        assert _node(c, "node-1")[1] == "NHC: /scratch not mounted"
    finally:
        flag.unlink()
    # A run that saw the flag before it went may still be on its way to its scontrol: every
    # such run ends within HealthCheckTimeout (5 s), and a drain it makes after our resume
    # would be left for the next test (a loaded machine made that happen).
    time.sleep(HEALTH_CHECK_TIMEOUT_S + 1)
    # it exited 0: nothing holds the resume back
    c.ok("scontrol", "update", "nodename=node-1", "state=resume")
    assert _node(c, "node-1")[0] == "idle"


def test_a_hanging_check_is_killed_at_the_timeout_and_drains(cluster: Cluster) -> None:
    c = cluster
    flags = c.home / "flags"
    (flags / "hang-node-3").touch()
    try:
        c.wait_for(lambda: _node(c, "node-3")[0] == "drain", timeout=60,
                   what="node-3 drained by a hanging check")
        assert _node(c, "node-3")[1] == "HealthCheckProgram timed out after 5s"
    finally:
        (flags / "hang-node-3").unlink()
    c.wait_for(lambda: c.run("scontrol", "update", "nodename=node-3",
                             "state=resume").returncode == 0, timeout=60, what="node-3 back")


def test_a_hardware_xid_drains_and_a_user_xid_does_not(cluster: Cluster) -> None:
    c = cluster
    sim = str(c.home / SIM_FILE)
    write_simulated(sim, _gpus({("node-1", 1): 13}))  # the user's illegal access
    write_simulated(sim, _gpus({("node-1", 1): 13, ("node-3", 0): 79}))  # off the bus
    c.wait_for(lambda: _node(c, "node-3")[0] == "drain", timeout=60,
               what="node-3 drained by XID 79")
    assert _node(c, "node-3")[1].startswith("GPU 0 XID 79: GPU has fallen off the bus")
    assert _node(c, "node-1")[0] == "idle"  # XID 13 is the program's fault
    log = (c.home / "log" / "controller.log")
    if log.exists():
        assert "GPU 1 XID 13" in log.read_text()
    # the GPU is still lost: no resume; once it is back, resume works
    r = c.run("scontrol", "update", "nodename=node-3", "state=resume")
    assert r.returncode != 0 and "still fails its health check" in r.stderr
    write_simulated(sim, _gpus({}))
    c.wait_for(lambda: c.run("scontrol", "update", "nodename=node-3",
                             "state=resume").returncode == 0, timeout=60, what="node-3 back")
    assert _node(c, "node-3")[0] == "idle"
