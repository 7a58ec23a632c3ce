"""sinfo -O All / %all, Port, TMP_DISK and the "min+" sizes of Slurm 22.05 (sinfo/opts.c,
print.c, sinfo.c's _match_node_data)."""

from __future__ import annotations

from typing import Any

import pytest

from corral.cli import client, sinfo
from corral.model.node import Node, Partition

# Slurm's %all: lower-case letters end in "|", upper-case ones in " |", the last in " ";
# the letters sinfo does not know (i j k q x y J K Q W) are left out with their separators.
ALL_HEADER = (
    "AVAIL|ACTIVE_FEATURES|CPUS|TMP_DISK|FREE_MEM|AVAIL_FEATURES|GROUPS|OVERSUBSCRIBE|"
    "TIMELIMIT|MEMORY|HOSTNAMES|NODE_ADDR|PRIO_TIER|ROOT|JOB_SIZE|STATE|USER|VERSION|WEIGHT|"
    "S:C:T|NODES(A/I) |MAX_CPUS_PER_NODE |CPUS(A/I/O/T) |NODES |REASON |NODES(A/I/O/T) |"
    "GRES |TIMESTAMP |PRIO_JOB_FACTOR |DEFAULTTIME |PREEMPT_MODE |NODELIST |CPU_LOAD |"
    "PARTITION |PARTITION |ALLOCNODES |STATE |USER |CLUSTER |SOCKETS |CORES |THREADS ")
ALL_IDLE = (
    "up|(null)|16|100|N/A|(null)|all|NO|infinite|64000|h|10.0.0.1|1|no|1-infinite|idle|"
    "Unknown|22.05.8|1|1:16:1|0/2 |UNLIMITED |0/32/0/32 |2 |none |0/2/0/2 |(null) |Unknown |1 |"
    "n/a |OFF |n[1-2] |0.00 |p* |p |all |idle |Unknown |N/A |1 |16 |1 ")


pytestmark = pytest.mark.usefixtures("utc_tz")  # (tests/unit/conftest.py)


def node(i: int, **kw: Any) -> dict[str, Any]:
    kw.setdefault("cpus", 16)
    kw.setdefault("real_memory", 64000)
    kw.setdefault("cores_per_socket", kw["cpus"])
    kw.setdefault("hostname", "h")
    n = Node(name=f"n{i}", partitions=["p"], addr="10.0.0.1",
             responding=True, registered=True, **kw)
    return n.to_dict()


