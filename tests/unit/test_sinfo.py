"""sinfo output against real Slurm 22.05 captures (shared/slurm-reference)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from corral.cli import client, sinfo
from corral.model.node import Node, Partition
from tests.unit import reference

DRAIN_TIME = time.mktime((2026, 11, 23, 1, 10, 49, 0, 0, -1))  # local time, TZ set below


def ref(name: str) -> str:
    return reference.capture(name)


pytestmark = pytest.mark.usefixtures("utc_tz")  # (tests/unit/conftest.py)


def node(i: int, **kw: Any) -> Node:
    kw.setdefault("responding", True)
    kw.setdefault("registered", True)
    return Node(name=f"node-{i}", cpus=64, real_memory=200000, gpus=8, sockets=2,
                cores_per_socket=32, threads_per_core=1, partitions=["debug"],
                hostname="localhost", addr="127.0.0.1", **kw)


def debug(**kw: Any) -> Partition:
    return Partition(name="debug", nodes=[f"node-{i}" for i in range(1, 5)], default=True, **kw)


def idle_cluster() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return [node(i).to_dict() for i in range(1, 5)], [debug().to_dict()]


def busy_cluster() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The C* scenario: node-1 and node-2 run jobs, node-4 drained for maintenance."""
    drain_time = time.mktime((2026, 11, 23, 1, 10, 49, 0, 0, -1))
    nodes = [
        node(1, alloc_cpus=7, alloc_mem=8192, alloc_gpus=[0, 1], job_count=3, cpu_load=6.84,
             free_mem=23683),
        node(2, alloc_cpus=4, alloc_mem=4096, alloc_gpus=[0, 1], job_count=1, cpu_load=6.84,
             free_mem=23682),
        node(3, cpu_load=6.84, free_mem=23681),
        node(4, admin_state="drain", reason="maintenance test", reason_user="root",
             reason_uid=0, reason_time=drain_time, cpu_load=6.84, free_mem=23680),
    ]
    return [n.to_dict() for n in nodes], [debug().to_dict()]


def show(argv: list[str], cluster: tuple[list[dict[str, Any]], list[dict[str, Any]]],
         now: float = 0.0) -> str:
    opts = sinfo.parse_args(argv)
    assert not isinstance(opts, int)
    nodes, parts = cluster
    sinfo.prepare(opts, nodes, parts)
    return sinfo.format_sinfo(nodes, parts, now, opts)


def at(hh: int, mm: int, ss: int) -> float:
    return time.mktime((2026, 11, 23, hh, mm, ss, 0, 0, -1))


# ---- captures --------------------------------------------------------------

def test_a01_to_a04_idle_cluster() -> None:
    assert show([], idle_cluster()) == ref("A01_sinfo_idle.txt")
    assert show(["-Nl"], idle_cluster(), at(1, 10, 49)) == ref("A02_sinfo_Nl_idle.txt")
    assert show(["-s"], idle_cluster()) == ref("A03_sinfo_s_idle.txt")
    assert show(["-R"], idle_cluster()) == ref("A04_sinfo_R_idle.txt")


def test_c01_c27_states_grouped() -> None:
    assert show([], busy_cluster()) == ref("C01_sinfo.txt")
    assert show([], busy_cluster()) == ref("C27_sinfo_after_backfill.txt")


def test_c02_node_long() -> None:
    assert show(["-N", "-l"], busy_cluster(), at(1, 10, 55)) == ref("C02_sinfo_Nl.txt")


def test_c03_summary() -> None:
    assert show(["-s"], busy_cluster()) == ref("C03_sinfo_s.txt")


def test_c04_reasons() -> None:
    assert show(["-R"], busy_cluster()) == ref("C04_sinfo_R.txt")


def test_c05_node_oriented() -> None:
    assert show(["-N"], busy_cluster()) == ref("C05_sinfo_N.txt")


def test_c24_custom_format() -> None:
    out = show(["-h", "-N", "-o", "%N %P %t %c %m %G %O %e"], busy_cluster())
    assert out == ref("C24_sinfo_o_fmt.txt")


