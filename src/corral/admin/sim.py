"""`corral sim TRACE [--config slurm.conf]`: replay a workload trace on the production
scheduler in virtual time (corral.sim) and print how it went."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from corral.controller.errors import SlurmError
from corral.model.config import ConfigError, parse_config

if TYPE_CHECKING:
    from corral.sim.engine import SimResult
    from corral.sim.trace import SwfHeader, TraceJob

DEFAULT_GPU_NODES = 64


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("sim", help="replay a workload trace (SWF or GPU-job CSV) on the "
                                   "scheduler in virtual time")
    p.add_argument("trace", help="a .swf/.swf.gz trace, a CSV of jobs, a sacct --parsable2 "
                                 "export, or lab:N[:SEED] (a generated lab mix of N jobs; see "
                                 "docs/ARCHITECTURE.md)")
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
    p.add_argument("--policy", metavar="LIST",
                   help="compare policies side by side: fcfs, easy, default, easy++, "
                        "default++, sp:ITEM+ITEM (SchedulerParameters items added), "
                        "conf:PATH (comma-separated)")
    p.add_argument("--plot", metavar="PNG", help="with --policy: GPUs busy over time, a PNG")
    p.add_argument("--nodes", type=int, metavar="N",
                   help="without --config: N nodes (default 64, 4 for lab:N)")
    p.add_argument("--gpus-per-node", type=int, default=8, metavar="G",
                   help="without --config: G GPUs per node (default 8)")
    p.add_argument("--accounts", metavar="FILE",
                   help="a `sacctmgr dump` flat file: the simulated cluster's QoS (Preempt, "
                        "PreemptMode, GraceTime, priorities), accounts, users and limits; a "
                        "trace's qos column then replays preemption")
    p.add_argument("--load", type=float, metavar="L",
                   help="rescale submit times so the offered load on the cluster is L "
                        "(lab:N is generated at load L, default 1.0)")
    p.set_defaults(fn=cmd_sim)


def cmd_sim(args: argparse.Namespace) -> int:
    from corral.sim.engine import Simulator
    from corral.sim.generate import cpu_cluster_conf, gpu_cluster_conf
    from corral.sim.metrics import render, summarise
    from corral.sim.trace import TraceError, first_jobs

    try:
        if (args.nodes is not None and args.nodes < 1) or args.gpus_per_node < 0 \
                or (args.load is not None and args.load <= 0):
            raise TraceError("--nodes must be >= 1, --gpus-per-node >= 0, --load > 0")
        nodes = args.nodes or (4 if args.trace.startswith("lab:") else DEFAULT_GPU_NODES)
        jobs, header = load_trace(args.trace, nodes, args.gpus_per_node, args.load)
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
            text = gpu_cluster_conf(nodes, args.gpus_per_node)
        config = parse_config(text)
        if args.load is not None and not args.trace.startswith("lab:"):
            from corral.sim.compare import compress, fits_config

            # (jobs the cluster refuses offer no load)
            jobs = compress(jobs, sum(n.gpus for n in config.nodes), args.load,
                            fits_config(config))
    except (TraceError, ConfigError) as e:
        print(f"corral sim: error: {e}", file=sys.stderr)
        return 1
    accounts = None
    if args.accounts:
        try:
            accounts = Path(args.accounts).read_text()
        except OSError as e:
            print(f"corral sim: error: {args.accounts}: {e.strerror or e}", file=sys.stderr)
            return 1
    if args.jobs is not None:
        if args.jobs < 1:
            print("corral sim: error: --jobs must be at least 1", file=sys.stderr)
            return 1
        jobs = first_jobs(jobs, args.jobs)
    if args.policy:
        return compare(args, text, jobs, accounts)
    if args.plot:
        print("corral sim: error: --plot needs --policy", file=sys.stderr)
        return 1
    if args.pass_cost < 0:
        print("corral sim: error: --pass-cost must be >= 0", file=sys.stderr)
        return 1
    try:
        sim = Simulator(config, jobs, pass_cost=args.pass_cost, exact=args.exact,
                        accounts=accounts)
    except (ConfigError, SlurmError) as e:
        print(f"corral sim: error: {_accounts_error(args, e)}", file=sys.stderr)
        return 1
    result = sim.run()
    if args.jobs_out:
        try:
            write_jobs(result, Path(args.jobs_out))
        except OSError as e:
            print(f"corral sim: error: {args.jobs_out}: {e.strerror or e}", file=sys.stderr)
            return 1
    sys.stdout.write(render(summarise(result)))
    _unknown_qos_note(sim.unknown_qos)
    return 0


def _accounts_error(args: argparse.Namespace, e: Exception) -> str:
    if isinstance(e, SlurmError):  # (sacctmgr's wording starts with a space)
        return f"{args.accounts}: {e.message.strip()}"
    return str(e)


def _unknown_qos_note(count: int) -> None:
    if count:
        print(f"{count} jobs named a QoS the simulated cluster does not define: submitted "
              f"with the default QoS (define them with --accounts)")


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


def load_trace(spec: str, nodes: int, gpus_per_node: int,
               load: float | None) -> tuple[list[TraceJob], SwfHeader | None]:
    from corral.sim.generate import lab_mix
    from corral.sim.trace import TraceError, read_trace

    if spec.startswith("lab:"):
        count, _, seed = spec[4:].partition(":")
        if not count.isdigit() or (seed and not seed.isdigit()):
            raise TraceError(f"{spec}: expected lab:N or lab:N:SEED")
        return lab_mix(int(count), nodes=nodes, gpus_per_node=gpus_per_node,
                       load=load or 1.0, seed=int(seed or 1)), None
    return read_trace(Path(spec))


def compare(args: argparse.Namespace, base: str, jobs: list[TraceJob],
            accounts: str | None = None) -> int:
    from corral.sim.compare import (
        BUILTIN,
        busy_series,
        policy_conf,
        render_excess,
        render_groups,
        render_summaries,
        window_utilisation,
    )
    from corral.sim.engine import Simulator
    from corral.sim.metrics import summarise

    names = [n.strip() for n in args.policy.split(",") if n.strip()]
    confs = []
    for name in names:
        if name in BUILTIN or name.startswith("sp:"):
            confs.append(policy_conf(name, base))
        elif name.startswith("conf:"):
            try:
                confs.append(Path(name[5:]).read_text())
            except OSError as e:
                print(f"corral sim: error: {name[5:]}: {e.strerror or e}", file=sys.stderr)
                return 1
        else:
            print(f"corral sim: error: unknown policy {name!r} (fcfs, easy, default, "
                  f"easy++, default++, sp:ITEM+ITEM, conf:PATH)", file=sys.stderr)
            return 1
    if not names:
        print("corral sim: error: --policy needs at least one policy", file=sys.stderr)
        return 1
    results = []
    unknown_qos = 0
    try:
        for text in confs:
            sim = Simulator(parse_config(text), jobs, pass_cost=args.pass_cost,
                            exact=args.exact, accounts=accounts)
            results.append(sim.run())
            unknown_qos = sim.unknown_qos
    except (ConfigError, SlurmError) as e:
        print(f"corral sim: error: {_accounts_error(args, e)}", file=sys.stderr)
        return 1
    sys.stdout.write(render_summaries(names, [summarise(r) for r in results],
                                      [window_utilisation(r) for r in results]))
    sys.stdout.write(render_excess(names, results))  # [quality] the bound against EASY
    sys.stdout.write("\nmean wait by size and by user (s)\n")
    sys.stdout.write(render_groups(names, results, jobs))
    _unknown_qos_note(unknown_qos)
    if args.plot:
        from corral.sim.plot import plot_busy

        try:
            plot_busy(Path(args.plot), names, [busy_series(r) for r in results],
                      max(r.total_gpus for r in results))
        except OSError as e:
            print(f"corral sim: error: {args.plot}: {e.strerror or e}", file=sys.stderr)
            return 1
    return 0
