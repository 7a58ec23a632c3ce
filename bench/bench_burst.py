#!/usr/bin/env python3
"""Event-loop stalls during a burst of submissions (issue 14: "a burst of 4,000 submissions:
no event-loop stall over 100 ms").

    python bench/bench_burst.py [--jobs 4000] [--clients 16] [--runs 3]

The real controller (`Controller` over the SQLite store in a temporary directory, its
writer thread, the production pass cadence on the event loop) takes `--jobs` submissions
from `--clients` concurrent callers of the submission use case (what the API's handlers
run), 64 nodes idle.  A probe task sleeps 1 ms in a loop and records how late it wakes:
the longest wake-up delay is the longest stall of the loop.  The same burst is run with
the writer encoding all job records at once (`ENCODE_CHUNK` unbounded: the previous
behaviour) for comparison.  Prints medians over the runs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from corral.controller import persist  # noqa: E402
from corral.controller.identity import Identity  # noqa: E402
from corral.controller.state import Controller  # noqa: E402
from corral.model.config import parse_config  # noqa: E402
from corral.store.sqlite import SqliteStore  # noqa: E402

CONF = """\
ClusterName=burst
NodeName=n[001-064] CPUs=64 RealMemory=512000 Gres=gpu:8
PartitionName=gpu Nodes=n[001-064] Default=YES MaxTime=UNLIMITED
"""


async def burst(jobs: int, clients: int) -> tuple[float, float, float, float]:
    with tempfile.TemporaryDirectory() as d:
        store = SqliteStore(str(Path(d) / "state.db"))
        ctl = Controller(parse_config(CONF), store)
        ctl.recover()
        ctl.agent_registered(list(ctl.nodes), lambda msg: None, {}, [])
        who = Identity(1000, 1000, "user1000", False)
        worst = 0.0
        longest_pass = 0.0
        lags: list[float] = []
        done = False

        async def probe() -> None:
            nonlocal worst, longest_pass
            while not done:
                longest_pass = max(longest_pass, ctl.last_sched_duration)
                t = time.perf_counter()
                await asyncio.sleep(0.001)
                lag = time.perf_counter() - t - 0.001
                lags.append(lag)
                worst = max(worst, lag)

        async def client(n: int) -> None:
            for _ in range(n):
                await ctl.submit(who, {"work_dir": "/tmp", "time_limit": 3600,
                                       "gpus_per_node": 8, "num_nodes": 1}, "#!/bin/sh\n",
                                 {}, [], None)

        watcher = asyncio.create_task(probe())
        t0 = time.perf_counter()
        per = jobs // clients
        await asyncio.gather(*(client(per) for _ in range(clients)))
        # let the passes and the writer finish what the burst left
        while ctl.shell.cadence.due is not None or ctl.writer._pending():
            await asyncio.sleep(0.01)
        await ctl.durable()
        elapsed = time.perf_counter() - t0
        done = True
        await watcher
        store.close()
        lags.sort()
        return (worst, lags[int(len(lags) * 0.99)] if lags else 0.0, elapsed,
                max(longest_pass, ctl.last_sched_duration))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=4000)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    chunk = persist.ENCODE_CHUNK
    for label, value in (("records encoded 256 at a time", chunk),
                         ("records encoded all at once (before)", 10**9)):
        persist.ENCODE_CHUNK = value
        runs = [asyncio.run(burst(args.jobs, args.clients)) for _ in range(args.runs)]
        worst = statistics.median(r[0] for r in runs) * 1000
        p99 = statistics.median(r[1] for r in runs) * 1000
        took = statistics.median(r[2] for r in runs)
        longest = statistics.median(r[3] for r in runs) * 1000
        print(f"{label}: {args.jobs} submissions by {args.clients} clients in {took:.2f} s "
              f"({args.jobs / took:.0f}/s); longest loop stall {worst:.0f} ms, p99 {p99:.1f} ms, "
              f"longest scheduling pass {longest:.0f} ms "
              f"(medians of {args.runs})")
    persist.ENCODE_CHUNK = chunk


if __name__ == "__main__":
    main()
