"""Partitions and node attributes changed at runtime with scontrol (issue 18, item 1):
create, update, delete; acting at once; durable across a controller restart; undone by
`scontrol reconfigure`; operators only, with Slurm 22.05's messages."""

from __future__ import annotations

import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, needs_test_users
from tests.e2e.test_users import run_as, users  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def c() -> Iterator[Cluster]:
    # the test users must reach the socket: not under pytest's private tmp
    home = Path(tempfile.mkdtemp(prefix="corral-parts-"))
    home.chmod(0o755)
    cl = Cluster(home / "c")
    cl.start()
    try:
        yield cl
    finally:
        cl.stop()
        shutil.rmtree(home, ignore_errors=True)


def part_state(c: Cluster, name: str) -> str:
    out = c.ok("scontrol", "show", "partition", name, "-o")
    return out.split("State=")[1].split()[0]


def reason(c: Cluster, jid: int) -> str:
    return c.ok("squeue", "-h", "-j", str(jid), "-o", "%T %r").strip()


def test_drain_and_inactive_act_at_once(c: Cluster) -> None:
    queued = c.sbatch("-H", "-p", "short", "--wrap", "true")
    r = c.run("scontrol", "update", "PartitionName=short", "State=DRAIN")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    assert part_state(c, "short") == "DRAIN"
    # a drained partition refuses new jobs and runs the ones it has
    r = c.run("sbatch", "-p", "short", "--wrap", "true")
    assert (r.returncode, r.stderr) == (1, "sbatch: error: Batch job submission failed: "
                                        "Required partition not available (inactive or drain)\n")
    c.ok("scontrol", "release", str(queued))
    c.wait_state(queued, "COMPLETED")
    # INACTIVE keeps queued jobs queued
    c.ok("scontrol", "update", "PartitionName=short", "State=UP")
    held = c.sbatch("-H", "-p", "short", "--wrap", "true")
    c.ok("scontrol", "update", "PartitionName=short", "State=INACTIVE")
    c.ok("scontrol", "release", str(held))
    c.wait_for(lambda: reason(c, held) == "PENDING PartitionInactive", what="PartitionInactive")
    c.ok("scontrol", "update", "PartitionName=short", "State=UP")
    c.wait_state(held, "COMPLETED")


def test_update_keys_and_errors(c: Cluster) -> None:
    c.ok("scontrol", "update", "PartitionName=short", "MaxTime=30", "DefaultTime=5",
         "MaxNodes=1", "PriorityTier=3", "Hidden=YES", "AllowAccounts=ALL", "MaxCPUsPerNode=8")
    show = c.ok("scontrol", "show", "partition", "short", "-o")
    for field in ("MaxTime=00:30:00", "DefaultTime=00:05:00", "MaxNodes=1", "PriorityTier=3",
                  "Hidden=YES", "MaxCPUsPerNode=8"):
        assert field in show, (field, show)
    long = c.sbatch("-p", "short", "-t", "40", "--wrap", "true")
    c.wait_for(lambda: reason(c, long) == "PENDING PartitionTimeLimit", what="the new MaxTime")
    c.ok("scancel", str(long))
    c.ok("scontrol", "update", "PartitionName=short", "Hidden=NO", "MaxTime=10:00",
         "DefaultTime=NONE", "MaxNodes=UNLIMITED", "PriorityTier=1", "MaxCPUsPerNode=UNLIMITED")

    r = c.run("scontrol", "update", "PartitionName=nope", "State=UP")
    assert (r.returncode, r.stderr) == (1, "slurm_update error: Invalid partition name specified\n")
    r = c.run("scontrol", "update", "PartitionName=short", "Nodes=node-9")
    assert (r.returncode, r.stderr) == (1, "slurm_update error: Invalid node name specified\n")
    r = c.run("scontrol", "update", "PartitionName=short", "State=SIDEWAYS")
    assert r.returncode == 1 and "Invalid input: State=SIDEWAYS" in r.stderr, r.stderr
    r = c.run("scontrol", "update", "PartitionName=short", "Bogus=1")
    assert r.returncode == 1 and "Update of this parameter is not supported: Bogus=1" \
        in r.stderr, r.stderr
    assert part_state(c, "short") == "UP"


