"""The SLURM_* environment of a batch step, as slurmd/slurmstepd set it."""

from __future__ import annotations

from corral.model.hostlists import compress
from corral.model.job import Job


def tasks_per_node_string(counts: list[int]) -> str:
    """Slurm's compressed form: [2,2,1] → "2(x2),1"."""
    out: list[str] = []
    i = 0
    while i < len(counts):
        j = i
        while j + 1 < len(counts) and counts[j + 1] == counts[i]:
            j += 1
        n = j - i + 1
        out.append(f"{counts[i]}(x{n})" if n > 1 else str(counts[i]))
        i = j + 1
    return ",".join(out)


def task_counts(job: Job) -> list[int]:
    """Tasks placed on each allocated node (same rule as the launcher uses)."""
    n = len(job.alloc) or 1
    if job.ntasks_per_node:
        return [job.ntasks_per_node] * n
    if job.alloc and not job.exclusive:
        # the scheduler gave each node CPUs for a whole number of tasks
        counts = [max(1, a.cpus // max(1, job.cpus_per_task)) for a in job.alloc]
        if sum(counts) == job.num_tasks:
            return counts
    base, extra = divmod(max(job.num_tasks, n), n)
    return [base + (1 if i < extra else 0) for i in range(n)]


def batch_environment(job: Job, *, cluster_name: str, submit_host: str) -> dict[str, str]:
    """Variables set for the batch script on the first node of the allocation."""
    first = job.alloc[0] if job.alloc else None
    nodelist = compress(job.nodes)
    counts = task_counts(job)
    ntasks = sum(counts) if job.ntasks_per_node else job.num_tasks
    env = {
        "SLURM_JOB_ID": str(job.job_id),
        "SLURM_JOBID": str(job.job_id),
        "SLURM_JOB_NAME": job.name,
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NODELIST": nodelist,
        "SLURM_JOB_NUM_NODES": str(len(job.nodes)),
        "SLURM_NNODES": str(len(job.nodes)),
        "SLURM_NTASKS": str(ntasks),
        "SLURM_NPROCS": str(ntasks),
        "SLURM_CPUS_ON_NODE": str(first.cpus if first else 1),
        "SLURM_JOB_CPUS_PER_NODE": tasks_per_node_string([a.cpus for a in job.alloc]),
        "SLURM_JOB_PARTITION": job.partition,
        "SLURM_SUBMIT_DIR": job.work_dir,
        "SLURM_SUBMIT_HOST": submit_host,
        "SLURM_JOB_USER": job.user,
        "SLURM_JOB_UID": str(job.uid),
        "SLURM_JOB_GID": str(job.gid),
        "SLURM_JOB_ACCOUNT": job.account,
        "SLURM_JOB_QOS": job.qos,
        "SLURM_CLUSTER_NAME": cluster_name,
        "SLURM_TASKS_PER_NODE": tasks_per_node_string(counts),
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_GTIDS": "0",
        "SLURMD_NODENAME": first.node if first else "",
        "SLURM_RESTART_COUNT": str(job.restart_count),
        "SLURM_PRIO_PROCESS": str(job.nice),
        "SLURM_TOPOLOGY_ADDR": first.node if first else "",
        "SLURM_TOPOLOGY_ADDR_PATTERN": "node",
        "SLURM_NODE_ALIASES": "(null)",
        "SLURM_JOB_START_TIME": str(int(job.start_time or 0)),
        "SLURM_JOB_END_TIME": str(int((job.start_time or 0) + job.time_limit) if job.time_limit > 0 else 0),
    }
    if job.ntasks_per_node:
        env["SLURM_NTASKS_PER_NODE"] = str(job.ntasks_per_node)
    if job.cpus_per_task > 1 or "SLURM_CPUS_PER_TASK" in env:
        env["SLURM_CPUS_PER_TASK"] = str(job.cpus_per_task)
    if job.mem_per_node is not None:
        env["SLURM_MEM_PER_NODE"] = str(first.mem_mb if first and job.mem_per_node == 0 else job.mem_per_node)
    elif job.mem_per_cpu is not None:
        env["SLURM_MEM_PER_CPU"] = str(job.mem_per_cpu)
    if job.array_job_id is not None and job.array_task_id is not None:
        env["SLURM_ARRAY_JOB_ID"] = str(job.array_job_id)
        env["SLURM_ARRAY_TASK_ID"] = str(job.array_task_id)
    if first is not None and (first.gpus or job.gpus or job.gpus_per_node or job.gpus_per_task):
        ids = ",".join(str(g) for g in first.gpus)
        env["SLURM_JOB_GPUS"] = ids
        env["SLURM_GPUS_ON_NODE"] = str(len(first.gpus))
        env["CUDA_VISIBLE_DEVICES"] = ids
        env["GPU_DEVICE_ORDINAL"] = ids
        if job.gpus_per_node:
            env["SLURM_GPUS_PER_NODE"] = str(job.gpus_per_node)
        if job.gpus:
            env["SLURM_GPUS"] = str(job.gpus)
        if job.gpus_per_task:
            env["SLURM_GPUS_PER_TASK"] = str(job.gpus_per_task)
    return env


def array_environment(count: int, min_id: int, max_id: int, step: int) -> dict[str, str]:
    return {
        "SLURM_ARRAY_TASK_COUNT": str(count),
        "SLURM_ARRAY_TASK_MIN": str(min_id),
        "SLURM_ARRAY_TASK_MAX": str(max_id),
        "SLURM_ARRAY_TASK_STEP": str(step),
    }
