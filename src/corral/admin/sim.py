"""`corral sim TRACE [--config slurm.conf]`: replay a workload trace on the production
scheduler in virtual time (corral.sim) and print how it went."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from corral.model.config import ConfigError, parse_config

if TYPE_CHECKING:
    from corral.sim.engine import SimResult

DEFAULT_GPU_NODES = 64


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("sim", help="replay a workload trace (SWF or GPU-job CSV) on the "
                                   "scheduler in virtual time")
    p.add_argument("trace", help="a .swf/.swf.gz trace or a CSV of jobs (see docs/ARCHITECTURE.md)")
    p.add_argument("--config", help="slurm.conf of the simulated cluster (default: 64 nodes x "
                                     "8 GPUs for a CSV, the trace's MaxNodes/MaxProcs for SWF)")
    p.add_argument("--jobs", type=int, metavar="N",
                   help="the first N jobs (a shorter trace is repeated end to end)")
    p.add_argument("--pass-cost", type=float, default=0.0, metavar="SECONDS",
                   help="virtual seconds a scheduling pass takes (default 0)")
    p.add_argument("--jobs-out", metavar="CSV",
                   help="also write each job's submit, start and end (virtual seconds) here")
    p.add_argument("--exact", action="store_true",
                   help="run every pass and tick the cadence arms, even those nothing changed")
    p.set_defaults(fn=cmd_sim)


def cmd_sim(args: argparse.Namespace) -> int:
    from corral.sim.engine import Simulator
    from corral.sim.generate import cpu_cluster_conf, gpu_cluster_conf
    from corral.sim.metrics import render, summarise
    from corral.sim.trace import TraceError, first_jobs, read_trace

    try:
        jobs, header = read_trace(Path(args.trace))
        if args.config:
            try:
                text = Path(args.config).read_text()
            except OSError as e:
                raise TraceError(f"{args.config}: {e.strerror or e}") from None
        elif header is not None:
            procs = header.max_procs or max((j.cpus for j in jobs), default=1)
            nodes = header.max_nodes or procs
            text = cpu_cluster_conf(nodes, max(1, procs // nodes))
        else:
            text = gpu_cluster_conf(DEFAULT_GPU_NODES)
        config = parse_config(text)
    except (TraceError, ConfigError) as e:
        print(f"corral sim: error: {e}", file=sys.stderr)
        return 1
    if args.jobs is not None:
        if args.jobs < 1:
            print("corral sim: error: --jobs must be at least 1", file=sys.stderr)
            return 1
        jobs = first_jobs(jobs, args.jobs)
    if args.pass_cost < 0:
        print("corral sim: error: --pass-cost must be >= 0", file=sys.stderr)
        return 1
    try:
        sim = Simulator(config, jobs, pass_cost=args.pass_cost, exact=args.exact)
    except ConfigError as e:
        print(f"corral sim: error: {e}", file=sys.stderr)
        return 1
    result = sim.run()
    if args.jobs_out:
        try:
            write_jobs(result, Path(args.jobs_out))
        except OSError as e:
            print(f"corral sim: error: {args.jobs_out}: {e.strerror or e}", file=sys.stderr)
            return 1
    sys.stdout.write(render(summarise(result)))
    return 0


def write_jobs(result: SimResult, path: Path) -> None:
    """One row per trace job, in trace order: index (0-based), job id, submit, start and
    end (virtual seconds from the trace's start; empty if it never did) and final state."""
    import csv

    def t(x: float | None) -> str:
        return "" if x is None else f"{x:.6f}"

    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["index", "job_id", "submit", "start", "end", "state"])
        for r in result.records:
            w.writerow([r.index, r.job_id or "", t(r.submit), t(r.start), t(r.end), r.state])
