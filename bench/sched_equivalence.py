#!/usr/bin/env python3
"""Record what the scheduler decides, to check that a change to `sched/` decides the same.

    bench/sched_equivalence.py record DIR   # before the change
    bench/sched_equivalence.py check DIR    # after it: exits 1 and names the first difference

It records, one line per fact, in DIR:
- gpu.txt: `corral sim` on a generated 2,000-job GPU trace (64 nodes x 8 GPUs, load 1):
  every start (job id, virtual time, the nodes with their CPUs, memory and GPU indices);
- swf.txt: the same for the first 3,000 jobs of the NASA iPSC SWF trace;
- pass-*.txt: bench_sched.py's full pass (a smaller cluster, with policy, without, with
  --preempt): every start, reason, priority, plan, preemption and dependency text.
The recorded output is the reference of one run on one machine, not a committed result.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

SWF = Path(os.environ.get("CORRAL_SWF_TRACE",
                          ROOT.parent / "shared" / "traces" / "NASA-iPSC-1993-3.1-cln.swf.gz"))


def sim_starts(trace: str) -> list[str]:
    from corral.controller.jobs import JobEvent, JobEventKind
    from corral.model.config import parse_config
    from corral.sim.engine import EPOCH, Simulator
    from corral.sim.generate import cpu_cluster_conf, gpu_cluster_conf, gpu_jobs
    from corral.sim.trace import first_jobs, read_trace

    if trace == "gpu":
        jobs = gpu_jobs(2000, nodes=64, gpus_per_node=8, load=1.0, seed=1)
        text = gpu_cluster_conf(64, 8)
    else:
        jobs, header = read_trace(SWF)
        procs = header.max_procs or max((j.cpus for j in jobs), default=1)
        nodes = header.max_nodes or procs
        text = cpu_cluster_conf(nodes, max(1, procs // nodes))
        jobs = first_jobs(jobs, 3000)
    sim = Simulator(parse_config(text), jobs)
    lines: list[str] = []
    plain_event = sim._event

    def seen(ev: Any) -> None:
        if ev.kind is JobEventKind.STARTED:
            where = " ".join(map(repr, ev.job.alloc))
            lines.append(f"{ev.job.job_id} {ev.time - EPOCH:.3f} {where}")
        plain_event(ev)

    # (the engine dispatches effects by type from a table made when it starts)
    sim._handlers[JobEvent] = seen
    result = sim.run()
    lines.append(f"passes {result.passes}")
    return lines


def pass_facts(policy: bool, preempt: bool) -> list[str]:
    import bench_sched

    ctl = bench_sched.build(200, 2000, 1000, seed=1, policy=policy, preempt=preempt)
    _, dec = bench_sched.one_pass(ctl)
    assert dec is not None
    out = [f"start {s.job_id} {s.array_task_id} {s.partition} "
           + " ".join(map(repr, s.alloc))
           for s in dec.starts]
    out += [f"reason {k} {r!r} {r.text()}" for k, r in sorted(dec.reasons.items())]
    out += [f"prio {k} {v}" for k, v in sorted(dec.priorities.items())]
    out += [f"plan {k} {v}" for k, v in sorted(dec.planned.items())]
    out += [f"eligible {k}" for k in dec.became_eligible]
    out += [f"dep {k} {v}" for k, v in sorted(dec.dependency_texts.items())]
    out += [f"preempt {p.job_id} {p.victims} {p.alloc}" for p in dec.preemptions]
    return out


CASES: dict[str, Callable[[], list[str]]] = {
    "pass-policy": lambda: pass_facts(True, False),
    "pass-nopolicy": lambda: pass_facts(False, False),
    "pass-preempt": lambda: pass_facts(True, True),
    "gpu": lambda: sim_starts("gpu"),
    "swf": lambda: sim_starts("swf"),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["record", "check"])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--only", help="comma-separated cases: " + ", ".join(CASES))
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    names = args.only.split(",") if args.only else list(CASES)
    bad = 0
    for name in names:
        lines = CASES[name]()
        path = args.dir / f"{name}.txt"
        if args.mode == "record":
            path.write_text("\n".join(lines) + "\n")
            print(f"{name}: recorded {len(lines)} lines")
            continue
        want = path.read_text().splitlines()
        if want == lines:
            print(f"{name}: identical ({len(lines)} lines)")
            continue
        bad += 1
        diff = list(difflib.unified_diff(want, lines, "recorded", "now", lineterm="", n=1))
        print(f"{name}: DIFFERENT\n" + "\n".join(diff[:20]))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
