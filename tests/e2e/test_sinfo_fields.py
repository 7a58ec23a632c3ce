"""End-to-end: sinfo -O All / -o %all, -O Port and the nodes' TmpDisk, through the real command."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow

CONFIG = """\
ClusterName=disks
NodeName=node-1 CPUs=4 RealMemory=2000 TmpDisk=8000
NodeName=node-[2-3] CPUs=2 RealMemory=1000 TmpDisk=500
PartitionName=debug Nodes=node-[1-3] Default=YES MaxTime=INFINITE State=UP
PartitionName=ops Nodes=node-1 RootOnly=YES MaxCPUsPerNode=1 State=UP
"""


def test_sinfo_all_port_and_tmp_disk(tmp_path: Path) -> None:
    c = Cluster(tmp_path / "corral", CONFIG)
    try:
        c.start()
        # the partitions' RootOnly= and MaxCPUsPerNode=
        assert c.ok("sinfo", "-h", "-o", "%R %r %B") == "debug no UNLIMITED\nops yes 1\n"
        # TmpDisk: the smallest of a line's nodes, "+" when they differ; -e and -N split them
        assert c.ok("sinfo", "-p", "debug", "-h", "-o", "%N %d %c %m") == (
            "node-[1-3] 500+ 2+ 1000+\n")
        assert c.ok("sinfo", "-p", "debug", "-h", "-O", "Disk:6,NodeList") == (
            "500+  node-[1-3]          \n")
        assert c.ok("sinfo", "-p", "debug", "-h", "-e", "-o", "%N %d") == (
            "node-1 8000\nnode-[2-3] 500\n")
        lines = c.ok("sinfo", "-p", "debug", "-N", "-l").splitlines()
        assert lines[1].split()[7] == "TMP_DISK"
        assert [line.split()[7] for line in lines[2:]] == ["8000", "500", "500"]
        # Port: what Slurm prints for a node without Port= (agents listen on no port)
        assert c.ok("sinfo", "-p", "debug", "-O", "NodeList:11,Port:.5") == (
            "NODELIST    PORT\nnode-[1-3]  6818\n")
        # All: every letter sinfo knows, "|"-separated, whole; then any other name
        out = c.ok("sinfo", "-p", "debug", "-O", "All,Port")
        header, line = out.splitlines()
        assert header.startswith("AVAIL|ACTIVE_FEATURES|CPUS|TMP_DISK|FREE_MEM|")
        assert header.endswith("|CLUSTER |SOCKETS |CORES |THREADS PORT                ")
        assert line.startswith("up|(null)|2+|500+|")
        assert " |node-[1-3] |" in line and " |debug* |debug |" in line
        assert len(header.split("|")) == len(line.split("|"))
        assert c.ok("sinfo", "-p", "debug", "-o", "%all") == c.ok("sinfo", "-p", "debug",
                                                                  "-O", "All")
        r = c.run("sinfo", "-p", "debug", "-O", "All,Bogus")
        assert r.returncode == 0
        assert r.stderr == "sinfo: error: Invalid job format specification: Bogus\n"
    finally:
        c.stop()
