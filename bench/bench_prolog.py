"""What a Prolog costs per job start: `srun -N2 true` (a job start, a step on both nodes)
on a 2-node cluster without a Prolog, with a trivial one (PrologFlags=Alloc), and with one
run at each node's first step (no flags).

    python bench/bench_prolog.py [--runs N]

Prints the medians; the difference is the Prolog's cost (a fork+exec of the script per node
and its wait, plus the job_start message).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from _cluster import bench_cluster, median_ms  # noqa: E402

CONFIG = """\
ClusterName=bench
KillWait=2
MinJobAge=600
{extra}
NodeName=node-[1-2] CPUs=16 RealMemory=64000
PartitionName=debug Nodes=node-[1-2] Default=YES MaxTime=INFINITE State=UP
"""


def measure(extra: str, runs: int) -> list[float]:
    with bench_cluster(CONFIG.format(extra=extra)) as c:
        subprocess.run(["srun", "-N2", "true"], env=c.env, cwd=c.work, check=True)  # warm
        walls = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run(["srun", "-N2", "true"], env=c.env, cwd=c.work, check=True)
            walls.append(time.perf_counter() - t0)
        return walls


def main() -> None:
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 20
    with tempfile.TemporaryDirectory(prefix="corral-bench-prolog-") as d:
        script = os.path.join(d, "prolog.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\nexit 0\n")
        os.chmod(script, 0o755)
        base = measure("", runs)
        alloc = measure(f"Prolog={script}\nEpilog={script}\nPrologFlags=Alloc", runs)
        lazy = measure(f"Prolog={script}\nEpilog={script}", runs)
    print(f"srun -N2 true, no Prolog               {median_ms(base)}")
    print(f"srun -N2 true, Prolog+Epilog, Alloc    {median_ms(alloc)}")
    print(f"srun -N2 true, Prolog+Epilog, at step  {median_ms(lazy)}")


if __name__ == "__main__":
    main()
