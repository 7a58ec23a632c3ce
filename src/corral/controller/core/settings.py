"""The core's settings, read once from slurm.conf: the pass's parameters (priority
weights, backfill budget), fairshare, enforcement, and the lifecycle's timeouts."""

from __future__ import annotations

from dataclasses import dataclass

from corral.model.config import ClusterConfig, ConfigError
from corral.model.jobspec import DEFAULT_MAX_SCRIPT_SIZE, max_script_size
from corral.model.timefmt import parse_time_limit
from corral.sched.backfill import DEFAULT_MAX_PLANNED
from corral.sched.fairshare import FairshareParams, parse_billing_weights
from corral.sched.levers import parse_levers
from corral.sched.limits_check import parse_enforce
from corral.sched.pipeline import SchedParams
from corral.sched.predict import parse_depth
from corral.sched.priority import PriorityParams, PriorityWeights, parse_tres_weights

# A step whose tasks never report their end (an agent that lost them, an unkillable process)
# must not keep its job COMPLETING forever: after KillWait + UnkillableStepTimeout the job ends
# anyway and the step's nodes are drained, as slurmd drains a node whose step it cannot kill.
DEFAULT_UNKILLABLE_STEP_TIMEOUT = 60


def sched_params(config: ClusterConfig) -> SchedParams:
    try:
        tres_weights = parse_tres_weights(config.options.get("PriorityWeightTRES", ""))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    totals: dict[str, int] = {"cpu": 0, "mem": 0, "node": 0, "gres/gpu": 0}
    for n in config.nodes:
        totals["cpu"] += n.cpus
        totals["mem"] += n.real_memory
        totals["node"] += 1
        totals["gres/gpu"] += n.gpus
    return SchedParams(
        priority=PriorityParams(
            weights=PriorityWeights(age=config.get_int("PriorityWeightAge"),
                                    partition=config.get_int("PriorityWeightPartition"),
                                    fairshare=config.get_int("PriorityWeightFairshare"),
                                    qos=config.get_int("PriorityWeightQOS"),
                                    job_size=config.get_int("PriorityWeightJobSize"),
                                    tres=tres_weights,
                                    assoc=config.get_int("PriorityWeightAssoc")),
            max_age_s=config.get_seconds("PriorityMaxAge"),
            favor_small=config.options.get("PriorityFavorSmall", "NO").upper() in ("YES", "1"),
            totals=totals),
        def_mem_per_cpu=config.get_int("DefMemPerCPU"),
        # scheduling-policy knobs (corral sim compares them): sched/builtin is strict
        # priority order, no backfill; bf_job_part_count_reserve=N holds resources for the
        # N highest-priority blocked jobs only (1: EASY backfill; 0: Slurm's "all")
        backfill=config.options.get("SchedulerType", "sched/backfill") != "sched/builtin",
        max_planned=_bf_reserve(config.options.get("SchedulerParameters", "")),
        predict_runtime=parse_depth(config.options.get("SchedulerParameters", "")),
        levers=parse_levers(config.options.get("SchedulerParameters", "")),
    )


def _bf_reserve(params: str) -> int:
    """SchedulerParameters=bf_job_part_count_reserve=N as the pass's planning budget (the
    first blocked job is always planned, so N-1 more)."""
    for item in params.split(","):
        key, _, value = item.strip().partition("=")
        if key == "bf_job_part_count_reserve" and value.strip().isdigit() and int(value) > 0:
            return int(value) - 1
    return DEFAULT_MAX_PLANNED


def fairshare_params(config: ClusterConfig) -> FairshareParams:
    """PriorityDecayHalfLife, PriorityUsageResetPeriod, TRESBillingWeights, PriorityFlags."""
    o = config.options
    flags = {f.strip().upper() for f in o.get("PriorityFlags", "").split(",") if f.strip()}
    try:
        weights = parse_billing_weights(o.get("TRESBillingWeights", ""))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    half = o.get("PriorityDecayHalfLife", "7-0")
    return FairshareParams(half_life_s=float(max(0, parse_time_limit(half))),
                           reset_period=o.get("PriorityUsageResetPeriod", "NONE"),
                           billing_weights=weights, max_tres="MAX_TRES" in flags,
                           fair_tree="NO_FAIR_TREE" not in flags)


@dataclass(slots=True)
class CoreSettings:
    cluster_name: str
    kill_wait: int
    min_job_age: int
    def_mem_per_cpu: int
    max_array_size: int
    max_script_size: int
    sched_params: SchedParams
    enforce: frozenset[str]
    fair_params: FairshareParams
    calc_period_s: int
    unkillable_step_timeout: int
    return_to_service: int
    slurmd_timeout: int

    @classmethod
    def from_config(cls, config: ClusterConfig) -> CoreSettings:
        try:
            enforce = parse_enforce(config.options.get("AccountingStorageEnforce"))
        except ValueError as e:
            raise ConfigError(str(e)) from None
        raw = config.options.get("UnkillableStepTimeout", "")
        try:
            unkillable = int(raw) if raw else DEFAULT_UNKILLABLE_STEP_TIMEOUT
        except ValueError:
            unkillable = DEFAULT_UNKILLABLE_STEP_TIMEOUT
        return cls(
            cluster_name=config.cluster_name,
            kill_wait=config.get_int("KillWait"),
            min_job_age=config.get_int("MinJobAge"),
            def_mem_per_cpu=config.get_int("DefMemPerCPU"),
            max_array_size=config.get_int("MaxArraySize"),
            max_script_size=max_script_size(config.options.get("SchedulerParameters", ""))
            or DEFAULT_MAX_SCRIPT_SIZE,
            sched_params=sched_params(config),
            enforce=enforce,
            fair_params=fairshare_params(config),
            calc_period_s=max(60, parse_time_limit(config.options.get("PriorityCalcPeriod", "5"))),
            unkillable_step_timeout=unkillable,
            return_to_service=config.get_int("ReturnToService"),
            slurmd_timeout=config.get_int("SlurmdTimeout"),
        )

    def step_bound(self) -> float:
        """Seconds a job waits in COMPLETING for steps that do not report their end."""
        return max(0, self.kill_wait) + max(0, self.unkillable_step_timeout)
