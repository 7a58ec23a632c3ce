"""seff JOBID: a job's CPU and memory efficiency (the lines of Slurm's contributed seff),
plus Corral's GPU lines where the job had GPUs.

CPU used is the sum of the job's steps' CPU time (sacct TotalCPU); memory used is the largest
step's resident memory summed over its nodes (sacct MaxRSS); GPU figures are the mean
utilisation and the most memory in use on the job's GPUs, as the agents sampled them.
"""

from __future__ import annotations

import sys

from corral.cli import client
from corral.model.usage import StepUsage, job_cpu

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROG = "seff"
USAGE = "Usage: seff [Options] <Jobid>\n       Options:\n       -h    Help menu\n" \
        "       -v    Version\n       -d    Debug mode: display raw Slurm data\n"


def time2str(seconds: float) -> str:
    secs = int(round(seconds))
    days, rem = divmod(secs, 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    return f"{days}-{h:02d}:{m:02d}:{s:02d}" if days else f"{h:02d}:{m:02d}:{s:02d}"


def kbytes2str(kib: float) -> str:
    units = "KMGTPE"
    i = 0
    while kib >= 1024 and i < len(units) - 1:
        kib /= 1024
        i += 1
    return f"{kib:.2f} {units[i]}B"


def report(job: dict[str, Any], cluster: str, now: float) -> str:
    state = str(job.get("state", ""))
    ncpus = int(job.get("alloc_cpus") or 0)
    nodes = job.get("nodes") or []
    nnodes = max(1, len(nodes))
    start, end = job.get("start_time"), job.get("end_time")
    wall = max(0.0, (end or now) - start) if start else 0.0
    lines = [f"Job ID: {job['job_id']}", f"Cluster: {cluster}",
             f"User/Group: {job.get('user', '')}/{job.get('group', '')}"]
    finished = state not in ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING")
    lines.append(f"State: {state} (exit code {job.get('exit_code', 0)})" if finished
                 else f"State: {state}")
    if nnodes == 1:
        lines.append(f"Cores: {ncpus}")
    else:
        lines += [f"Nodes: {nnodes}", f"Cores per node: {ncpus // nnodes}"]
    if state == "PENDING":
        lines.append("Efficiency not available for jobs in the PENDING state.")
        return "\n".join(lines) + "\n"
    steps = job.get("steps") or []
    cpu = sum(job_cpu(steps) or (0.0, 0.0))
    core_wall = wall * ncpus
    eff = cpu / core_wall * 100 if core_wall else 0.0
    lines += [f"CPU Utilized: {time2str(cpu)}",
              f"CPU Efficiency: {eff:.2f}% of {time2str(core_wall)} core-walltime",
              f"Job Wall-clock time: {time2str(wall)}"]
    mem_bytes = max((sum(float(f.get("rss_max", 0)) for f in StepUsage(s.get("usage")).nodes.values())
                     for s in steps), default=0.0)
    lines.append(f"Memory Utilized: {kbytes2str(mem_bytes / 1024)}" if mem_bytes
                 else "Memory Utilized: 0.00 MB (estimated maximum)")
    alloc_mb = float(job.get("alloc_mem") or 0)
    if alloc_mb:
        per = f" ({kbytes2str(alloc_mb * 1024 / nnodes)}/node)" if nnodes > 1 else ""
        lines.append(f"Memory Efficiency: {mem_bytes / (alloc_mb * 1048576) * 100:.2f}% of "
                     f"{kbytes2str(alloc_mb * 1024)}{per}")
    gpus = int(job.get("alloc_gpus") or 0)
    if gpus:
        figs = [f for s in steps for f in StepUsage(s.get("usage")).nodes.values()
                if "gpuutil_ave" in f]
        if figs:
            util = max(float(f["gpuutil_ave"]) for f in figs) / gpus
            gmem = max(float(f.get("gpumem_max", 0)) for f in figs)
            lines += [f"GPUs: {gpus}", f"GPU Utilization: {util:.2f}% (mean per GPU)",
                      f"GPU Memory Utilized: {kbytes2str(gmem / 1024)}"]
        else:
            lines += [f"GPUs: {gpus}", "GPU Utilization: not sampled"]
    if not finished:
        lines.append("WARNING: Efficiency statistics may be misleading for RUNNING jobs.")
    return "\n".join(lines) + "\n"


def _main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("-")]
    if any(a in ("-h", "--help") for a in argv):
        sys.stdout.write(USAGE)
        return 0
    if any(a in ("-v", "--version") for a in argv):
        sys.stdout.write("seff Version: 2.1\n")
        return 0
    if len(args) != 1:
        sys.stderr.write(USAGE)
        return 1
    head = args[0].split(".")[0]
    if not head.replace("_", "").isdigit():
        sys.stderr.write(f"{PROG}: error: Invalid job id: {args[0]}\n")
        return 1
    try:
        ans = client.get("/v1/accounting", ids=head)
    except client.ApiError as e:
        if e.status != 404:
            raise
        ans = {"jobs": []}
    jobs = [j for j in ans.get("jobs") or []
            if str(j.get("display_id")) == head or str(j.get("job_id")) == head]
    if not jobs:
        sys.stderr.write("Job not found.\n")
        return 2
    cfg = client.get("/v1/config")
    sys.stdout.write(report(jobs[0], str(cfg.get("cluster_name") or ""),
                            float(ans.get("now") or 0)))
    return 0


def main(argv: list[str] | None = None) -> int:
    return client.run_cli(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
