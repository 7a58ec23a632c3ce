"""Container step start on a 4-node cluster on this machine, next to a plain step.

    python bench/bench_containers.py [--runs N]

Prints medians of whole srun commands: a plain step; a step in a squashfs image in a fresh
job (the image is mounted for the job: the cold start on a node); plain steps and steps in the
same image inside a running job (its mount shared); a step from the node's image cache by
name; and the one-off `corral image import` of the same image.  Needs root and the Debian
packages of docs/CONTAINERS.md (the test image is built as tests/e2e/test_containers.py
builds it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from _cluster import bench_cluster, median_ms  # noqa: E402

from tests.e2e.test_containers import build_rootfs  # noqa: E402


def main() -> None:
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 10
    base = Path(tempfile.mkdtemp(prefix="corral-bench-img-"))
    try:
        build_rootfs(base / "rootfs")
        sqsh = base / "test.sqsh"
        subprocess.run(["mksquashfs", str(base / "rootfs"), str(sqsh), "-all-root",
                        "-noappend", "-quiet", "-no-progress"], check=True)
        layout = base / "layout"
        subprocess.run(["umoci", "init", "--layout", str(layout)], check=True)
        subprocess.run(["umoci", "new", "--image", f"{layout}:t"], check=True)
        subprocess.run(["umoci", "insert", "--image", f"{layout}:t", str(base / "rootfs"), "/"],
                       check=True, capture_output=True)
        subprocess.run(["skopeo", "copy", "--quiet", f"oci:{layout}:t",
                        f"oci-archive:{base / 'image.tar'}"], check=True)
        with bench_cluster() as c:
            def timed(*args: str) -> float:
                t0 = time.perf_counter()
                c.run(*args)
                return time.perf_counter() - t0

            image = f"--container-image={sqsh}"
            plain = [timed("srun", "-N1", "true") for _ in range(runs)]
            cold = [timed("srun", "-N1", image, "true") for _ in range(runs)]
            job = c.run("sbatch", "--parsable", "-N1", "-w", "node-1", "--wrap", "sleep 600")
            jid = job.stdout.strip()
            while "RUNNING" not in c.run("squeue", "-h", "-j", jid, "-o", "%T").stdout:
                time.sleep(0.1)
            c.run("srun", f"--jobid={jid}", image, "true")  # mounts the image for the job
            warm = [timed("srun", f"--jobid={jid}", image, "true") for _ in range(runs)]
            plain_in_job = [timed("srun", f"--jobid={jid}", "true") for _ in range(runs)]
            c.run("scancel", jid)
            t0 = time.perf_counter()
            c.run("corral", "image", "import", str(base / "image.tar"), "--name", "bench/img:1")
            imported = time.perf_counter() - t0
            cached = [timed("srun", "-N1", "--container-image=bench/img:1", "true")
                      for _ in range(runs)]
        print(f"srun -N1 true (plain step)                 {median_ms(plain)}")
        print(f"srun -N1 --container-image=X.sqsh (new job) {median_ms(cold)}")
        print(f"srun --jobid=J true (plain step in a job)  {median_ms(plain_in_job)}")
        print(f"  in a container, the image mounted already  {median_ms(warm)}")
        print(f"srun -N1 --container-image=NAME (cache)    {median_ms(cached)}")
        print(f"corral image import (once per node)         {imported * 1000:.1f} ms")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
