"""Nodes and partitions: configuration, allocation and the states sinfo shows."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(slots=True)
class Node:
    name: str
    cpus: int
    real_memory: int  # MB
    gpus: int = 0
    gpu_type: str | None = None
    sockets: int = 1
    cores_per_socket: int = 1
    threads_per_core: int = 1
    weight: int = 1
    tmp_disk: int = 0  # MB of TmpFS (TmpDisk=): what --tmp may ask of this node
    features: list[str] = field(default_factory=list)
    partitions: list[str] = field(default_factory=list)
    addr: str = ""
    hostname: str = ""
    arch: str = ""
    os: str = ""
    comment: str = ""  # `scontrol update NodeName=… Comment=`

    # state
    admin_state: str = "up"  # "up", "drain", "down"
    responding: bool = False  # an agent has registered and is heartbeating
    registered: bool = False  # ever registered since the controller started
    reason: str | None = None
    reason_user: str | None = None
    reason_uid: int | None = None
    reason_time: float | None = None
    boot_time: float | None = None
    agent_start_time: float | None = None
    last_busy: float | None = None
    last_contact: float | None = None  # last message from its agent
    cpu_load: float = 0.0
    free_mem: int | None = None

    # allocation (derived from running jobs; kept incrementally)
    alloc_cpus: int = 0
    alloc_mem: int = 0
    alloc_gpus: list[int] = field(default_factory=list)
    job_count: int = 0
    exclusive_job: int | None = None
    used_cpu_ids: list[int] = field(default_factory=list)  # the ledger's CPU indices held


    @property
    def free_cpus(self) -> int:
        return self.cpus - self.alloc_cpus

    @property
    def free_mem_mb(self) -> int:
        return self.real_memory - self.alloc_mem

    @property
    def free_gpu_ids(self) -> list[int]:
        used = set(self.alloc_gpus)
        return [i for i in range(self.gpus) if i not in used]

    @property
    def usable(self) -> bool:
        """May be given new jobs."""
        return self.admin_state == "up" and self.responding

    def state_name(self) -> str:
        """Slurm's long node state: IDLE, MIXED, ALLOCATED, DOWN*, IDLE+DRAIN, …"""
        return node_state_long(self)

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "used_cpu_ids"}
        d["alloc_gpus"] = list(self.alloc_gpus)
        d["state"] = node_state_long(self)
        d["state_short"] = node_state_short(self)
        return d


def _base_state(n: Node) -> str:
    if n.alloc_cpus == 0 and n.job_count == 0:
        return "IDLE"
    if n.alloc_cpus >= n.cpus or n.exclusive_job is not None:
        return "ALLOCATED"
    return "MIXED"


def node_state_long(n: Node) -> str:
    """As scontrol shows State=…"""
    if n.admin_state == "down" or (not n.registered and not n.responding):
        s = "DOWN"
    else:
        s = _base_state(n)
    if n.admin_state == "drain":
        s += "+DRAIN"
    if not n.responding:
        s += "*"
    return s


def node_state_short(n: Node) -> str:
    """As sinfo prints %t: idle, mix, alloc, drain, drng, down, with * for not responding."""
    if n.admin_state == "down" or (not n.registered and not n.responding):
        s = "down"
    elif n.admin_state == "drain":
        s = "drng" if n.job_count else "drain"
    else:
        s = {"IDLE": "idle", "MIXED": "mix", "ALLOCATED": "alloc"}[_base_state(n)]
    if not n.responding:
        s += "*"
    return s


def node_state_sinfo_long(n: Node) -> str:
    """As sinfo prints %T: idle, mixed, allocated, drained, draining, down, with *."""
    short = node_state_short(n)
    star = short.endswith("*")
    base = short.rstrip("*")
    long = {"idle": "idle", "mix": "mixed", "alloc": "allocated", "drain": "drained",
            "drng": "draining", "down": "down"}[base]
    return long + ("*" if star else "")


@dataclass(slots=True)
class Partition:
    name: str
    nodes: list[str] = field(default_factory=list)
    default: bool = False
    max_time: int = -1  # seconds; -1 = infinite
    default_time: int | None = None
    max_nodes: int | None = None
    min_nodes: int = 0
    state: str = "UP"  # UP, DOWN, DRAIN, INACTIVE
    priority_tier: int = 1
    priority_job_factor: int = 1
    oversubscribe: str = "NO"
    def_mem_per_cpu: int | None = None
    def_mem_per_gpu: int | None = None  # MB per allocated GPU for jobs without --mem
    def_cpu_per_gpu: int | None = None  # CPUs per GPU for jobs that name no CPU count
    max_mem_per_node: int | None = None
    max_cpus_per_node: int | None = None
    qos: str = ""  # QOS=: the partition QoS, whose limits apply to every job here
    allow_accounts: str = "ALL"
    allow_groups: str = "ALL"
    deny_accounts: str = ""
    allow_qos: str = "ALL"
    deny_qos: str = ""
    root_only: bool = False
    hidden: bool = False
    exclusive_user: bool = False
    preempt_mode: str = ""  # PreemptMode= (lower case); "" = the cluster's

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def name_list(text: str) -> set[str] | None:
    """AllowGroups=a,b → {"a", "b"}; None for ALL (or empty: no restriction)."""
    names = {x.strip() for x in text.split(",") if x.strip()}
    if not names or "ALL" in {n.upper() for n in names}:
        return None
    return names


def partition_access(part: Partition, *, uid: int, groups: set[str], account: str, qos: str,
                     super_user: bool) -> str | None:
    """Why `part` refuses a job (slurmctld's _part_access_check and part_policy_valid_*),
    as the name of the Slurm errno: ESLURM_ACCESS_DENIED (RootOnly),
    ESLURM_JOB_MISSING_REQUIRED_PARTITION_GROUP (AllowGroups), ESLURM_INVALID_ACCOUNT
    (AllowAccounts/DenyAccounts), ESLURM_INVALID_QOS (AllowQos/DenyQos); None if allowed.
    `super_user`: root or SlurmUser, which RootOnly and AllowGroups let through."""
    if part.root_only and not super_user:
        return "ESLURM_ACCESS_DENIED"
    allowed = name_list(part.allow_groups)
    if allowed is not None and not super_user and not (allowed & groups):
        return "ESLURM_JOB_MISSING_REQUIRED_PARTITION_GROUP"
    accounts = name_list(part.allow_accounts)
    if accounts is not None and account.lower() not in {a.lower() for a in accounts}:
        return "ESLURM_INVALID_ACCOUNT"
    if account.lower() in {a.lower() for a in name_list(part.deny_accounts or "ALL") or ()}:
        return "ESLURM_INVALID_ACCOUNT"
    qoses = name_list(part.allow_qos)
    if qoses is not None and qos.lower() not in {q.lower() for q in qoses}:
        return "ESLURM_INVALID_QOS"
    if qos.lower() in {q.lower() for q in name_list(part.deny_qos or "ALL") or ()}:
        return "ESLURM_INVALID_QOS"
    return None
