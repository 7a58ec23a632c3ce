"""Synthetic GPU workloads for tests and benchmarks: a lab mix of 1, 2, 4 and 8-GPU jobs (and
some 16-GPU ones over two nodes), Poisson arrivals scaled to an offered load, run times
from a few minutes to hours, time limits 1.2 to 5 times the run time (some jobs run into
them)."""

from __future__ import annotations

import csv
import math
import random
from pathlib import Path

from corral.sim.trace import TraceJob

SIZES = (1, 1, 1, 2, 2, 4, 4, 8, 8, 16)


def gpu_jobs(count: int, *, nodes: int = 64, gpus_per_node: int = 8, load: float = 1.0,
             seed: int = 1, mean_run: float = 3600.0, users: int = 20) -> list[TraceJob]:
    if count <= 0:
        return []
    rng = random.Random(seed)
    sizes = [rng.choice(SIZES) for _ in range(count)]
    runs = [min(mean_run * 8, rng.expovariate(1 / mean_run) + 60) for _ in range(count)]
    work = sum(g * r for g, r in zip(sizes, runs, strict=True))
    # arrivals over a span that makes the offered load `load`
    span = work / (nodes * gpus_per_node * load)
    rate = count / span
    t = 0.0
    out = []
    for g, run in zip(sizes, runs, strict=True):
        t += rng.expovariate(rate)
        ratio = rng.uniform(1.2, 5.0)
        limit = run * ratio
        if rng.random() < 0.05:  # a few underestimate and run into their limit
            limit = run * rng.uniform(0.5, 0.95)
        user = rng.randrange(users)
        out.append(TraceJob(submit=round(t, 3), run_time=round(run, 1),
                            time_limit=max(60.0, round(limit / 60) * 60),
                            cpus=4 * g, gpus=g, mem_mb=16_000 * g, user=f"u{user}",
                            account=f"lab{user % 4}", partition=""))
    return out


# Lab users' habits: (sizes they ask for, mean run time in s, how generous their limits are
# (a range of limit / run time), weight in the mix).
HABITS = (
    ((1, 1, 2), 1200.0, (3.0, 5.0), 4),  # students: short 1-2 GPU runs, round-number limits
    ((1, 2, 4), 3600.0, (1.5, 3.0), 3),  # researchers tuning models
    ((4, 8), 5400.0, (1.2, 2.0), 2),  # a group that knows its run times well
    ((8, 16, 16), 7200.0, (1.5, 4.0), 1),  # large training runs, the 16-GPU ones on 2 nodes
)


def lab_mix(count: int, *, nodes: int = 4, gpus_per_node: int = 8, load: float = 1.0,
            seed: int = 1, users: int = 12) -> list[TraceJob]:
    """A lab's GPU workload of 1, 2, 4, 8 and 16-GPU jobs: each user has a habit (the sizes
    they ask for, how long their jobs run, how generous their time limits are, 1.2 to 5
    times the run time), arrivals are Poisson scaled to the offered load `load`."""
    if count <= 0:
        return []
    rng = random.Random(seed)
    pool = [h for h in HABITS for _ in range(h[3])]  # every habit, in its weight
    rng.shuffle(pool)
    habit_of = [pool[u % len(pool)] for u in range(users)]
    picks = []
    for _ in range(count):
        u = rng.randrange(users)
        sizes, mean_run, (lo, hi), _ = habit_of[u]
        run = min(mean_run * 6, rng.expovariate(1 / mean_run) + 60)
        picks.append((u, rng.choice(sizes), run, rng.uniform(lo, hi)))
    work = sum(g * r for _, g, r, _ in picks)
    rate = count / (work / (nodes * gpus_per_node * load))
    t = 0.0
    out = []
    for u, g, run, ratio in picks:
        t += rng.expovariate(rate)
        out.append(TraceJob(submit=round(t, 3), run_time=round(run, 1),
                            time_limit=max(60.0, math.ceil(run * ratio / 60) * 60),
                            cpus=4 * g, gpus=g, mem_mb=16_000 * g, user=f"user{u:02d}",
                            account=f"lab{u % 3}", partition=""))
    return out


def write_csv(jobs: list[TraceJob], path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["submit", "run_time", "time_limit", "gpus", "cpus", "mem_mb", "user",
                    "account", "partition"])
        for j in jobs:
            w.writerow([j.submit, j.run_time, int(j.time_limit), j.gpus, j.cpus, j.mem_mb,
                        j.user, j.account, j.partition])


def gpu_cluster_conf(nodes: int = 64, gpus_per_node: int = 8, cpus: int = 64,
                     mem_mb: int = 512_000) -> str:
    """slurm.conf text of a cluster of identical GPU nodes in one partition."""
    width = max(3, len(str(nodes)))
    return (f"ClusterName=sim\n"
            f"NodeName=gpu[{1:0{width}d}-{nodes:0{width}d}] CPUs={cpus} RealMemory={mem_mb} "
            f"Gres=gpu:{gpus_per_node}\n"
            f"PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE\n")


def cpu_cluster_conf(nodes: int, cpus_per_node: int) -> str:
    """A cluster of `nodes` CPU-only nodes (an SWF trace's MaxNodes and MaxProcs)."""
    width = max(3, len(str(nodes)))
    return (f"ClusterName=sim\n"
            f"NodeName=n[{1:0{width}d}-{nodes:0{width}d}] CPUs={cpus_per_node} "
            f"RealMemory=1000000\n"
            f"PartitionName=batch Nodes=ALL Default=YES MaxTime=INFINITE\n")
