"""The step supervisor's start cost: how long `spawn_step` takes to hand a batch step to its
own supervisor process (the agent waits for this on every batch start).

    python bench/bench_stepd.py [--runs N]

Target: under 50 ms per spawn, median (it was a timed unit test until it failed CI on a
machine running 2x slower than usual; speed belongs here, not in assertions).
"""

from __future__ import annotations

import json
import os
import pwd
import statistics
import sys
import tempfile
import time

from corral.agent import stepd


def make_step(base: str, n: int) -> str:
    job_dir = os.path.join(base, f"job{n}")
    os.mkdir(job_dir)
    script = os.path.join(job_dir, "script.sh")
    with open(script, "w") as f:
        f.write("#!/bin/sh\ntrue\n")
    os.chmod(script, 0o700)
    pw = pwd.getpwuid(os.getuid())
    launch = {
        "job_id": 800000 + n, "step": "batch", "uid": os.getuid(), "gid": os.getgid(),
        "user": pw.pw_name, "home": pw.pw_dir, "script": script, "argv": [],
        "work_dir": job_dir, "stdout": os.path.join(job_dir, "out"),
        "stderr": os.path.join(job_dir, "err"), "stdin": None, "open_mode": "truncate",
        "env": {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": pw.pw_dir},
        "time_limit": -1, "kill_wait": 2, "signal": None, "cpus": None, "mem_mb": None,
        "notify_socket": None, "cgroup_root": None,
    }
    with open(os.path.join(job_dir, "launch.json"), "w") as f:
        json.dump(launch, f)
    return job_dir


def main() -> None:
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 50
    with tempfile.TemporaryDirectory() as base:
        times = []
        dirs = []
        for n in range(runs):
            d = make_step(base, n)
            t0 = time.perf_counter()
            stepd.spawn_step(d)
            times.append(time.perf_counter() - t0)
            dirs.append(d)
        deadline = time.monotonic() + 60
        while any(stepd.read_status(d) is None for d in dirs) and time.monotonic() < deadline:
            time.sleep(0.05)
    print(f"spawn_step, median of {runs}: {1000 * statistics.median(times):.1f} ms "
          f"(p90 {1000 * sorted(times)[int(0.9 * runs)]:.1f} ms)   target < 50 ms")


if __name__ == "__main__":
    main()