def test_node_features_weight_and_comment(c: Cluster) -> None:
    r = c.run("scontrol", "update", "NodeName=node-2", "Features=fast,big", "Weight=5",
              "Comment=new disks")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    show = c.ok("scontrol", "show", "node", "node-2")
    assert "AvailableFeatures=fast,big" in show and "Weight=5" in show, show
    assert "Comment=new disks" in show, show
    jid = c.sbatch("-C", "big", "--wrap", "true")
    c.wait_state(jid, "COMPLETED")
    assert c.ok("sacct", "-j", str(jid), "-X", "-n", "-o", "NodeList").strip() == "node-2"
    r = c.run("scontrol", "update", "NodeName=node-99", "Features=x")
    assert (r.returncode, r.stderr) == (1, "slurm_update error: Invalid node name specified\n")


def test_create_delete_survive_restart_until_reconfigure(c: Cluster) -> None:
    r = c.run("scontrol", "create", "PartitionName=extra", "Nodes=node-[3-4]", "MaxTime=5",
              "State=DRAIN")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    c.ok("scontrol", "update", "PartitionName=debug", "State=INACTIVE")
    assert c.ok("sinfo", "-h", "-p", "extra", "-o", "%P %l %D %a").split() == \
        ["extra", "5:00", "2", "drain"]
    # the runtime table outlives the controller
    c.ok("corral", "down", timeout=60)
    c.ok("corral", "up", timeout=60)
    assert part_state(c, "extra") == "DRAIN"
    assert part_state(c, "debug") == "INACTIVE"
    assert "Comment=new disks" in c.ok("scontrol", "show", "node", "node-2")
    c.ok("scontrol", "update", "PartitionName=extra", "State=UP")
    jid = c.sbatch("-p", "extra", "--wrap", "true")
    c.wait_state(jid, "COMPLETED")
    r = c.run("scontrol", "delete", "PartitionName=extra")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    r = c.run("scontrol", "delete", "PartitionName=extra")
    assert (r.returncode, r.stderr) == (
        1, "delete_partition PartitionName=extra: Invalid partition name specified\n")
    c.ok("scontrol", "create", "PartitionName=later", "Nodes=node-1")
    # reconfigure: slurm.conf's partitions again, and after a restart too
    c.ok("scontrol", "reconfigure")
    assert part_state(c, "debug") == "UP"
    assert c.run("scontrol", "show", "partition", "later").returncode == 1
    assert "AvailableFeatures=(null)" in c.ok("scontrol", "show", "node", "node-2")
    c.ok("corral", "down", timeout=60)
    c.ok("corral", "up", timeout=60)
    assert part_state(c, "debug") == "UP"
    assert c.run("scontrol", "show", "partition", "later").returncode == 1


@needs_test_users
def test_plain_users_may_not_change_partitions(c: Cluster,
                                               users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    alice = users["corral-alice"]
    for args, said in (
            (["update", "PartitionName=short", "State=DOWN"],
             "slurm_update error: Invalid user id\n"),
            (["create", "PartitionName=mine", "Nodes=node-1"],
             "Error creating the partition: Invalid user id\n"),
            (["delete", "PartitionName=short"],
             "delete_partition PartitionName=short: Invalid user id\n"),
            (["update", "NodeName=node-1", "Weight=9"], "slurm_update error: Invalid user id\n")):
        r = run_as(c, alice, "scontrol", *args)
        assert (r.returncode, r.stderr) == (1, said), (args, r)
    assert part_state(c, "short") == "UP"
    assert c.run("scontrol", "show", "partition", "mine").returncode == 1
