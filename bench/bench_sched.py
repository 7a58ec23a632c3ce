"""Time one full scheduling pass (priority order + backfill) on a synthetic cluster.

    python bench/bench_sched.py [--runs N] [--jobs N] [--nodes N]

Builds 1,000 nodes (GPU and CPU-only, in overlapping partitions, about 70% busy with
running jobs that end at different times) and 10,000 pending jobs of mixed shapes
(1/2/4/8-GPU jobs, multi-node GPU jobs, CPU jobs, exclusive jobs, with and without time
limits), then prints the median wall time of `schedule()` over several runs, and the same
for half the jobs, whose ratio shows how the cost grows with the queue.
Budget (docs/ARCHITECTURE.md): < 1 s for 10,000 jobs × 1,000 nodes on a slow 2-core machine.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from corral.model.job import NodeAlloc  # noqa: E402
from corral.model.node import Partition  # noqa: E402
from corral.sched.backfill import schedule  # noqa: E402
from corral.sched.snapshot import (  # noqa: E402
    INFINITE_TIME,
    NodeView,
    PendingView,
    RunningView,
    Snapshot,
)

NOW = 1_700_000_000.0


def build(n_nodes: int, n_jobs: int, seed: int = 1) -> Snapshot:
    rng = random.Random(seed)
    nodes: dict[str, NodeView] = {}
    gpu_names: list[str] = []
    cpu_names: list[str] = []
    for i in range(n_nodes):
        if i % 4 != 3:
            name = f"gpu{i:04d}"
            nodes[name] = NodeView(name=name, cpus=64, mem=512_000, gpus=8, free_cpus=64,
                                   free_mem=512_000, free_gpus=list(range(8)), usable=True,
                                   partitions=("gpu", "all"))
            gpu_names.append(name)
        else:
            name = f"cpu{i:04d}"
            nodes[name] = NodeView(name=name, cpus=128, mem=256_000, gpus=0, free_cpus=128,
                                   free_mem=256_000, free_gpus=[], usable=rng.random() > 0.02,
                                   partitions=("cpu", "all"))
            cpu_names.append(name)
    running: list[RunningView] = []
    job_id = 1
    for v in nodes.values():
        if rng.random() > 0.7:
            continue  # left idle
        for _ in range(rng.randint(1, 4)):
            cpus = rng.choice([1, 4, 8, 16])
            gpus = rng.choice([0, 1, 2, 4]) if v.gpus else 0
            mem = cpus * 4000
            if v.free_cpus < cpus or len(v.free_gpus) < gpus or v.free_mem < mem:
                continue
            alloc = NodeAlloc(v.name, cpus, mem, v.free_gpus[:gpus])
            v.free_cpus -= cpus
            v.free_mem -= mem
            v.free_gpus = v.free_gpus[gpus:]
            v.job_count += 1
            end = NOW + rng.randint(60, 86_400) if rng.random() < 0.9 else INFINITE_TIME
            running.append(RunningView(job_id=job_id, end_time=end, alloc=[alloc]))
            job_id += 1
    partitions = {
        "gpu": Partition(name="gpu", nodes=gpu_names, priority_tier=1),
        "cpu": Partition(name="cpu", nodes=cpu_names, priority_tier=1),
        "all": Partition(name="all", nodes=gpu_names + cpu_names, priority_tier=0),
    }
    shapes: list[dict[str, object]] = [
        {"partition": "gpu", "gpus_per_node": 1, "cpus_per_task": 8},
        {"partition": "gpu", "gpus_per_node": 2, "cpus_per_task": 16},
        {"partition": "gpu", "gpus_per_node": 4, "cpus_per_task": 16, "mem_per_node": 128_000},
        {"partition": "gpu", "gpus_per_node": 8, "cpus_per_task": 32},
        {"partition": "gpu", "num_nodes": 2, "num_tasks": 16, "ntasks_per_node": 8,
         "gpus_per_task": 1},
        {"partition": "gpu", "num_nodes": 4, "exclusive": True, "num_tasks": 4},
        {"partition": "gpu", "gpus": 3},
        {"partition": "cpu", "cpus_per_task": 1},
        {"partition": "cpu", "cpus_per_task": 4, "num_tasks": 4},
        {"partition": "cpu", "num_nodes": 2, "num_tasks": 64},
        {"partition": "cpu", "cpus_per_task": 32, "mem_per_cpu": 2000},
        {"partition": "all", "cpus_per_task": 2},
    ]
    pending: list[PendingView] = []
    for _ in range(n_jobs):
        shape = rng.choice(shapes)
        pending.append(PendingView(
            job_id=job_id, priority=rng.randint(1, 10_000),
            submit_time=NOW - rng.randint(0, 86_400), user=f"u{rng.randint(1, 50)}",
            time_limit=rng.choice([600, 3600, 4 * 3600, 86_400, -1]),
            **shape,  # type: ignore[arg-type]
        ))
        job_id += 1
    return Snapshot(now=NOW, nodes=nodes, partitions=partitions, running=running,
                    pending=pending, def_mem_per_cpu=1024)


def median_pass(snap: Snapshot, runs: int) -> tuple[float, int, int, int]:
    times = []
    dec = schedule(snap)  # warm-up
    for _ in range(runs):
        t0 = time.perf_counter()
        dec = schedule(snap)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), len(dec.starts), len(dec.planned), len(dec.reasons)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--nodes", type=int, default=1_000)
    args = ap.parse_args()
    full = build(args.nodes, args.jobs)
    half = build(args.nodes, args.jobs // 2)
    t_full, starts, planned, waiting = median_pass(full, args.runs)
    t_half, *_ = median_pass(half, args.runs)
    print(f"nodes={args.nodes} running={len(full.running)} pending={args.jobs}")
    print(f"schedule() median over {args.runs} runs: {t_full * 1000:.1f} ms "
          f"(started {starts}, planned {planned}, waiting {waiting})")
    print(f"pending={args.jobs // 2}: {t_half * 1000:.1f} ms; "
          f"ratio {args.jobs}/{args.jobs // 2} jobs = {t_full / t_half:.2f} (2.0 = linear)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
