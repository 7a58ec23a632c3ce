"""Several scheduling policies on one trace, side by side.

A policy is a slurm.conf: `fcfs` is the given cluster with `SchedulerType=sched/builtin`
(strict priority order, no backfill), `easy` adds `SchedulerParameters=
bf_job_part_count_reserve=1` (backfill that protects only the top blocked job's start),
`default` is the cluster as given (Corral's default: every blocked job planned, up to the
pass's budget), and `conf:PATH` is any slurm.conf file (its own cluster).  `easy++` and
`default++` add `corral_predict_runtime=2` (EASY++: backfill planned with each user's
recent run times instead of time limits, sched/predict.py).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from corral.model.config import ClusterConfig
from corral.sim.engine import SimResult
from corral.sim.metrics import Summary, percentile
from corral.sim.trace import TraceJob

BUILTIN = ("fcfs", "easy", "default", "easy++", "default++")
PREDICT = "corral_predict_runtime=2"


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    conf_text: str


def _with_option(text: str, key: str, value: str) -> str:
    """slurm.conf text with `key` set to `value` (SchedulerParameters: one item added)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        k, sep, v = line.partition("=")
        if sep and k.strip() == key:
            if key == "SchedulerParameters" and v.strip():
                lines[i] = f"{key}={v.strip()},{value}"
            else:
                lines[i] = f"{key}={value}"
            return "\n".join(lines) + "\n"
    return f"{key}={value}\n" + text


def policy_conf(name: str, base: str) -> str:
    """slurm.conf text of a built-in policy, or of `sp:ITEM+ITEM` (SchedulerParameters items
    added to the cluster's, e.g. `sp:bf_job_part_count_reserve=1+corral_bf_order=limit`)."""
    if name.startswith("sp:"):
        items = ",".join(i for i in name[3:].split("+") if i)
        return _with_option(base, "SchedulerParameters", items) if items else base
    if name == "fcfs":
        return _with_option(base, "SchedulerType", "sched/builtin")
    if name == "easy":
        return _with_option(base, "SchedulerParameters", "bf_job_part_count_reserve=1")
    if name == "easy++":
        return _with_option(policy_conf("easy", base), "SchedulerParameters", PREDICT)
    if name == "default++":
        return _with_option(base, "SchedulerParameters", PREDICT)
    return base


@dataclass(frozen=True, slots=True)
class Excess:
    """How much longer jobs waited under a policy than under a baseline (same trace)."""

    max_extra: float  # the longest extra wait of any job (0 if none waited longer)
    p99_extra: float  # 99th percentile of the extra waits over all jobs (negative: less)
    worse: int  # jobs that waited longer
    both: int  # jobs that started under both


def wait_excess(result: SimResult, baseline: SimResult) -> Excess:
    """Per job, its wait under `result` minus its wait under `baseline`."""
    extra = sorted((r.start - b.start) for r, b in zip(result.records, baseline.records,
                                                       strict=True)
                   if r.start is not None and b.start is not None)
    if not extra:
        return Excess(0.0, 0.0, 0, 0)
    return Excess(max(0.0, extra[-1]), percentile(extra, 99),
                  sum(1 for x in extra if x > 0), len(extra))


def compress(jobs: Sequence[TraceJob], total_gpus: int, load: float,
             fits: Callable[[TraceJob], bool] | None = None) -> list[TraceJob]:
    """The same jobs with submit times scaled so that the offered load (GPU-seconds asked
    for over GPU-seconds available between the first and last submission) is `load`.
    With `fits` (`fits_nodes`), only the jobs the cluster can run count: a job it refuses
    offers no load (counting them made a trace whose largest jobs were refused look
    twice as loaded as it was)."""
    if not jobs or total_gpus <= 0 or load <= 0:
        return list(jobs)
    first = min(j.submit for j in jobs)
    span = max(j.submit for j in jobs) - first
    work = sum(j.gpus * min(j.run_time, j.time_limit) for j in jobs
               if fits is None or fits(j))
    if span <= 0 or work <= 0:
        return list(jobs)
    factor = work / (total_gpus * load) / span
    return [replace(j, submit=round((j.submit - first) * factor, 3)) for j in jobs]


