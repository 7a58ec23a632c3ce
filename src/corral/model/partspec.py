"""`scontrol create|update PartitionName=… KEY=VALUE…`: the partition keys an operator may
set at runtime, parsed into `Partition` field values with scontrol's own messages.

Pure: the command checks its input with it before sending (as scontrol does), and the
controller checks what it receives again."""

from __future__ import annotations

from typing import Any

from corral.model import hostlists
from corral.model.timefmt import TimeFormatError, parse_time_limit


class PartSpecError(ValueError):
    """Bad input: `lines` are the messages scontrol prints, one `error:` line each."""

    def __init__(self, *lines: str) -> None:
        super().__init__("\n".join(lines))
        self.lines = list(lines)


# lower-cased key -> (Partition field, kind of value)
KEYS: dict[str, tuple[str, str]] = {
    "state": ("state", "state"),
    "nodes": ("nodes", "nodes"),
    "default": ("default", "bool"),
    "maxtime": ("max_time", "time"),
    "defaulttime": ("default_time", "time"),
    "maxnodes": ("max_nodes", "count"),
    "minnodes": ("min_nodes", "int"),
    "allowgroups": ("allow_groups", "names"),
    "allowaccounts": ("allow_accounts", "names"),
    "denyaccounts": ("deny_accounts", "names"),
    "allowqos": ("allow_qos", "names"),
    "denyqos": ("deny_qos", "names"),
    "qos": ("qos", "names"),
    "hidden": ("hidden", "bool"),
    "rootonly": ("root_only", "bool"),
    "priority": ("priority_tier", "int"),
    "prioritytier": ("priority_tier", "int"),
    "priorityjobfactor": ("priority_job_factor", "int"),
    "oversubscribe": ("oversubscribe", "oversubscribe"),
    "shared": ("oversubscribe", "oversubscribe"),
    "exclusiveuser": ("exclusive_user", "bool"),
    "maxcpuspernode": ("max_cpus_per_node", "count"),
    "defmempercpu": ("def_mem_per_cpu", "count"),
    "defmempergpu": ("def_mem_per_gpu", "count"),
    "defcpupergpu": ("def_cpu_per_gpu", "count"),
    "maxmempernode": ("max_mem_per_node", "count"),
}
# Keys Slurm has that Corral's partitions do not act on: refused by name rather than
# stored and ignored.
NOT_ACTED_ON = {"maxmempercpu": "MaxMemPerCPU", "defmempernode": "DefMemPerNode",
                "allocnodes": "AllocNodes", "gracetime": "GraceTime", "lln": "LLN",
                "preemptmode": "PreemptMode", "reqresv": "ReqResv",
                "overtimelimit": "OverTimeLimit", "alternate": "Alternate",
                "disablerootjobs": "DisableRootJobs", "tresbillingweights": "TRESBillingWeights"}
STATES = ("UP", "DOWN", "DRAIN", "INACTIVE")
# a key's name as Slurm spells it, for messages
_SPELLING = {"allowqos": "AllowQos", "denyqos": "DenyQos", "rootonly": "RootOnly",
             "exclusiveuser": "ExclusiveUser", "hidden": "Hidden", "default": "Default"}


def parse_fields(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """[(KEY, VALUE)…] (PartitionName excluded) -> {Partition field: value}."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        k = key.lower()
        orig = f"{key}={value}"
        if k in NOT_ACTED_ON:
            raise PartSpecError(f"Corral does not act on {NOT_ACTED_ON[k]}; not changed: {orig}",
                                "Request aborted")
        if k not in KEYS:
            raise PartSpecError(f"Update of this parameter is not supported: {orig}",
                                "Request aborted")
        field, kind = KEYS[k]
        out[field] = _value(kind, k, value, orig)
    return out


def _value(kind: str, key: str, value: str, orig: str) -> Any:
    v = value.strip()
    up = v.upper()
    if kind == "state":
        if up not in STATES:
            raise PartSpecError(f"Invalid input: {orig}",
                                "Acceptable State values are UP, DOWN, DRAIN and INACTIVE")
        return up
    if kind == "bool":
        if up not in ("YES", "NO"):
            name = _SPELLING.get(key, key)
            raise PartSpecError(f"Invalid input: {orig}",
                                f"Acceptable {name} values are YES and NO")
        return up == "YES"
    if kind == "nodes":
        if not v:
            return []
        if up == "ALL":
            return "ALL"
        try:
            return hostlists.expand(v)
        except hostlists.HostlistError:
            raise PartSpecError(f"Invalid input: {orig}") from None
    if kind == "time":
        if key == "defaulttime" and up == "NONE":  # as `scontrol show partition` prints it
            return None
        try:
            limit = parse_time_limit(v)
        except TimeFormatError:
            raise PartSpecError(f"Invalid input {orig}") from None
        if key == "defaulttime" and limit < 0:
            return None
        return limit
    if kind == "count":
        if up in ("UNLIMITED", "INFINITE", ""):
            return None
        if not v.isdigit():
            raise PartSpecError(f"Invalid input: {orig}")
        return int(v)
    if kind == "int":
        if not v.isdigit() or int(v) > 65533:
            raise PartSpecError(f"Invalid input: {orig}")
        return int(v)
    if kind == "oversubscribe":
        head, _, count = up.partition(":")
        if head not in ("NO", "YES", "EXCLUSIVE", "FORCE") or (count and not count.isdigit()):
            raise PartSpecError(f"Invalid input: {orig}",
                                "Acceptable OverSubscribe values are NO, EXCLUSIVE, YES, "
                                "YES:#, FORCE and FORCE:#")
        return up
    # names: a comma list, ALL for none
    return v
