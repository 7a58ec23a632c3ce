"""Health checks' timing after `scontrol reconfigure` (controller/health.py): the next check
is due by the interval in force, so a shorter interval applies at once, and a program
dropped from the file stops the checks."""

from __future__ import annotations

from corral.controller.health import HealthChecks
from corral.model.config import parse_config
from corral.model.node import Node

NODES = """\
NodeName=node-[1-2] CPUs=4 RealMemory=4000
PartitionName=debug Nodes=node-[1-2] Default=YES State=UP
"""


def checks_of(text: str) -> tuple[HealthChecks, dict[str, Node]]:
    config = parse_config(text + NODES)
    return HealthChecks(config), {n.name: n for n in config.nodes}


def test_a_shorter_interval_applies_at_once() -> None:
    checks, nodes = checks_of("HealthCheckProgram=/bin/true\nHealthCheckInterval=3600\n")
    assert checks.due(nodes, 1000.0) == ["node-1", "node-2"]
    assert checks.due(nodes, 1010.0) == []
    checks.reload(parse_config("HealthCheckProgram=/bin/true\nHealthCheckInterval=5\n" + NODES))
    assert checks.due(nodes, 1010.0) == ["node-1", "node-2"]  # 10 s after the last: due
    assert checks.due(nodes, 1012.0) == []
    assert checks.due(nodes, 1015.0) == ["node-1", "node-2"]


def test_cycle_spreads_the_nodes_over_the_new_interval() -> None:
    checks, nodes = checks_of("HealthCheckProgram=/bin/true\nHealthCheckInterval=3600\n"
                              "HealthCheckNodeState=ANY,CYCLE\n")
    assert checks.due(nodes, 1000.0) == ["node-1"]
    assert checks.due(nodes, 1010.0) == []  # the next node in 1800 s
    checks.reload(parse_config("HealthCheckProgram=/bin/true\nHealthCheckInterval=10\n"
                               "HealthCheckNodeState=ANY,CYCLE\n" + NODES))
    assert checks.due(nodes, 1005.0) == ["node-2"]  # one node every 5 s now
    assert checks.due(nodes, 1008.0) == []
    assert checks.due(nodes, 1010.0) == ["node-1"]


def test_a_dropped_program_stops_the_checks() -> None:
    checks, nodes = checks_of("HealthCheckProgram=/bin/true\nHealthCheckInterval=5\n")
    assert checks.due(nodes, 1000.0) == ["node-1", "node-2"]
    checks.reload(parse_config(NODES))
    assert checks.due(nodes, 2000.0) == []