def test_d20_unknown_partition() -> None:
    assert show(["-p", "nosuch"], busy_cluster()) == ref("D20_sinfo_unknown_partition.txt")


def test_e10_final() -> None:
    assert show([], idle_cluster()) == ref("E10_sinfo_final.txt")


# ---- behaviour measured on Slurm 22.05 beyond the captures ------------------

def two_partitions() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes, parts = busy_cluster()
    long = Partition(name="verylongpartitionname", nodes=["node-[2-3]"], max_time=93780)
    gp = Partition(name="gp", nodes=["node-1"], max_time=5400, state="DOWN")
    return nodes, parts + [long.to_dict(), gp.to_dict()]


def test_partition_column_grows_with_the_longest_name() -> None:
    nodes, parts = two_partitions()
    nodes[1] = node(2, cpu_load=6.84, free_mem=23682).to_dict()  # node-2 idle here
    assert show([], (nodes, parts)) == (
        "PARTITION             AVAIL  TIMELIMIT  NODES  STATE NODELIST\n"
        "debug*                   up   infinite      1  drain node-4\n"
        "debug*                   up   infinite      1    mix node-1\n"
        "debug*                   up   infinite      2   idle node-[2-3]\n"
        "verylongpartitionname    up 1-02:03:00      2   idle node-[2-3]\n"
        "gp                     down    1:30:00      1    mix node-1\n")
    assert show(["-t", "idle"], (nodes, parts)).splitlines()[-1] == (
        "gp                     down    1:30:00      0    n/a ")
    # Without a per-node field each partition is one line.
    assert show(["-h", "-o", "%10P|%.10P|%5P|%R"], (nodes, parts)).splitlines() == [
        "debug*    |    debug*|debu*|debug", "verylongpa|verylongpa|veryl|verylongpartitionname",
        "gp        |        gp|gp   |gp"]


def test_letters() -> None:
    out = show(["-h", "-p", "debug", "-o", "%a|%A|%C|%F|%E|%H|%u|%U|%l|%L|%s|%z|%g|%h|%r"],
               busy_cluster())
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(DRAIN_TIME))
    assert out.splitlines() == [
        f"up|0/0|0/0/64/64|0/0/1/1|maintenance test|{stamp}|root|root(0)|infinite|n/a|"
        "1-infinite|2:32:1|all|NO|no",
        # State is not printed, so mixed and idle nodes share a line.
        "up|2/1|11/181/0/192|2/1/0/3|none|Unknown|Unknown|Unknown|infinite|n/a|1-infinite|"
        "2:32:1|all|NO|no",
    ]


def test_invalid_letter(capsys: pytest.CaptureFixture[str]) -> None:
    out = show(["-h", "-o", "%P %k"], idle_cluster())
    assert out == "debug* %k\n"
    assert capsys.readouterr().err == "Invalid node format specification: k\n"


def test_long_format_spec() -> None:
    out = show(["-O", "partition,nodes:.4,statelong,nodelist"], busy_cluster())
    assert out.splitlines()[:2] == [
        "PARTITION           NODESTATE               NODELIST            ",
        "debug*                 1drained             node-4              "]


def test_state_and_node_filters() -> None:
    assert show(["-h", "-t", "mix"], busy_cluster()) == (
        "debug*       up   infinite      2    mix node-[1-2]\n")
    assert show(["-h", "-n", "node-[3-4]"], busy_cluster()) == (
        "debug*       up   infinite      1  drain node-4\n"
        "debug*       up   infinite      1   idle node-3\n")


def test_not_responding_node() -> None:
    nodes = [node(1, responding=False).to_dict(), node(2).to_dict()]
    part = Partition(name="debug", nodes=["node-[1-2]"], default=True).to_dict()
    assert show(["-h"], (nodes, [part])) == (
        "debug*       up   infinite      1  idle* node-1\n"
        "debug*       up   infinite      1   idle node-2\n")


# ---- errors ------------------------------------------------------------------

def test_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert sinfo.main(["--x"]) == 1
    assert capsys.readouterr().err == ("sinfo: unrecognized option '--x'\n"
                                       "Try \"sinfo --help\" for more information\n")
    assert sinfo.main(["-t", "bogus"]) == 1
    assert capsys.readouterr().err.startswith('sinfo: error: Bad state string: "bogus"\n')


