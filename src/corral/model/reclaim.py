"""Idle-GPU reclaim: the policy (slurm.conf keys) and the pure idle-since decision.

    CorralIdleGpuReclaim=notice=30min,after=15min,batch_after=30min,action=requeue
    CorralIdleGpuReclaimPartitions=debug:none,short:cancel
    CorralIdleGpuReclaimQOS=long:none

A job whose every allocated GPU shows no utilisation and no process for `notice` gets a
notice; `after` more (`batch_after` for a batch job: interactive allocations go first) the
action of its QOS, else of its partition, else `action`.  Off unless the first key is set.
The controller side (samples, notices, the kill or requeue) is controller/reclaim.py."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

KEY = "CorralIdleGpuReclaim"
PARTITIONS_KEY = "CorralIdleGpuReclaimPartitions"
QOS_KEY = "CorralIdleGpuReclaimQOS"
KEYS = (KEY, PARTITIONS_KEY, QOS_KEY)
ACTIONS = ("none", "requeue", "cancel")
IDLE_GPU_UTIL = 1.0  # percent: a GPU below this, with no process, is idle

_DURATION = re.compile(r"(\d+)\s*(s|sec|secs|m|min|mins|h|hr|hrs|hour|hours)?", re.IGNORECASE)
_UNIT = {"s": 1, "sec": 1, "secs": 1, "m": 60, "min": 60, "mins": 60,
         "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600}


class ReclaimPolicyError(ValueError):
    pass


def parse_duration(text: str) -> int:
    """`30min`, `2h`, `45s`; a bare number is minutes (as Slurm's time options)."""
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        raise ReclaimPolicyError(f"bad duration {text!r} (examples: 30min, 2h, 45s)")
    return int(m.group(1)) * _UNIT[(m.group(2) or "min").lower()]


def _action(text: str, where: str) -> str:
    a = text.strip().lower()
    if a not in ACTIONS:
        raise ReclaimPolicyError(f"{where}: action {text!r} is not one of {', '.join(ACTIONS)}")
    return a


def _overrides(text: str, key: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in filter(None, (i.strip() for i in text.split(","))):
        name, sep, act = item.partition(":")
        if not sep or not name.strip():
            raise ReclaimPolicyError(f"{key}: expected NAME:ACTION, got {item!r}")
        out[name.strip()] = _action(act, key)
    return out


@dataclass(frozen=True, slots=True)
class ReclaimPolicy:
    notice: int  # seconds all of a job's GPUs stay idle before its owner is noticed
    after: int  # seconds from the notice to the action, interactive allocations
    batch_after: int  # the same for batch jobs
    action: str = "requeue"
    partitions: dict[str, str] = field(default_factory=dict)
    qos: dict[str, str] = field(default_factory=dict)

    def action_for(self, partition: str, qos: str) -> str:
        """The QOS's override wins, then the partition's, then the default."""
        return self.qos.get(qos) or self.partitions.get(partition) or self.action

    def grace(self, interactive: bool) -> int:
        return self.after if interactive else self.batch_after


def parse_policy(options: dict[str, str]) -> ReclaimPolicy | None:
    """The policy the configuration sets, or None when reclaim is off."""
    raw = options.get(KEY, "").strip()
    if not raw or raw.lower() in ("off", "no", "none"):
        return None
    parts: dict[str, str] = {}
    for item in filter(None, (i.strip() for i in raw.split(","))):
        k, sep, v = item.partition("=")
        k = k.strip().lower()
        if not sep or k not in ("notice", "after", "batch_after", "action"):
            raise ReclaimPolicyError(f"{KEY}: unknown or malformed option {item!r} "
                                     "(notice=, after=, batch_after=, action=)")
        parts[k] = v.strip()
    if "notice" not in parts:
        raise ReclaimPolicyError(f"{KEY}: notice= is required")
    notice = parse_duration(parts["notice"])
    after = parse_duration(parts.get("after", "15min"))
    batch_after = parse_duration(parts["batch_after"]) if "batch_after" in parts else 2 * after
    if notice <= 0:
        raise ReclaimPolicyError(f"{KEY}: notice must be above 0")
    return ReclaimPolicy(notice, after, batch_after,
                         _action(parts.get("action", "requeue"), KEY),
                         _overrides(options.get(PARTITIONS_KEY, ""), PARTITIONS_KEY),
                         _overrides(options.get(QOS_KEY, ""), QOS_KEY))


def gpu_idle(util: float, processes: int) -> bool:
    return util < IDLE_GPU_UTIL and processes == 0


NOTICE = "notice"
ACT = "act"


class IdleTracker:
    """Per job and node, since when the job's GPUs there have all been idle; per job, when
    its owner was noticed.  A busy sample (or a node without samples) resets both."""

    def __init__(self) -> None:
        self.since: dict[int, dict[str, float | None]] = {}
        self.noticed: dict[int, float] = {}

    def observe(self, job_id: int, node: str, idle: bool, now: float) -> None:
        per = self.since.setdefault(job_id, {})
        if not idle:
            per[node] = None
            self.noticed.pop(job_id, None)  # used again: a later idle spell is noticed anew
        elif per.get(node) is None:
            per[node] = now

    def idle_since(self, job_id: int, nodes: list[str]) -> float | None:
        """When every node of the job had gone idle (None: some node is busy or unseen)."""
        per = self.since.get(job_id)
        if not per or not nodes:
            return None
        seen = [per.get(n) for n in nodes]
        if any(s is None for s in seen):
            return None
        return max(s for s in seen if s is not None)

    def decide(self, job_id: int, nodes: list[str], now: float, policy: ReclaimPolicy,
               interactive: bool) -> str | None:
        """NOTICE, ACT or None for one job at `now`."""
        since = self.idle_since(job_id, nodes)
        if since is None:
            return None
        noticed = self.noticed.get(job_id)
        if noticed is None:
            return NOTICE if now - since >= policy.notice else None
        return ACT if now - noticed >= policy.grace(interactive) else None

    def mark_noticed(self, job_id: int, now: float) -> None:
        self.noticed[job_id] = now

    def mark_left(self, job_id: int) -> None:
        """The action is `none`: never act on this idle spell (a busy sample resets it)."""
        self.noticed[job_id] = float("inf")

    def forget(self, job_id: int) -> None:
        self.since.pop(job_id, None)
        self.noticed.pop(job_id, None)

    def tracked(self) -> list[int]:
        return list(self.since)
