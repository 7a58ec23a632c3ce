"""Typed pending reasons: why a job waits, with the numbers behind it.

The scheduler decides a `PendingReason` (a code plus what the job requested, what is in
use and what is available); the controller renders it with `text()` into the exact reason
squeue and scontrol print (Slurm 22.05 wording), and keeps the typed value for anything that
wants to explain more ("needs 8 GPUs on one node; the most free on any node is 6").
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ReasonCode(StrEnum):
    """Slurm's pending reasons (enum job_state_reason), spelled as squeue prints them."""

    NONE = "None"
    RESOURCES = "Resources"
    PRIORITY = "Priority"
    DEPENDENCY = "Dependency"
    DEPENDENCY_NEVER = "DependencyNeverSatisfied"
    BEGIN_TIME = "BeginTime"
    HELD_USER = "JobHeldUser"
    HELD_ADMIN = "JobHeldAdmin"
    PARTITION_TIME_LIMIT = "PartitionTimeLimit"
    PARTITION_NODE_LIMIT = "PartitionNodeLimit"
    PARTITION_DOWN = "PartitionDown"
    PARTITION_INACTIVE = "PartitionInactive"
    PARTITION_CONFIG = "PartitionConfig"
    REQ_NODE_NOT_AVAIL = "ReqNodeNotAvail"
    NODES_DOWN = ("Nodes required for job are DOWN, DRAINED or reserved for jobs in higher "
                  "priority partitions")
    ARRAY_LIMIT = "JobArrayTaskLimit"
    BAD_CONSTRAINTS = "BadConstraints"
    NODE_FAIL_REQUEUED = "NodeFail"
    # advanced reservations (model/reservation.py): the job's reservation has not started
    # (WAIT_RESERVATION), it is gone, or a maintenance reservation holds the job's nodes
    RESERVATION = "Reservation"
    RESERVATION_DELETED = "ReservationDeleted"
    RESERVED_FOR_MAINT = "ReqNodeNotAvail, Reserved for maintenance"
    # an association or QoS limit (AccountingStorageEnforce=limits): `PendingReason.label`
    # holds Slurm's name of the limit (AssocGrpGRES, QOSMaxJobsPerUserLimit, …, the list
    # is sched.limits_check.all_reason_names())
    LIMIT = "AccountingPolicy"


# (name, amount) pairs: "cpus", "mem" (MB), "gpus", "nodes", "tasks", "seconds", …
Amounts = tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class PendingReason:
    code: ReasonCode
    requested: Amounts = ()  # what the job asks for (per node where it says so)
    used: Amounts = ()  # what is in use that it competes with (e.g. running array tasks)
    available: Amounts = ()  # the most there is (e.g. most free on any node of the partition)
    nodes: tuple[str, ...] = ()  # the nodes concerned (ReqNodeNotAvail)
    per_node: bool = True  # `requested`/`available` are per node
    label: str = ""  # LIMIT: Slurm's reason name of the limit
    note: str = ""  # LIMIT: the limit, its value and its use, for explain()

    def text(self) -> str:
        """The reason exactly as squeue's %r prints it."""
        if self.label:
            return self.label
        if self.code is ReasonCode.REQ_NODE_NOT_AVAIL and self.nodes:
            from corral.model.hostlists import compress

            return f"{self.code.value}, UnavailableNodes:{compress(list(self.nodes))}"
        return self.code.value

    def explain(self) -> str:
        """A sentence for people (dashboards, logs); not Slurm output."""
        req = dict(self.requested)
        avail = dict(self.available)
        used = dict(self.used)
        where = " on one node" if self.per_node else ""
        if self.code is ReasonCode.RESOURCES and req:
            for key in ("gpus", "cpus", "mem"):
                if req.get(key, 0) > avail.get(key, req[key]):
                    unit = " MB of memory" if key == "mem" else f" {key.upper()[:-1]}s"
                    return (f"needs {req[key]}{unit}{where}; the most free on any node is "
                            f"{avail[key]}")
            return "waits for resources held by running jobs"
        if self.code is ReasonCode.ARRAY_LIMIT and used:
            return f"{used.get('tasks', 0)} tasks of the array run; the limit is {req.get('tasks', 0)}"
        if self.code is ReasonCode.PARTITION_TIME_LIMIT and req:
            return (f"asks {req.get('seconds', 0)} s; the partition allows "
                    f"{avail.get('seconds', 0)} s")
        if self.note:
            return self.note
        if self.code is ReasonCode.PARTITION_NODE_LIMIT and req:
            return f"asks {req.get('nodes', 0)} nodes; the partition allows {avail.get('nodes', 0)}"
        return self.text()


def reason(code: ReasonCode, **kw: object) -> PendingReason:
    """Shorthand; plain codes are shared instances (they are compared and stored a lot)."""
    if not kw:
        return _PLAIN[code]
    return PendingReason(code, **kw)  # type: ignore[arg-type]


_PLAIN = {c: PendingReason(c) for c in ReasonCode}

_BY_TEXT = {c.value: c for c in ReasonCode}


def from_text(text: str) -> PendingReason:
    """Parse a stored reason text back (records written before typed reasons)."""
    head, _, rest = text.partition(", UnavailableNodes:")
    code = _BY_TEXT.get(head)
    if code is None:
        if head.startswith(("Assoc", "QOS")) and head.isalnum():  # a limit's reason
            return PendingReason(ReasonCode.LIMIT, label=head)
        return _PLAIN[ReasonCode.NONE]
    if rest:
        from corral.model.hostlists import expand

        return PendingReason(code, nodes=tuple(expand(rest)))
    return _PLAIN[code]
