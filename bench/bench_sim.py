#!/usr/bin/env python3
"""Wall time of `corral sim` (medians, printed): a generated 10,000-job GPU trace on 64 nodes
x 8 GPUs at offered load ~1, and 100,000 jobs of the NASA iPSC SWF trace (repeated end to end:
it holds 18,239 jobs), with simulated jobs per wall-clock second.

    bench/bench_sim.py [--gpu-jobs 10000] [--swf-jobs 100000] [--runs 1] [--swf PATH]
                       [--sched-min-interval SECONDS]

Each run is the real command (`python -m corral.admin.main sim ...`) in a fresh process.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from corral.sim.generate import gpu_cluster_conf, gpu_jobs, write_csv  # noqa: E402

SWF = Path(os.environ.get("CORRAL_SWF_TRACE",
                          ROOT.parent / "shared" / "traces" / "NASA-iPSC-1993-3.1-cln.swf.gz"))


def run_sim(args: list[str], runs: int) -> tuple[float, str]:
    times = []
    out = ""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p))
    cpu = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "corral.admin.main", "sim", *args],
                           capture_output=True, text=True, env=env, check=False)
        times.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        if r.returncode != 0:
            raise SystemExit(f"corral sim failed: {r.stderr.strip()}")
        out = r.stdout
    return statistics.median(times), f"{out}(CPU time of the command: {statistics.median(cpu):.1f} s)\n"


def report(title: str, jobs: int, wall: float, out: str) -> None:
    print(f"== {title}")
    print(out.rstrip())
    print(f"-> corral sim wall time (median, whole command): {wall:.1f} s, "
          f"{jobs / wall:.0f} simulated jobs per wall second\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu-jobs", type=int, default=10_000)
    ap.add_argument("--swf-jobs", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--swf", type=Path, default=SWF)
    ap.add_argument("--sched-min-interval", type=float, default=None, metavar="SECONDS",
                    help="also run with SchedulerParameters=sched_min_interval= set")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "gpu.csv"
        if args.gpu_jobs:
            write_csv(gpu_jobs(args.gpu_jobs, nodes=64, gpus_per_node=8, load=1.0, seed=1), trace)
        conf = Path(tmp) / "slurm.conf"
        conf.write_text(gpu_cluster_conf(64, 8))
        if args.gpu_jobs:
            wall, out = run_sim([str(trace), "--config", str(conf)], args.runs)
            report(f"GPU trace: {args.gpu_jobs} jobs, 64 nodes x 8 GPUs, offered load 1.0",
                   args.gpu_jobs, wall, out)
        if args.sched_min_interval is not None and args.gpu_jobs:
            micros = int(args.sched_min_interval * 1e6)
            fast = Path(tmp) / "slurm-min.conf"
            fast.write_text(gpu_cluster_conf(64, 8)
                            + f"SchedulerParameters=sched_min_interval={micros}\n")
            wall, out = run_sim([str(trace), "--config", str(fast)], args.runs)
            report(f"same, sched_min_interval={args.sched_min_interval:g} s", args.gpu_jobs,
                   wall, out)
        if args.swf_jobs:
            if not args.swf.is_file():
                print(f"(no SWF trace at {args.swf}: skipped)")
                return 0
            wall, out = run_sim([str(args.swf), "--jobs", str(args.swf_jobs)], args.runs)
            report(f"SWF {args.swf.name}: {args.swf_jobs} jobs", args.swf_jobs, wall, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
