"""The idle-GPU reclaim policy (slurm.conf keys) and the pure idle-since decision."""

from __future__ import annotations

import pytest

from corral.model.config import ConfigError, parse_config
from corral.model.reclaim import (
    ACT,
    NOTICE,
    IdleTracker,
    ReclaimPolicy,
    ReclaimPolicyError,
    gpu_idle,
    parse_duration,
    parse_policy,
)

POLICY = ReclaimPolicy(notice=60, after=30, batch_after=120, action="requeue")


def test_off_by_default_and_when_said() -> None:
    assert parse_policy({}) is None
    assert parse_policy({"CorralIdleGpuReclaim": "off"}) is None


def test_policy_keys_and_defaults() -> None:
    p = parse_policy({"CorralIdleGpuReclaim": "notice=30min,after=15min,action=cancel",
                      "CorralIdleGpuReclaimPartitions": "debug:none, short:requeue",
                      "CorralIdleGpuReclaimQOS": "long:none"})
    assert p is not None
    assert (p.notice, p.after, p.batch_after, p.action) == (1800, 900, 1800, "cancel")
    assert p.action_for("debug", "normal") == "none"
    assert p.action_for("short", "normal") == "requeue"
    assert p.action_for("short", "long") == "none"  # the QOS's override wins
    assert p.action_for("gpu", "normal") == "cancel"
    assert p.grace(interactive=True) == 900 and p.grace(interactive=False) == 1800
    q = parse_policy({"CorralIdleGpuReclaim": "notice=10"})
    assert q is not None and (q.notice, q.after, q.action) == (600, 900, "requeue")


@pytest.mark.parametrize("text,seconds", [("45s", 45), ("2h", 7200), ("3", 180),
                                          ("30min", 1800), ("5m", 300)])
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("options", [
    {"CorralIdleGpuReclaim": "after=5min"},  # notice= missing
    {"CorralIdleGpuReclaim": "notice=5min,action=kill"},
    {"CorralIdleGpuReclaim": "notice=soon"},
    {"CorralIdleGpuReclaim": "notice=0"},
    {"CorralIdleGpuReclaim": "notice=5min,colour=red"},
    {"CorralIdleGpuReclaim": "notice=5min", "CorralIdleGpuReclaimPartitions": "debug"},
    {"CorralIdleGpuReclaim": "notice=5min", "CorralIdleGpuReclaimQOS": "long:maybe"},
])
def test_bad_policies_are_refused(options: dict[str, str]) -> None:
    with pytest.raises(ReclaimPolicyError):
        parse_policy(options)


def test_slurm_conf_refuses_a_bad_policy_with_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="action 'kill' is not one of none, requeue, cancel"):
        parse_config("CorralIdleGpuReclaim=notice=5min,action=kill\n")
    cfg = parse_config("CorralIdleGpuReclaim=notice=5min\n")
    assert cfg.unknown == [] and cfg.options["CorralIdleGpuReclaim"] == "notice=5min"


def test_idle_means_no_utilisation_and_no_process() -> None:
    assert gpu_idle(0.0, 0)
    assert not gpu_idle(0.0, 1)  # a process holds it (loading data, say)
    assert not gpu_idle(30.0, 0)


def test_notice_then_action_after_the_grace() -> None:
    t = IdleTracker()
    t.observe(1, "n1", True, 100.0)
    assert t.decide(1, ["n1"], 159.0, POLICY, interactive=False) is None
    assert t.decide(1, ["n1"], 160.0, POLICY, interactive=False) == NOTICE
    t.mark_noticed(1, 160.0)
    t.observe(1, "n1", True, 170.0)  # still idle: idle-since stays at 100
    assert t.idle_since(1, ["n1"]) == 100.0
    assert t.decide(1, ["n1"], 279.0, POLICY, interactive=False) is None
    assert t.decide(1, ["n1"], 280.0, POLICY, interactive=False) == ACT
    # an interactive allocation goes first: its grace is shorter
    assert t.decide(1, ["n1"], 190.0, POLICY, interactive=True) == ACT


def test_a_busy_sample_resets_the_spell_and_the_notice() -> None:
    t = IdleTracker()
    t.observe(1, "n1", True, 100.0)
    t.mark_noticed(1, 160.0)
    t.observe(1, "n1", False, 200.0)
    assert t.idle_since(1, ["n1"]) is None and 1 not in t.noticed
    assert t.decide(1, ["n1"], 1000.0, POLICY, interactive=True) is None
    t.observe(1, "n1", True, 300.0)  # idle again: noticed anew, from 300
    assert t.decide(1, ["n1"], 359.0, POLICY, interactive=True) is None
    assert t.decide(1, ["n1"], 360.0, POLICY, interactive=True) == NOTICE


def test_every_node_of_the_job_must_be_idle() -> None:
    t = IdleTracker()
    t.observe(1, "n1", True, 100.0)
    assert t.idle_since(1, ["n1", "n2"]) is None  # n2 not seen yet
    t.observe(1, "n2", False, 100.0)
    assert t.decide(1, ["n1", "n2"], 1000.0, POLICY, interactive=False) is None
    t.observe(1, "n2", True, 150.0)
    assert t.idle_since(1, ["n1", "n2"]) == 150.0  # idle since the last one went idle


def test_action_none_leaves_the_job_alone_until_used_again() -> None:
    t = IdleTracker()
    t.observe(1, "n1", True, 0.0)
    t.mark_noticed(1, 60.0)
    t.mark_left(1)
    assert t.decide(1, ["n1"], 10_000.0, POLICY, interactive=True) is None
    t.forget(1)
    assert t.tracked() == []