def fits_nodes(cpus: int, mem_mb: int, gpus: int, count: int) -> Callable[[TraceJob], bool]:
    """Whether the simulator can run a job on `count` nodes of (cpus, mem_mb, gpus): as
    sim/engine.py asks for it (a job of more GPUs than a node has on as many whole nodes as
    it needs, its CPUs and memory shared out among them)."""
    def fits(j: TraceJob) -> bool:
        nodes = -(-j.gpus // gpus) if gpus and j.gpus > gpus else 1
        return nodes <= count and -(-j.cpus // nodes) <= cpus \
            and (not mem_mb or -(-j.mem_mb // nodes) <= mem_mb)
    return fits


def fits_config(config: ClusterConfig) -> Callable[[TraceJob], bool]:
    """`fits_nodes` for a cluster's nodes (the largest shape, all its nodes)."""
    if not config.nodes:
        return lambda j: False
    n = max(config.nodes, key=lambda x: (x.gpus, x.cpus, x.real_memory))
    return fits_nodes(n.cpus, n.real_memory, n.gpus, len(config.nodes))


def window_utilisation(result: SimResult) -> float:
    """GPU utilisation between the first and the last submission: while the trace still
    offers work.  (Over the makespan, a trace with a long tail, such as one 19-day job
    started early, measures the tail: every policy that runs all jobs gets the same.)"""
    subs = [r.submit for r in result.records]
    if not subs or result.total_gpus <= 0:
        return 0.0
    lo, hi = min(subs), max(subs)
    if hi <= lo:
        return 0.0
    busy = 0.0
    for r in result.records:
        for a, b in r.holding(hi):
            busy += r.gpus * max(0.0, min(b, hi) - max(a, lo))
    return busy / (result.total_gpus * (hi - lo))


def busy_series(result: SimResult) -> list[tuple[float, int]]:
    """(time, GPUs busy from then on), a step function over the run."""
    changes: dict[float, int] = defaultdict(int)
    last = max((r.end for r in result.records if r.end is not None), default=0.0)
    for r in result.records:
        for a, b in r.holding(last):
            changes[a] += r.gpus
            changes[b] -= r.gpus
    out: list[tuple[float, int]] = []
    busy = 0
    for t in sorted(changes):
        busy += changes[t]
        out.append((t, busy))
    return out


def _fmt_row(cells: Sequence[str], widths: Sequence[int]) -> str:
    return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                     for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(_fmt_row(r, widths) for r in [header, *rows]) + "\n"


def render_summaries(names: Sequence[str], sums: Sequence[Summary],
                     arriving: Sequence[float]) -> str:
    """One row per policy: `util %` over the makespan, `arriving %` while jobs arrive
    (`window_utilisation`)."""
    header = ["policy", "util %", "arriving %", "wait mean s", "median s", "p95 s",
              "mean bsld", "idle GPU-s pending", "makespan s", "started", "timeouts"]
    rows = [[n, f"{s.utilisation * 100:.1f}", f"{a * 100:.1f}", f"{s.mean_wait:.0f}",
             f"{s.median_wait:.0f}",
             f"{s.p95_wait:.0f}", f"{s.mean_bounded_slowdown:.2f}",
             f"{s.idle_gpu_seconds_while_pending:.0f}", f"{s.makespan:.0f}",
             f"{s.started}/{s.jobs}", str(s.timed_out)]
            for n, s, a in zip(names, sums, arriving, strict=True)]
    return table(header, rows)


def render_excess(names: Sequence[str], results: Sequence[SimResult]) -> str:
    """How much longer jobs waited than under `easy` (when it is compared): the longest
    extra wait of any job, the 99th percentile of the differences, and how many waited
    longer.  Empty without `easy`."""
    if "easy" not in names:
        return ""
    base = results[list(names).index("easy")]
    rows = []
    for n, r in zip(names, results, strict=True):
        if n == "easy":
            continue
        ex = wait_excess(r, base)
        rows.append([n, f"{ex.max_extra:.0f}", f"{ex.p99_extra:.0f}", f"{ex.worse}/{ex.both}"])
    if not rows:
        return ""
    return "\nwaits against easy, per job (s)\n" + table(
        ["policy", "max extra wait", "p99 extra wait", "waited longer"], rows)


def mean_waits(result: SimResult, jobs: Sequence[TraceJob], key: str) -> dict[str, float]:
    """Mean wait of the jobs that started, by user (from the trace) or by GPUs requested."""
    groups: dict[str, list[float]] = defaultdict(list)
    for r, j in zip(result.records, jobs, strict=True):
        if r.start is None:
            continue
        groups[j.user if key == "user" else str(r.gpus)].append(r.start - r.submit)
    return {k: statistics.fmean(v) for k, v in groups.items()}


def render_groups(names: Sequence[str], results: Sequence[SimResult],
                  jobs: Sequence[TraceJob]) -> str:
    """Mean waits per size (GPUs requested) and per user, one column per policy."""
    out = []
    for key, title in (("gpus", "GPUs"), ("user", "user")):
        per = [mean_waits(r, jobs, key) for r in results]
        counts: dict[str, int] = defaultdict(int)
        for j in jobs:
            counts[j.user if key == "user" else str(j.gpus)] += 1
        ks = sorted(counts, key=lambda k: (int(k) if key == "gpus" else 0, k))
        rows = [[k, str(counts[k]), *(f"{p[k]:.0f}" if k in p else "-" for p in per)]
                for k in ks]
        out.append(table([title, "jobs", *(f"{n} wait s" for n in names)], rows))
    return "\n".join(out)
