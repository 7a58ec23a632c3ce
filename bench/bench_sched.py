"""Time one full scheduling pass of the controller, as it runs in production.

    python bench/bench_sched.py [--runs N] [--jobs N] [--nodes N] [--running N] [--curve]
                                [--no-policy] [--preempt] [--freeze-gc]

One pass = build the snapshot from the controller's state, eligibility (holds, begin
times, dependencies through the per-pass index), priority/multifactor for every pending
job, node selection (select/cons_tres), backfill (sched/backfill), and applying the
decision (splitting array tasks, charging nodes, launch messages to the agents, reasons,
priorities, planned starts).  It runs on the real `Controller` (in-process harness,
in-memory store; the store commit happens on the writer thread in production and is not
counted).

The cluster: 1,000 nodes × 8 GPUs × 64 CPUs, 5,000 running jobs (the cluster nearly full,
ends spread over a day), 10,000 pending jobs of mixed shapes, half of them with
dependencies: on other pending jobs, on running jobs, and on jobs long finished (known
only through the controller's compact record of them).  Prints the median over several
runs, then the curve from 1,000 to 100,000 pending jobs and its growth ratios.  The
controller pauses the cyclic collector during a pass: the young collection of what the
pass left is taken right after it and printed apart ("then the collector").
Policy (on unless --no-policy): AccountingStorageEnforce=associations,limits and
PriorityWeightFairshare, 500 users in 50 accounts (GrpTRES on every account, MaxJobs
and GrpTRES on users), decayed usage on every association: every candidate goes through
the limits gate and every job gets its fairshare factor.
With --preempt: PreemptType=preempt/qos, PreemptMode=REQUEUE, every tenth pending job in
a QoS that may preempt the running jobs' (`normal`): each of those that does not fit goes
through backfill's preemption check (sched/preempt.py) over the nodes of its partition.
Budget: < 1 s for the 10,000-job pass on the project's slow 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from corral.controller.accounts import Caller  # noqa: E402
from corral.controller.core import passes  # noqa: E402
from corral.controller.harness import FakeClock, harness_controller  # noqa: E402
from corral.controller.state import Controller  # noqa: E402
from corral.model.assoc import Qos  # noqa: E402
from corral.model.config import ClusterConfig  # noqa: E402
from corral.model.job import Job, JobState, NodeAlloc  # noqa: E402
from corral.model.node import Node, Partition  # noqa: E402
from corral.sched.backfill import BackfillMemo  # noqa: E402
from corral.sched.deps import GoneRecord  # noqa: E402
from corral.sched.fairshare import Usage  # noqa: E402
from corral.sched.pipeline import ClusterSnapshot, Decision  # noqa: E402
from corral.store.base import JobPayload  # noqa: E402
from corral.store.memory import MemoryStore  # noqa: E402

NOW = 1_700_000_000.0
SHAPES: list[dict[str, object]] = [
    {"gpus_per_node": 1, "cpus_per_task": 8},
    {"gpus_per_node": 2, "cpus_per_task": 16},
    {"gpus_per_node": 4, "cpus_per_task": 16, "mem_per_node": 128_000},
    {"gpus_per_node": 8, "cpus_per_task": 32},
    {"num_nodes": 2, "num_tasks": 16, "ntasks_per_node": 8, "gpus_per_task": 1},
    {"num_nodes": 4, "exclusive": True, "num_tasks": 4},
    {"gpus": 3},
    {"cpus_per_task": 1},
    {"cpus_per_task": 4, "num_tasks": 4},
    {"partition": "cpu", "cpus_per_task": 2},
]


N_USERS, N_ACCOUNTS = 500, 50
ROOT = Caller("root", True)


def policy_setup(ctl: Controller, rng: random.Random) -> None:
    """500 users in 50 accounts with limits, and decayed usage for each of them."""
    acc = ctl.accounts

    def mgr(op: str, entity: str, names: list[str], where: dict[str, str]) -> None:
        acc.execute(ROOT, {"op": op, "entity": entity, "names": names, "where": where,
                           "set": {}, "options": {}})

    for a in range(N_ACCOUNTS):
        mgr("add", "account", [f"a{a}"], {"GrpTRES": f"gres/gpu={rng.choice([64, 128, 256])}"})
    for a in range(N_ACCOUNTS):
        users = [f"u{k}" for k in range(1, N_USERS + 1) if k % N_ACCOUNTS == a]
        mgr("add", "user", users, {"account": f"a{a}", "MaxJobs": "40",
                                   "GrpTRES": "gres/gpu=32"})
    for assoc in acc.db.assocs.values():
        if assoc.user:
            ctl.usage.assoc[assoc.id] = Usage(rng.random() * 1e7, {"cpu": rng.random() * 1e7})


def account_of(user: str) -> str:
    return f"a{int(user[1:]) % N_ACCOUNTS}"


def build(n_nodes: int, n_pending: int, n_running: int, seed: int = 1,
          policy: bool = True, preempt: bool = False) -> Controller:
    rng = random.Random(seed)
    names = [f"gpu{i:04d}" for i in range(n_nodes)]
    config = ClusterConfig()
    config.options.update({"DefMemPerCPU": "1024", "MinJobAge": "300"})
    if policy:
        config.options.update({"AccountingStorageEnforce": "associations,limits",
                               "PriorityWeightFairshare": "10000"})
    config.nodes = [Node(name=n, cpus=64, real_memory=512_000, gpus=8, partitions=["gpu", "cpu"])
                    for n in names]
    config.partitions = [Partition(name="gpu", nodes=list(names), default=True),
                         Partition(name="cpu", nodes=list(names[: n_nodes // 4]))]
    if preempt:
        config.options.update({"PreemptType": "preempt/qos", "PreemptMode": "REQUEUE"})
    store = MemoryStore()
    ctl = harness_controller(config, store, FakeClock(NOW))
    if policy:
        policy_setup(ctl, rng)
    if preempt:
        ctl.accounts.db.qos.setdefault("normal", Qos("normal", 1))
        ctl.accounts.db.qos["deadline"] = Qos("deadline", 2, preempt=("normal",))
    for n in ctl.nodes.values():
        n.responding = n.registered = True
        n.last_contact = NOW
        ctl.agent_senders[n.name] = lambda msg: None
    job_id = 1
    # long-finished jobs: only their compact final state is kept (dependencies name them)
    finished_ids = []
    for _ in range(2000):
        ctl.gone.add(GoneRecord(job_id, None, None, rng.choice(["COMPLETED", "FAILED"]),
                                0, NOW - 86_400))
        finished_ids.append(job_id)
        job_id += 1
    # running jobs fill the cluster: 5 per node, 5% of the nodes with room left
    running_ids = []
    per_node = max(1, n_running // n_nodes)
    for i, name in enumerate(names):
        roomy = i % 20 == 0
        for k in range(per_node):
            gpus = 1 if roomy else (2 if k < 4 else 0)
            cpus = 4 if roomy else (12 if k < 4 else 8)
            node = ctl.nodes[name]
            gpu_ids = node.free_gpu_ids[:gpus]
            ru = f"u{rng.randint(1, N_USERS)}"
            job = Job(job_id=job_id, name=f"r{job_id}", user=ru, uid=1001, gid=1001,
                      account=account_of(ru), partition="gpu", state=JobState.RUNNING, submit_time=NOW - 3600,
                      start_time=NOW - rng.randint(60, 3600),
                      time_limit=rng.choice([3600, 4 * 3600, 86_400]),
                      alloc=[NodeAlloc(name, cpus, cpus * 1024, gpu_ids)], nodes=[name],
                      batch_host=name)
            ctl.table.load(job)
            ctl.cluster.charge(job)
            running_ids.append(job_id)
            job_id += 1
    payload = JobPayload("#!/bin/sh\ntrue\n", {"PATH": "/usr/bin:/bin"})
    first_pending = job_id
    for i in range(n_pending):
        shape = dict(rng.choice(SHAPES))
        shape.setdefault("partition", "gpu")
        dep = None
        if i % 2 == 0:
            r = rng.random()
            if r < 0.4 and job_id > first_pending:
                dep = f"afterok:{rng.randrange(first_pending, job_id)}"
            elif r < 0.8:
                dep = f"afterany:{rng.choice(running_ids)}"
            else:
                dep = f"afterok:{rng.choice(finished_ids)}"
        pu = f"u{rng.randint(1, N_USERS)}"
        job = Job(job_id=job_id, name=f"p{job_id}", user=pu, account=account_of(pu), uid=2000,
                  gid=2000, submit_time=NOW - rng.randint(0, 86_400),
                  eligible_time=None if dep else NOW - rng.randint(0, 86_400),
                  time_limit=rng.choice([600, 3600, 4 * 3600, 86_400]), dependency=dep,
                  work_dir="/tmp", qos="deadline" if preempt and i % 10 == 0 else "normal",
                  **shape)  # type: ignore[arg-type]
        ctl.table.load(job)
        store.payloads[job_id] = payload
        job_id += 1
    ctl.next_id = job_id
    return ctl


CPU_TIMES: list[float] = []  # the passes' CPU time (a busy machine inflates wall time)
# CPU seconds per part of each pass: the controller's snapshot, the pipeline's stages
# (Decision.stage_seconds, by an injected timer) and the rest (applying the decision)
PARTS: list[dict[str, float]] = []


def _timed_pipeline() -> None:
    """The controller's run_pass with the pipeline's stage timer, and its snapshot timed."""
    if getattr(passes.run_pass, "timed", False):
        return
    plain_run, plain_snapshot = passes.run_pass, passes.Passes.snapshot

    def run_pass(snap: ClusterSnapshot, timer: object = None,
                 memo: BackfillMemo | None = None) -> Decision:
        # the shell's wall-clock timer is replaced: stages are timed in CPU seconds here
        c0 = time.process_time()
        dec = plain_run(snap, timer=time.process_time, memo=memo)
        PARTS[-1]["pipeline"] = time.process_time() - c0
        PARTS[-1].update(dec.stage_seconds)
        return dec

    def snapshot(self: passes.Passes, now: float) -> ClusterSnapshot:
        c0 = time.process_time()
        snap = plain_snapshot(self, now)
        PARTS[-1]["snapshot"] = time.process_time() - c0
        return snap

    run_pass.timed = True  # type: ignore[attr-defined]
    passes.run_pass = run_pass  # type: ignore[assignment]
    passes.Passes.snapshot = snapshot  # type: ignore[method-assign]


def one_pass(ctl: Controller) -> tuple[float, Decision | None]:
    _timed_pipeline()

    async def run() -> tuple[float, Decision | None]:
        PARTS.append({})
        t0, c0 = time.perf_counter(), time.process_time()
        dec = ctl.schedule_pass(NOW)
        elapsed = time.perf_counter() - t0
        CPU_TIMES.append(time.process_time() - c0)
        part = PARTS[-1]
        part["apply and the rest"] = CPU_TIMES[-1] - part.get("snapshot", 0.0) \
            - part.get("pipeline", 0.0)
        # the young collection of what the pass left (the controller pauses the collector
        # during a pass: its first collection after it, taken here to be counted apart)
        c0 = time.process_time()
        if gc.isenabled():
            gc.collect(0)
        part["collector after"] = time.process_time() - c0
        await ctl.durable()
        return elapsed, dec

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(run())
    finally:
        loop.close()


def median_pass(n_nodes: int, n_pending: int, n_running: int, runs: int,
                policy: bool = True, preempt: bool = False,
                freeze_gc: bool = False) -> tuple[float, Decision]:
    times = []
    dec: Decision | None = None
    for _ in range(runs):
        gc.unfreeze()
        ctl = build(n_nodes, n_pending, n_running, seed=1, policy=policy,
                    preempt=preempt)  # same state each run
        if freeze_gc:  # the built state out of the collector's reach (gc.freeze)
            gc.collect()
            gc.freeze()
        elapsed, dec = one_pass(ctl)
        times.append(elapsed)
    assert dec is not None
    return statistics.median(times), dec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--nodes", type=int, default=1_000)
    ap.add_argument("--running", type=int, default=5_000)
    ap.add_argument("--curve", action="store_true", help="also time 1,000 to 100,000 pending jobs")
    ap.add_argument("--no-policy", action="store_true",
                    help="without accounts, limits and fairshare")
    ap.add_argument("--preempt", action="store_true",
                    help="with preempt/qos: every tenth pending job may preempt")
    ap.add_argument("--freeze-gc", action="store_true",
                    help="gc.freeze() the built state before the pass: without the full "
                         "collections over the controller's objects that a pass's "
                         "allocations trigger")
    args = ap.parse_args()
    policy = not args.no_policy
    t, dec = median_pass(args.nodes, args.jobs, args.running, args.runs, policy, args.preempt,
                         args.freeze_gc)
    waiting: dict[str, int] = {}
    for why in dec.reasons.values():
        waiting[why.text()] = waiting.get(why.text(), 0) + 1
    print(f"nodes={args.nodes}x8 GPUs running={args.running} pending={args.jobs} "
          f"(half with dependencies)"
          + (f"; policy: {N_USERS} users in {N_ACCOUNTS} accounts, limits enforced, "
             "fairshare" if policy else "; no policy"))
    print(f"full pass, median of {args.runs}: {t * 1000:.0f} ms wall, "
          f"{statistics.median(CPU_TIMES) * 1000:.0f} ms CPU  (started {len(dec.starts)}, "
          f"planned {len(dec.planned)}, waiting {len(dec.reasons)}: "
          + ", ".join(f"{k} {v}" for k, v in sorted(waiting.items(), key=lambda kv: -kv[1])[:5])
          + ")")
    parts = PARTS[-args.runs:]
    print("CPU by part (median ms): " + ", ".join(
        f"{k} {statistics.median(p.get(k, 0.0) for p in parts) * 1000:.0f}"
        for k in ("snapshot", "pipeline", "apply and the rest"))
        + f"; then the collector {statistics.median(p.get('collector after', 0.0) for p in parts) * 1000:.0f}")
    print("  pipeline stages (median ms): " + ", ".join(
        f"{k} {statistics.median(p.get(k, 0.0) for p in parts) * 1000:.0f}"
        for k in ("eligibility", "priority", "limits", "backfill", "preemption", "decision")))
    if args.preempt:
        print(f"preemptions: {len(dec.preemptions)} jobs placed over "
              f"{sum(len(p.victims) for p in dec.preemptions)} victims")
    if args.curve:
        print(f"{'pending':>8} {'ms':>8} {'us/job':>7} {'ratio':>6}")
        prev: tuple[int, float] | None = None
        for n in (1_000, 3_000, 10_000, 30_000, 100_000):
            tn, _ = median_pass(args.nodes, n, args.running, 3, policy, args.preempt)
            ratio = "" if prev is None else f"{(tn / prev[1]) / (n / prev[0]):.2f}"
            print(f"{n:>8} {tn * 1000:>8.0f} {tn / n * 1e6:>7.1f} {ratio:>6}")
            prev = (n, tn)
        print("ratio = (time growth) / (job growth) between rows: 1.00 = linear, < 1 sub-linear")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