def test_help_and_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert sinfo.main(["--usage"]) == 0
    assert capsys.readouterr().out.startswith(
        "Usage: sinfo [-abdelNRrsTv] [-i seconds] [-t states] [-p partition] [-n nodes]")
    assert sinfo.main(["--help"]) == 0
    assert "-N, --Node" in capsys.readouterr().out


def test_main_prints_what_the_controller_answers(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    nodes, parts = idle_cluster()
    monkeypatch.setattr(client, "get",
                        lambda path, **kw: {"nodes": nodes, "partitions": parts, "now": 0})
    assert sinfo.main([]) == 0
    assert capsys.readouterr().out == ref("A01_sinfo_idle.txt")


def test_no_controller(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path))
    assert sinfo.main([]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("sinfo: error: no Corral controller is running")
    assert captured.err.count("\n") == 1


# ---- -O names: right, or refused -------------------------------------------------------


def _fields(spec: str, nodes: list[dict[str, Any]], parts: list[dict[str, Any]]) -> str:
    opts = sinfo.parse_args(["-h", "-O", spec])
    assert not isinstance(opts, int)
    sinfo.prepare(opts, nodes, parts)
    return sinfo.format_sinfo(nodes, parts, 0.0, opts)


def test_gres_used_and_friends() -> None:
    nodes = [{"name": "n1", "state_short": "mix", "state": "MIXED", "gpus": 4,
              "alloc_gpus": [0, 1, 3], "alloc_mem": 2048, "cpus": 8, "alloc_cpus": 2,
              "features": ["a100", "ib"], "registered": True},
             {"name": "n2", "state_short": "idle", "state": "IDLE", "gpus": 4,
              "gpu_type": "a100", "cpus": 8, "features": [], "registered": True}]
    parts = [{"name": "p", "nodes": ["n1", "n2"]}]
    out = _fields("NodeList:5,GresUsed:25,Gres:12,AllocMem:6,CPUsState:10,StateLong:8,"
                  "Features:8,StateComplete:8,Version", nodes, parts)
    assert out.splitlines() == [
        "n1   gpu:3(IDX:0-1,3)         gpu:4       2048  2/6/0/8   mixed   a100,ib mixed   "
        "22.05.8             ",
        "n2   gpu:a100:0(IDX:N/A)      gpu:a100:4  0     0/8/0/8   idle    (null)  idle    "
        "22.05.8             "]


def test_long_field_refusals(capsys: pytest.CaptureFixture[str]) -> None:
    opts = sinfo.parse_args(["-O", "GresUsed,Bogus"])
    assert not isinstance(opts, int)
    # Slurm's -O wording says "job" (sinfo/opts.c); GresUsed itself is no longer refused.
    assert capsys.readouterr().err == "sinfo: error: Invalid job format specification: Bogus\n"


def test_hidden_partitions_need_all() -> None:
    nodes = [{"name": "n1", "state_short": "idle", "cpus": 1}]
    parts = [{"name": "open", "nodes": ["n1"]}, {"name": "secret", "nodes": ["n1"],
                                                 "hidden": True}]
    for argv, names in ((["-h", "-o", "%R"], ["open"]), (["-a", "-h", "-o", "%R"],
                                                        ["open", "secret"])):
        opts = sinfo.parse_args(argv)
        assert not isinstance(opts, int)
        sinfo.prepare(opts, nodes, parts)
        assert sinfo.format_sinfo(nodes, parts, 0.0, opts).split() == names


def test_version_letter() -> None:
    nodes = [{"name": "n1", "state_short": "idle", "registered": True},
             {"name": "n2", "state_short": "down*", "registered": False}]
    parts = [{"name": "p", "nodes": ["n1", "n2"]}]
    opts = sinfo.parse_args(["-h", "-N", "-o", "%N %v"])
    assert not isinstance(opts, int)
    sinfo.prepare(opts, nodes, parts)
    assert sinfo.format_sinfo(nodes, parts, 0.0, opts) == "n1 22.05.8\nn2 N/A\n"
