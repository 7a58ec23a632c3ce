"""The cluster configuration, read from slurm.conf syntax.

Keys Corral uses are parsed into `ClusterConfig`; any other key is kept in
`unknown` so the controller can report it once instead of failing.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from corral.model import hostlists, reclaim
from corral.model.mpi import MpiTypeError, parse_mpi_type
from corral.model.node import Node, Partition
from corral.model.timefmt import TimeFormatError, parse_time_limit


class ConfigError(ValueError):
    pass


# Global keys Corral reads; the value is the default.
GLOBAL_DEFAULTS: dict[str, str] = {
    "ClusterName": "corral",
    "KillWait": "30",
    "SlurmdTimeout": "300",
    "MinJobAge": "300",
    "DefMemPerCPU": "0",
    "MaxArraySize": "1001",
    "ReturnToService": "1",
    "SchedulerType": "sched/backfill",
    "SelectType": "select/cons_tres",
    "SelectTypeParameters": "CR_Core_Memory",
    "PriorityType": "priority/multifactor",
    "PriorityWeightAge": "1000",
    "PriorityMaxAge": "7-0",
    "PriorityWeightPartition": "1000",
    "PriorityWeightJobSize": "0",
    "SchedulerInterval": "5",
    "SlurmUser": "root",
    "AdminUsers": "",
    "HealthCheckProgram": "",
    "HealthCheckInterval": "0",
    "Prolog": "",
    "Epilog": "",
    "GresTypes": "gpu",
    "AccountingStorageType": "accounting_storage/corral",
    "JobCompType": "jobcomp/none",
    "ProctrackType": "proctrack/cgroup",
    "TaskPlugin": "task/cgroup,task/affinity",
    "MpiDefault": "none",
}
# Keys accepted (and shown by `scontrol show config`) that Corral does not act on yet.
NOT_ACTED_ON: tuple[str, ...] = ()
# Keys Corral reads that have no default shown by `scontrol show config` when unset.
OPTIONAL_KEYS = {"SchedulerParameters", "ScronParameters",
                 # agent.usage: how often each step's use is sampled (default 30 s)
                 "JobAcctGatherFrequency",
                 # controller.metrics: [HOST:]PORT of the plain-HTTP metrics listener
                 "CorralMetricsListen",
                 "CorralAgentMetricsListen",  # agent.metrics: [HOST:]PORT of its GPU series
                 "CorralWebListen",  # controller.webui: [HOST:]PORT of the dashboard, or off
                 # how long a job waits in COMPLETING for a step that will not die (60 s)
                 "UnkillableStepTimeout",
                 # accounting policy and priority/multifactor (docs/POLICY.md)
                 "AccountingStorageEnforce", "PriorityWeightFairshare", "PriorityWeightQOS",
                 "PriorityWeightAssoc", "PriorityWeightTRES", "PriorityFavorSmall",
                 "PriorityDecayHalfLife", "PriorityCalcPeriod", "PriorityUsageResetPeriod",
                 "PriorityFlags", "TRESBillingWeights",
                 # what users see of each other (controller/privacy.py)
                 "PrivateData",
                 # controller.health: which nodes, the program's limit, the resume gate
                 "HealthCheckNodeState", "HealthCheckTimeout", "CorralHealthCheckResume",
                 # controller.prolog, agent.prolog
                 "PrologFlags", "PrologEpilogTimeout", "PrologSlurmctld", "EpilogSlurmctld",
                 # controller.reclaim: the idle-GPU reclaim policy (model/reclaim.py)
                 *reclaim.KEYS,
                 # preemption (sched/preempt.py, docs/POLICY.md)
                 "PreemptType", "PreemptMode", "PreemptExemptTime"}
# Keys accepted from real slurm.conf files that Corral has no use for; quietly ignored.
IGNORED_KEYS = {
    "SlurmctldHost", "ControlMachine", "SlurmctldPort", "SlurmdPort", "AuthType",
    "StateSaveLocation", "SlurmdSpoolDir", "SlurmctldPidFile", "SlurmdPidFile",
    "SlurmctldLogFile", "SlurmdLogFile", "SwitchType", "CredType", "LaunchType",
    "AccountingStorageHost", "AccountingStoragePort", "JobAcctGatherType",
    "SlurmdUser", "SlurmctldDebug", "SlurmdDebug",
    "SlurmdParameters", "Include",
}


@dataclass(slots=True)
class ClusterConfig:
    options: dict[str, str] = field(default_factory=lambda: dict(GLOBAL_DEFAULTS))
    nodes: list[Node] = field(default_factory=list)
    partitions: list[Partition] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)

    @property
    def cluster_name(self) -> str:
        return self.options["ClusterName"]

    def get_int(self, key: str) -> int:
        return int(self.options.get(key, GLOBAL_DEFAULTS.get(key, "0")) or 0)

    def get_seconds(self, key: str) -> int:
        """A time option in Slurm's time-limit syntax (PriorityMaxAge=7-0)."""
        v = self.options.get(key, GLOBAL_DEFAULTS.get(key, "0"))
        # Slurm's syntax: a bare number is minutes (PriorityMaxAge=1440 is one day)
        return max(0, parse_time_limit(v))

    def inert_settings(self) -> list[str]:
        """The settings this configuration makes that Corral accepts but does not act on
        (for `corral up` to name in one line): nothing may look in effect that is not."""
        inert = [k for k in NOT_ACTED_ON
                 if self.options.get(k, GLOBAL_DEFAULTS.get(k, "")) not in ("", "0",
                                                                            GLOBAL_DEFAULTS.get(k))]
        modes = self.options.get("PreemptMode", "").upper().split(",")
        if "GANG" in modes and "SUSPEND" not in modes:
            # gang scheduling alone: no time-slicing in Corral (with SUSPEND, GANG is
            # what resumes suspended victims, which Corral does)
            inert.append("PreemptMode=GANG")
        return inert

    def default_partition(self) -> Partition | None:
        for p in self.partitions:
            if p.default:
                return p
        return self.partitions[0] if self.partitions else None


