"""Time a Prometheus scrape of the controller's metrics, and the agent's sampling cost.

    python bench/bench_metrics.py [--runs N] [--jobs N] [--nodes N]

Scrape: 1,000 nodes × 8 GPUs, 10,000 jobs (5,000 running with GPUs, 5,000 pending with
typed reasons; 10,100 from the second scrape on), every node's GPUs sampled
(controller.usage) — each of the five routes (`/metrics/nodes`, `jobs`, `partitions`,
`scheduler`, `jobs-users-accts`), Corral's `/metrics/gpus` and all of them at once (the
combined `/metrics`, 3.6 MB), rendered as the route renders them
(controller.metrics.Metrics.render).  Each is timed twice: after what changes between two
scrapes (every node's GPU sample and free memory, 100 jobs come and 100 go: `churn`), and
again with nothing changed (the bytes kept from the scrape before).  Target: under 20 ms
per route, the combined one included, on the project's slow 2-core machine.  Wall-clock
medians, and the scraping thread's CPU time (what a busy machine's other work inflates
less); the machine's load average is printed beside them (it is shared: rerun, and compare
medians taken at like loads).

Sampling: what the agent spends per interval (agent.usage.UsageSampler.sample) on a node
running 8 steps: reading their cgroups (a fake cgroup v2 tree in a temporary directory,
each step holding one live process: this one) and 8 simulated GPUs.  NVML's own cost, on
an H100, was 0.02 ms per sample of one GPU (bench/nvml_check.py).

Prints medians.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from corral.agent import gpu  # noqa: E402
from corral.agent.usage import UsageSampler  # noqa: E402
from corral.controller.harness import FakeClock, harness_controller  # noqa: E402
from corral.controller.metrics import Metrics  # noqa: E402
from corral.controller.metrics_gpus import full_text  # noqa: E402
from corral.controller.usage import UsageBook  # noqa: E402
from corral.model.config import ClusterConfig  # noqa: E402
from corral.model.job import Job, JobState, NodeAlloc, Step  # noqa: E402
from corral.model.node import Node, Partition  # noqa: E402
from corral.model.reasons import PendingReason, ReasonCode  # noqa: E402
from corral.store.memory import MemoryStore  # noqa: E402

NOW = 1_700_000_000.0


def build(n_nodes: int, n_jobs: int, seed: int = 1) -> Metrics:
    rng = random.Random(seed)
    names = [f"gpu{i:04d}" for i in range(n_nodes)]
    config = ClusterConfig()
    config.nodes = [Node(name=n, cpus=64, real_memory=512_000, gpus=8, partitions=["gpu"])
                    for n in names]
    config.partitions = [Partition(name="gpu", nodes=list(names), default=True),
                         Partition(name="cpu", nodes=list(names[: n_nodes // 4]))]
    ctl = harness_controller(config, MemoryStore(), FakeClock(NOW))
    for n in ctl.nodes.values():
        n.responding = n.registered = True
    book = UsageBook(ctl)
    running = n_jobs // 2
    reasons = list(ReasonCode)
    for jid in range(1, n_jobs + 1):
        user = f"u{rng.randint(1, 500)}"
        account = f"a{int(user[1:]) % 50}"
        if jid <= running:
            node = names[(jid - 1) % n_nodes]
            gpus = ctl.nodes[node].free_gpu_ids[:1]
            job = Job(job_id=jid, name="r", user=user, uid=1001, gid=1001, account=account,
                      partition="gpu", state=JobState.RUNNING, submit_time=NOW - 60,
                      start_time=NOW - 30, alloc=[NodeAlloc(node, 4, 4096, gpus)],
                      nodes=[node], batch_host=node,
                      steps=[Step("batch", "batch", start_time=NOW - 30)])
            ctl.table.load(job)
            ctl.cluster.charge(job)
        else:
            job = Job(job_id=jid, name="p", user=user, uid=1001, gid=1001, account=account,
                      partition="gpu", state=JobState.PENDING, submit_time=NOW - 60)
            ctl.table.load(job)
            ctl.pending_reasons[jid] = PendingReason(rng.choice(reasons))
    for name in names:
        samples = [{"index": i, "util": float(rng.randint(0, 100)), "memory_used": 1 << 30,
                    "memory_total": 80 << 30, "power_w": 300.0, "processes": [{"pid": 1}]}
                   for i in range(8)]
        book.agent_usage(NOW, samples, [], [name])
    return Metrics(ctl, book)  # as in the controller: made once the jobs are recovered


LISTENER_TIMES: list[float] = []  # what the metrics spend on each node's GPU sample
CHURNED: list[Job] = []  # the jobs the last churn submitted


def churn(metrics: Metrics, rng: random.Random, step: int) -> None:
    """What changes between two scrapes 15-30 s apart: every node's GPU sample and free
    memory (heartbeats), every running job's GPU use, 100 new jobs (their submission
    events), and the 100 of the churn before cancelled and gone from memory (MinJobAge): the
    cluster keeps its size from one scrape to the next.  Each node's sample is put in the
    usage book as `UsageBook.agent_usage` leaves it, the use of the jobs on the node summed
    (the book's own cost, O(running jobs) per sample, is not the metrics'), then its
    listeners told, as agent_usage does: the metrics write the node's and its jobs' lines
    then (timed apart, in LISTENER_TIMES)."""
    ctl, book = metrics.ctl, metrics.book
    on_node: dict[str, list[dict[str, tuple[float, float]]]] = {}
    for per_node in book.job_gpu.values():
        for node in per_node:
            on_node.setdefault(node, []).append(per_node)
    for n in ctl.nodes.values():
        n.free_mem = 400_000 + rng.randint(0, 1000)
        samples = [{"index": i, "util": float(rng.randint(0, 100)), "memory_used": 1 << 30,
                    "memory_total": 80 << 30, "power_w": 300.0, "processes": [{"pid": 1}]}
                   for i in range(8)]
        book.gpus[n.name] = (NOW + step, samples)
        for per_node in on_node.get(n.name, ()):
            per_node[n.name] = (float(rng.randint(0, 100)), 1 << 30)
        t = time.perf_counter()
        for listener in book.sample_listeners:  # as agent_usage does: the metrics' share
            listener(n.name)
        LISTENER_TIMES.append(time.perf_counter() - t)
    for job in CHURNED:
        ctl.table.transition(job, JobState.CANCELLED, NOW + step)
        ctl.table.forget(job.job_id)
    CHURNED.clear()
    base = max(ctl.jobs) + 1
    for jid in range(base, base + 100):
        user = f"u{rng.randint(1, 500)}"
        job = Job(job_id=jid, name="p", user=user, uid=1001, gid=1001,
                  account=f"a{int(user[1:]) % 50}", partition="gpu", submit_time=NOW + step)
        ctl.table.transition(job, JobState.PENDING, NOW + step)
        CHURNED.append(job)


def bench_scrape(runs: int, n_jobs: int, n_nodes: int) -> None:
    t = time.perf_counter()
    metrics = build(n_nodes, n_jobs)
    rng = random.Random(2)
    print(f"cluster: {n_nodes} nodes x 8 GPUs, {n_jobs} jobs "
          f"(built in {time.perf_counter() - t:.1f} s); load average {_load()}")
    print("  route                       after a change   nothing changed     "
          "CPU: after a change / nothing changed")
    step = 0
    combined = (0.0, 0.0)
    for section in [*Metrics.SECTIONS, None]:
        changed, same, size = [], [], 0
        cpu_changed, cpu_same = [], []
        for _ in range(runs):
            step += 1
            churn(metrics, rng, step)
            t, c = time.perf_counter(), time.thread_time()
            size = len(metrics.render(section))
            changed.append(time.perf_counter() - t)
            cpu_changed.append(time.thread_time() - c)
            t, c = time.perf_counter(), time.thread_time()
            metrics.render(section)
            same.append(time.perf_counter() - t)
            cpu_same.append(time.thread_time() - c)
        if section is None:
            combined = (statistics.median(changed), statistics.median(same))
        print(f"  /metrics/{section or '(all)':<18} median {statistics.median(changed) * 1e3:7.2f} ms"
              f"   {statistics.median(same) * 1e3:7.2f} ms  ({size // 1024:>4} KiB)"
              f"  {statistics.median(cpu_changed) * 1e3:7.2f} ms / "
              f"{statistics.median(cpu_same) * 1e3:.2f} ms")
    print(f"  at each node's GPU sample the metrics spend a median "
          f"{statistics.median(LISTENER_TIMES) * 1e6:.0f} µs (its and its jobs' lines written then)")
    same = metrics.render("gpus") == full_text(metrics.ctl, metrics.book)
    print(f"  /metrics/gpus kept text equals a full rendering: {same}")
    print(f"  combined /metrics ({size / 1e6:.1f} MB): median {combined[0] * 1e3:.2f} ms after a "
          f"change, {combined[1] * 1e3:.2f} ms with nothing changed; load average {_load()}")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def bench_sampling(runs: int, steps: int = 8) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "cgroup.controllers").write_text("memory cpu io\n")
        for s in range(steps):
            d = root / "corral" / "c1" / f"job_{s + 1}" / "step_batch"
            d.mkdir(parents=True)
            (d / "cgroup.procs").write_text(f"{os.getpid()}\n")
            (d / "cpu.stat").write_text("usage_usec 5\nuser_usec 3\nsystem_usec 2\n")
            (d / "memory.stat").write_text("anon 1048576\nfile 0\n")
            (d / "io.stat").write_text("8:0 rbytes=1 wbytes=2\n")
        sim = root / "gpus.json"
        gpu.write_simulated(str(sim), [{"index": i, "util": 50.0} for i in range(8)])
        sampler = UsageSampler(str(root), "c1", gpu.SimulatedBackend(str(sim)))
        wall, cpu = [], []
        for _ in range(runs):
            t, c = time.perf_counter(), time.process_time()
            sampler.sample(default=0.01)  # every step due at each call
            wall.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        print(f"agent sampling, {steps} steps + 8 GPUs per interval: median "
              f"{statistics.median(wall) * 1e3:.2f} ms wall, {statistics.median(cpu) * 1e3:.2f} ms CPU"
              f" (at the default 30 s: {statistics.median(cpu) / 30 * 100:.4f}% of a core)")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--nodes", type=int, default=1_000)
    args = ap.parse_args()
    bench_scrape(args.runs, args.jobs, args.nodes)
    bench_sampling(args.runs * 10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