def cluster(*nodes: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    names = [n["name"] for n in nodes]
    return list(nodes), [Partition(name="p", nodes=names, default=True).to_dict()]


def show(argv: list[str], c: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> str:
    opts = sinfo.parse_args(argv)
    assert not isinstance(opts, int)
    nodes, parts = c
    sinfo.prepare(opts, nodes, parts)
    return sinfo.format_sinfo(nodes, parts, 0.0, opts)


def test_all_letters_as_slurm_lists_them() -> None:
    c = cluster(node(1, tmp_disk=100), node(2, tmp_disk=100))
    assert show(["-O", "All"], c) == ALL_HEADER + "\n" + ALL_IDLE + "\n"
    # -o %all is the same spec (the whole spec, any case); -O all too
    for argv in (["-o", "%all"], ["-o", "%ALL"], ["-O", "all"]):
        assert show(argv, c) == ALL_HEADER + "\n" + ALL_IDLE + "\n"
    # text before it is a prefix of every line; "%all" inside a longer spec is %a then "ll"
    assert show(["-o", "> %all"], c) == "> " + ALL_HEADER + "\n> " + ALL_IDLE + "\n"
    assert show(["-h", "-o", "%all|"], c) == "upll|\n"


def test_all_with_other_names_and_port() -> None:
    c = cluster(node(1), node(2))
    out = show(["-h", "-O", "Port:6,All,NodeList:3"], c)
    assert out == "6818  " + ALL_IDLE.replace("|100|", "|0|") + "n[1\n"
    assert show(["-O", "NodeList:8,Port:.6"], c) == ("NODELIST  PORT\nn[1-2]    6818\n")


def test_all_lines_split_by_state_reason_hostname() -> None:
    c = cluster(node(1), node(2, admin_state="drain", reason="disk", reason_user="root",
                               reason_uid=0, reason_time=0.0), node(3, hostname="other"))
    lines = show(["-h", "-O", "All"], c).splitlines()
    assert [line.split("|")[15] for line in lines] == ["drain", "idle", "idle"]
    assert [line.split(" |")[11] for line in lines] == ["n2", "n1", "n3"]


def test_tmp_disk_min_plus_and_exact() -> None:
    c = cluster(node(1, tmp_disk=2000), node(2, tmp_disk=500), node(3, tmp_disk=500))
    assert show(["-o", "%N %d"], c) == "NODELIST TMP_DISK\nn[1-3] 500+\n"
    assert show(["-h", "-O", "NodeList:7,Disk:.5"], c) == "n[1-3]  500+\n"
    # -e: nodes of different sizes are not grouped
    assert show(["-h", "-e", "-o", "%N %d"], c) == "n1 2000\nn[2-3] 500\n"
    assert show(["-h", "-N", "-o", "%N %d"], c) == "n1 2000\nn2 500\nn3 500\n"
    # the long node listing's TMP_DISK column
    out = show(["-h", "-N", "-l"], cluster(node(1, tmp_disk=750)))
    assert out.split()[7] == "750"  # and no date line with -h


def test_cpus_memory_sct_weight_min_plus() -> None:
    c = cluster(node(1, cpus=8, real_memory=1000, weight=5),
                node(2, cpus=16, real_memory=2000, weight=1))
    assert show(["-h", "-o", "%N %c %m %z %X %Y %Z %w"], c) == "n[1-2] 8+ 1000+ 1:8+:1 1 8+ 1 1+\n"
    assert show(["-h", "-e", "-o", "%N %c %m %w"], c) == "n1 8 1000 5\nn2 16 2000 1\n"
    # state and features still separate lines without -e
    c = cluster(node(1, features=["a"]), node(2))
    assert show(["-h", "-o", "%N %f"], c) == "n1 a\nn2 (null)\n"


def test_port_of_an_empty_line() -> None:
    # a partition whose nodes are all filtered out still has a line, with no nodes
    assert show(["-h", "-t", "down", "-O", "Partition:4,Port:.5,Disk:.3"],
                cluster(node(1))) == "p*      0  0\n"


def test_min_plus() -> None:
    assert sinfo.min_plus([]) == "0"
    assert sinfo.min_plus([3]) == "3"
    assert sinfo.min_plus([4, 3, 4]) == "3+"


def test_partition_root_only_and_max_cpus_per_node() -> None:
    nodes, parts = cluster(node(1))
    parts.append(Partition(name="q", nodes=["n1"], root_only=True, max_cpus_per_node=4).to_dict())
    assert show(["-h", "-o", "%R %r %B"], (nodes, parts)) == "p no UNLIMITED\nq yes 4\n"
    assert show(["-h", "-O", "Root,MaxCPUsPerNode:10"], (nodes, parts)).split() == [
        "no", "UNLIMITED", "yes", "4"]


def test_names_22_05_does_not_know(capsys: pytest.CaptureFixture[str]) -> None:
    # -O Reservation came with Slurm 23.02
    assert show(["-h", "-O", "Reservation,Port:5"], cluster(node(1))) == "6818 \n"
    assert capsys.readouterr().err == (
        "sinfo: error: Invalid job format specification: Reservation\n")


def test_clusters_name_the_cluster(monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    nodes, parts = cluster(node(1))
    answers = {"/v1/config": {"cluster_name": "anchor"},
               "/v1/nodes": {"nodes": nodes, "partitions": parts, "now": 0}}
    monkeypatch.setattr(client, "get", lambda path, **kw: answers[path])
    monkeypatch.delenv("SLURM_CLUSTERS", raising=False)
    assert sinfo.main(["-o", "%V %R"]) == 0
    assert capsys.readouterr().out == "CLUSTER PARTITION\nN/A p\n"
    # -M: %V is the cluster; the CLUSTER: line comes only with the header (sinfo.c)
    assert sinfo.main(["-M", "anchor", "-o", "%V %R"]) == 0
    assert capsys.readouterr().out == "CLUSTER: anchor\nCLUSTER PARTITION\nanchor p\n"
    assert sinfo.main(["-M", "all", "-h", "-o", "%V %R"]) == 0
    assert capsys.readouterr().out == "anchor p\n"