def _kv_pairs(line: str, lineno: int) -> list[tuple[str, str]]:
    try:
        tokens = shlex.split(line, comments=False, posix=True)
    except ValueError as e:
        raise ConfigError(f"line {lineno}: {e}") from e
    pairs = []
    for tok in tokens:
        if "=" not in tok:
            raise ConfigError(f"line {lineno}: expected Key=Value, got {tok!r}")
        k, _, v = tok.partition("=")
        pairs.append((k.strip(), v.strip()))
    return pairs


def _parse_gres(spec: str) -> tuple[int, str | None]:
    """Gres=gpu:8, gpu:a100:4, gpu:a100:4(S:0-1) → (count, type)."""
    total, gtype = 0, None
    for item in spec.split(","):
        item = re.sub(r"\(.*\)$", "", item.strip())
        if not item:
            continue
        parts = item.split(":")
        if parts[0] != "gpu":
            continue
        if len(parts) == 2:
            total += int(parts[1])
        elif len(parts) >= 3:
            gtype = parts[1]
            total += int(parts[2])
        else:
            total += 1
    return total, gtype


def _to_int(key: str, value: str, lineno: int) -> int:
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"line {lineno}: {key}={value} is not a number") from None


def parse_config(text: str) -> ClusterConfig:
    cfg = ClusterConfig()
    node_defaults: dict[str, str] = {}
    part_defaults: dict[str, str] = {}
    # continuation lines end in a backslash
    text = re.sub(r"\\\n", " ", text)
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        pairs = _kv_pairs(line, lineno)
        head, value = pairs[0]
        attrs = dict(pairs[1:])
        if head.lower() == "nodename":
            if value == "DEFAULT":
                node_defaults.update(attrs)
                continue
            merged = {**node_defaults, **attrs}
            _add_nodes(cfg, value, merged, lineno)
        elif head.lower() == "partitionname":
            if value == "DEFAULT":
                part_defaults.update(attrs)
                continue
            _add_partition(cfg, value, {**part_defaults, **attrs}, lineno)
        else:
            for k, v in pairs:
                if k in GLOBAL_DEFAULTS or k in OPTIONAL_KEYS:
                    cfg.options[k] = v
                elif k not in IGNORED_KEYS:
                    cfg.options[k] = v
                    cfg.unknown.append(k)
    try:
        reclaim.parse_policy(cfg.options)
    except reclaim.ReclaimPolicyError as e:
        raise ConfigError(str(e)) from None
    names = {n.name for n in cfg.nodes}
    for p in cfg.partitions:
        for n in p.nodes:
            if n not in names:
                raise ConfigError(f"partition {p.name}: node {n} is not defined")
    by_name = {n.name: n for n in cfg.nodes}
    for p in cfg.partitions:
        for n in p.nodes:
            by_name[n].partitions.append(p.name)
    preempt_settings(cfg.options)
    try:  # MpiDefault: none or pmi2 (model/mpi.py); PMIx is refused here, not at each srun
        parse_mpi_type(cfg.options.get("MpiDefault", "none"))
    except MpiTypeError as e:
        raise ConfigError(f"MpiDefault={cfg.options['MpiDefault']}: {e}") from None
    if cfg.partitions and not any(p.default for p in cfg.partitions):
        cfg.partitions[0].default = True
    return cfg


