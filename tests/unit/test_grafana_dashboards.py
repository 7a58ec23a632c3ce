"""The Grafana dashboards shipped in docs/grafana name only metrics the controller serves."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from corral.controller.harness import Harness
from corral.controller.metrics import Metrics
from corral.controller.usage import UsageBook

DASHBOARDS = Path(__file__).resolve().parents[2] / "docs" / "grafana"
CONF = """\
ClusterName=t
NodeName=n[1-2] CPUs=4 RealMemory=4000 Gres=gpu:2
PartitionName=debug Nodes=n[1-2] Default=YES
"""
PROMQL_FUNCTIONS = {"sum", "rate", "increase", "avg", "max", "min", "count", "topk",
                    "sum_over_time", "avg_over_time", "max_over_time", "irate", "clamp_min"}
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
                "unless", "bool", "offset"}
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def served_names() -> set[str]:
    with Harness(CONF) as h:
        m = Metrics(h.ctl, UsageBook(h.ctl))
        text = m.render().decode()
    return {ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE ")}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (functions, keywords and labels removed)."""
    bare = re.sub(r'"[^"]*"', "", expr)
    bare = re.sub(r"\[[^\]]*\]|\{[^}]*\}", "", bare)  # ranges and label matchers
    bare = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", bare)
    names = set()
    for m in _IDENT.finditer(bare):
        word = m.group(0)
        if bare[m.end():].lstrip().startswith("("):
            assert word in PROMQL_FUNCTIONS, f"unknown PromQL function {word} in {expr!r}"
        elif word not in PROMQL_WORDS:
            names.add(word)
    return names


def _targets(d: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in d["panels"] for t in p.get("targets", [])]


def test_the_four_dashboards_are_there() -> None:
    assert sorted(p.name for p in DASHBOARDS.glob("*.json")) == [
        "cluster.json", "gpus.json", "scheduler.json", "users.json"]


@pytest.mark.parametrize("name", ["cluster", "gpus", "users", "scheduler"])
def test_every_expression_names_a_served_metric(name: str) -> None:
    served = served_names()
    d = json.loads((DASHBOARDS / f"{name}.json").read_text())
    exprs = _targets(d)
    assert exprs and d["uid"] == f"corral-{name}"
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    for expr in exprs:
        names = metric_names(expr)
        assert names, f"{expr!r} reads no metric"
        assert names <= served, f"{expr!r} names {sorted(names - served)}, not served"


def test_the_check_catches_a_wrong_name() -> None:
    served = served_names()
    assert metric_names("sum by (username) (rate(corral_gpu_reclaims_total[1h]))") == {
        "corral_gpu_reclaims_total"}
    assert not metric_names("slurm_node_gpus_allocated") <= served
    assert metric_names('slurm_nodes{node="x"} / on(node) up') == {"slurm_nodes", "up"}
