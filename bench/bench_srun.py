"""srun on a 4-node cluster on this machine: whole-command wall time and time to first output.

    python bench/bench_srun.py [--runs N]

Targets (issue #3): `srun -N4 -n16 true` under 300 ms; srun → first output line under 150 ms.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from _cluster import bench_cluster, median_ms  # noqa: E402


def main() -> None:
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 20
    import compileall

    compileall.compile_dir(os.path.join(os.path.dirname(__file__), "..", "src"), quiet=1)
    with bench_cluster() as c:
        walls = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run(["srun", "-N4", "-n16", "true"], env=c.env, cwd=c.work, check=True)
            walls.append(time.perf_counter() - t0)
        print(f"srun -N4 -n16 true (wall)            {median_ms(walls)}   target < 300 ms")
        firsts = []
        for _ in range(runs):
            t0 = time.perf_counter()
            p = subprocess.Popen(["srun", "-N1", "echo", "hi"], env=c.env, cwd=c.work,
                                 stdout=subprocess.PIPE)
            assert p.stdout is not None
            line = p.stdout.readline()
            firsts.append(time.perf_counter() - t0)
            p.wait()
            assert line == b"hi\n", line
        print(f"srun -> first output line            {median_ms(firsts)}   target < 150 ms")
        in_job = []
        for _ in range(runs // 2):
            t0 = time.perf_counter()
            subprocess.run(["srun", "-N2", "-l", "hostname"], env=c.env, cwd=c.work, check=True,
                           stdout=subprocess.DEVNULL)
            in_job.append(time.perf_counter() - t0)
        print(f"srun -N2 -l hostname (wall)          {median_ms(in_job)}")


if __name__ == "__main__":
    main()
