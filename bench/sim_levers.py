"""Scheduling-quality levers measured with the simulator (virtual time, so the figures do not
depend on the machine): each policy against EASY backfill on the compressed GPU trace and
on generated lab mixes, by utilisation, mean wait, idle GPU-seconds while jobs pend, and
how much longer any job waited than under EASY.

    python bench/sim_levers.py [--trace CSV] [--lab N] [--seeds 1,2,3] [--policy NAME ...]

A policy is a name of sim/compare.py's policies (fcfs, easy, easy++, default, ...) or
`sp:ITEM+ITEM` (SchedulerParameters items added to the cluster's)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from corral.model.config import parse_config
from corral.sim.compare import (
    compress,
    fits_nodes,
    policy_conf,
    wait_excess,
    window_utilisation,
)
from corral.sim.engine import Simulator
from corral.sim.generate import gpu_cluster_conf, lab_mix
from corral.sim.metrics import summarise
from corral.sim.trace import TraceJob, read_trace

DEFAULT_POLICIES = ["easy", "default", "easy++",
                    "sp:bf_job_part_count_reserve=1+corral_bf_order=limit",
                    "sp:bf_job_part_count_reserve=1+corral_bf_order=predicted",
                    "sp:bf_job_part_count_reserve=1+corral_bf_order=largest",
                    "sp:bf_job_part_count_reserve=2+corral_bf_reserve_min_gpus=8",
                    "sp:bf_job_part_count_reserve=4+corral_bf_reserve_min_gpus=16"]


# (a)'s nodes: 8 GPUs with the CPUs and memory its largest jobs ask (121 CPUs, 720 GiB), so
# that none is refused (on 64-CPU nodes 20 8-GPU jobs, 28 % of its GPU-hours, were)
TRACE_CPUS, TRACE_MEM_MB = 128, 768_000

# utilisation while jobs arrive, mean wait, idle GPU-s while jobs pend, max extra, p99
# extra, utilisation over the makespan
Row = tuple[float, float, float, float, float, float]


def run(label: str, jobs: list[TraceJob], base: str, names: list[str]) -> dict[str, Row]:
    """One trace under each policy; prints a row per policy and returns them."""
    out: dict[str, Row] = {}
    easy = Simulator(parse_config(policy_conf("easy", base)), jobs).run()
    se = summarise(easy)
    print(f"\n{label}: {len(jobs)} jobs", flush=True)
    header()
    for name in names:
        r = easy if name == "easy" else Simulator(parse_config(policy_conf(name, base)), jobs).run()
        s = summarise(r)
        ex = wait_excess(r, easy)
        out[name] = (window_utilisation(r), s.mean_wait, s.idle_gpu_seconds_while_pending,
                     ex.max_extra, ex.p99_extra, s.utilisation)
        line(name, out[name], (window_utilisation(easy), se.mean_wait,
                               se.idle_gpu_seconds_while_pending, 0.0, 0.0, se.utilisation))
    return out


def header() -> None:
    print(f"{'policy':42} {'util %':>7} {'wait mean':>10} {'idle GPU-s':>11} "
          f"{'max extra':>10} {'p99 extra':>10} {'wins':>5} {'util/mks':>8}")


def line(name: str, row: Row, easy: Row) -> None:
    """`util %`: while jobs arrive (sim/compare.py window_utilisation); `util/mks`: over
    the makespan.  `wins`: on how many of utilisation (while jobs arrive), mean wait and
    idle GPU-s it beats EASY."""
    wins = sum((row[0] > easy[0], row[1] < easy[1], row[2] < easy[2]))
    print(f"{name:42} {row[0] * 100:7.2f} {row[1]:10.0f} {row[2]:11.0f} {row[3]:10.0f} "
          f"{row[4]:10.0f} {wins:5d} {row[5] * 100:8.2f}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", help="GPU-job CSV, compressed to load 1.0 on 4 x 8 GPUs")
    ap.add_argument("--lab", type=int, default=0, help="jobs of each generated lab mix")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--policy", action="append", help="a policy (repeat); default: a set")
    args = ap.parse_args()
    names = args.policy or DEFAULT_POLICIES
    base = gpu_cluster_conf(4, 8)
    if args.trace:
        jobs, _ = read_trace(Path(args.trace))
        big = gpu_cluster_conf(4, 8, cpus=TRACE_CPUS, mem_mb=TRACE_MEM_MB)
        fits = fits_nodes(TRACE_CPUS, TRACE_MEM_MB, 8, 4)
        run(f"{args.trace} at load 1.0", compress(jobs, 32, 1.0, fits), big, names)
    seeds = [int(s) for s in args.seeds.split(",") if s] if args.lab else []
    rows = [run(f"lab:{args.lab}:{seed}", lab_mix(args.lab, seed=seed), base, names)
            for seed in seeds]
    if len(rows) > 1:
        print(f"\nlab:{args.lab}, mean over seeds {args.seeds} (max extra: the largest)")
        header()
        for name in ["easy", *[n for n in names if n != "easy"]]:
            got = [r[name] for r in rows]
            mean = tuple(sum(x[i] for x in got) / len(got) for i in range(3))
            row = (*mean, max(x[3] for x in got), sum(x[4] for x in got) / len(got),
                   sum(x[5] for x in got) / len(got))
            e = [r["easy"] for r in rows]
            easy = (*(sum(x[i] for x in e) / len(e) for i in range(3)), 0.0, 0.0,
                    sum(x[5] for x in e) / len(e))
            line(name, row, easy)  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