def _node_features(a: dict[str, str]) -> list[str]:
    """Feature=/Features= (AvailableFeatures=) and ActiveFeatures=: without a node
    features plugin the active ones are the available ones (slurm.conf(5)), so either
    alone sets both."""
    text = (a.get("Features") or a.get("Feature") or a.get("AvailableFeatures")
            or a.get("ActiveFeatures") or "")
    return list(dict.fromkeys(f.strip() for f in text.split(",") if f.strip()))


def _add_nodes(cfg: ClusterConfig, expr: str, a: dict[str, str], lineno: int) -> None:
    try:
        names = hostlists.expand(expr)
    except hostlists.HostlistError as e:
        raise ConfigError(f"line {lineno}: bad NodeName {expr}: {e}") from e
    sockets = _to_int("Sockets", a.get("Sockets", a.get("SocketsPerBoard", "1")), lineno)
    threads = _to_int("ThreadsPerCore", a.get("ThreadsPerCore", "1"), lineno)
    if "CPUs" in a:
        cpus = _to_int("CPUs", a["CPUs"], lineno)
        cores = _to_int("CoresPerSocket", a.get("CoresPerSocket", str(max(1, cpus // (sockets * threads)))), lineno)
    else:
        cores = _to_int("CoresPerSocket", a.get("CoresPerSocket", "1"), lineno)
        cpus = sockets * cores * threads
    try:
        gpus, gtype = _parse_gres(a.get("Gres", ""))
    except ValueError:
        raise ConfigError(f"line {lineno}: bad Gres={a.get('Gres')}") from None
    addrs = hostlists.expand(a["NodeAddr"]) if "NodeAddr" in a else []
    features = _node_features(a)
    for i, name in enumerate(names):
        cfg.nodes.append(Node(
            name=name, cpus=cpus, real_memory=_to_int("RealMemory", a.get("RealMemory", "1"), lineno),
            gpus=gpus, gpu_type=gtype, sockets=sockets, cores_per_socket=cores,
            threads_per_core=threads, weight=_to_int("Weight", a.get("Weight", "1"), lineno),
            tmp_disk=_to_int("TmpDisk", a.get("TmpDisk", "0"), lineno),
            features=list(features),
            addr=addrs[i] if i < len(addrs) else "",
        ))


def _add_partition(cfg: ClusterConfig, name: str, a: dict[str, str], lineno: int) -> None:
    def limit(key: str) -> int | None:
        if key not in a:
            return None
        try:
            return parse_time_limit(a[key])
        except TimeFormatError:
            raise ConfigError(f"line {lineno}: bad {key}={a[key]}") from None

    def opt_int(key: str) -> int | None:
        """A count or size; UNLIMITED (or absent) is None."""
        v = a.get(key)
        if v is None or v.upper() in ("UNLIMITED", "INFINITE"):
            return None
        return _to_int(key, v, lineno)

    nodes_expr = a.get("Nodes", "")
    if nodes_expr.upper() == "ALL":
        nodes = [n.name for n in cfg.nodes]
    else:
        nodes = hostlists.expand(nodes_expr)
    max_nodes = a.get("MaxNodes")
    p = Partition(
        name=name, nodes=nodes, default=a.get("Default", "NO").upper() == "YES",
        max_time=limit("MaxTime") or -1 if "MaxTime" in a else -1,
        default_time=limit("DefaultTime"),
        max_nodes=None if max_nodes in (None, "UNLIMITED", "INFINITE") else _to_int("MaxNodes", max_nodes, lineno),
        min_nodes=_to_int("MinNodes", a.get("MinNodes", "0"), lineno),
        state=a.get("State", "UP").upper(),
        priority_tier=_to_int("PriorityTier", a.get("PriorityTier", a.get("Priority", "1")), lineno),
        priority_job_factor=_to_int("PriorityJobFactor", a.get("PriorityJobFactor", "1"), lineno),
        oversubscribe=a.get("OverSubscribe", a.get("Shared", "NO")).upper(),
        def_mem_per_cpu=opt_int("DefMemPerCPU"),
        def_mem_per_gpu=opt_int("DefMemPerGPU"),
        def_cpu_per_gpu=opt_int("DefCpuPerGPU"),
        max_mem_per_node=opt_int("MaxMemPerNode"),
        max_cpus_per_node=opt_int("MaxCPUsPerNode"),
        qos=a.get("QOS", a.get("QoS", a.get("Qos", ""))),
        allow_accounts=a.get("AllowAccounts", "ALL"),
        allow_groups=a.get("AllowGroups", "ALL"),
        deny_accounts=a.get("DenyAccounts", ""),
        allow_qos=a.get("AllowQos", a.get("AllowQOS", "ALL")),
        deny_qos=a.get("DenyQos", a.get("DenyQOS", "")),
        root_only=a.get("RootOnly", "NO").upper() == "YES",
        hidden=a.get("Hidden", "NO").upper() == "YES",
        exclusive_user=a.get("ExclusiveUser", "NO").upper() == "YES",
        preempt_mode=_preempt_mode(a["PreemptMode"], f"line {lineno}")
        if "PreemptMode" in a else "",
    )
    cfg.partitions.append(p)


PREEMPT_TYPES = ("preempt/none", "preempt/qos", "preempt/partition_prio")


def _preempt_mode(text: str, where: str, cluster: bool = False) -> str:
    """PreemptMode=OFF|CANCEL|REQUEUE|SUSPEND, lower case, without GANG.  SUSPEND at the
    cluster level needs GANG, as in Slurm (the gang scheduler is what resumes suspended
    jobs); Corral resumes a suspended victim when its preemptor ends and does no
    time-slicing (docs/POLICY.md)."""
    modes = [m.strip().upper() for m in text.split(",") if m.strip()]
    base = [m for m in modes if m != "GANG"]
    if len(base) > 1 or any(m not in ("OFF", "CANCEL", "REQUEUE", "SUSPEND", "GANG")
                            for m in modes):
        raise ConfigError(f"{where}: invalid PreemptMode={text}")
    mode = base[0] if base else "OFF"
    if cluster and mode == "SUSPEND" and "GANG" not in modes:
        raise ConfigError(f"{where}: PreemptMode=SUSPEND requires GANG too")
    return mode.lower()


def preempt_settings(options: dict[str, str]) -> tuple[str, str, int]:
    """(PreemptType, PreemptMode, PreemptExemptTime in seconds) of slurm.conf, checked.
    GANG alone (gang scheduling without preemption) is accepted and not acted on."""
    kind = options.get("PreemptType", "preempt/none").strip().lower()
    if kind not in PREEMPT_TYPES:
        raise ConfigError(f"invalid PreemptType={options.get('PreemptType')}")
    mode = _preempt_mode(options.get("PreemptMode", "OFF"), "slurm.conf", cluster=True)
    exempt_text = options.get("PreemptExemptTime", "").strip()
    exempt = 0
    if exempt_text and exempt_text.upper() not in ("-1", "NONE", "UNLIMITED"):
        try:
            exempt = parse_time_limit(exempt_text)
        except TimeFormatError:
            raise ConfigError(f"invalid PreemptExemptTime={exempt_text}") from None
    return kind, mode, max(0, exempt)


def render_config(cfg_options: dict[str, str], node_lines: list[str], partition_lines: list[str]) -> str:
    """Write a slurm.conf-syntax file (used by `corral up` for a fresh cluster)."""
    out = ["# Corral cluster configuration (slurm.conf syntax)."]
    for k, v in cfg_options.items():
        out.append(f"{k}={v}")
    out.append("")
    out.extend(node_lines)
    out.extend(partition_lines)
    return "\n".join(out) + "\n"
