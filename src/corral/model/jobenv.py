"""The SLURM_* environment of a batch step and of srun tasks, as slurmd/slurmstepd set it,
and srun's per-task GPU binding (`--gpu-bind`, `--gpus-per-task`)."""

from __future__ import annotations

from corral.model.hostlists import compress

TYPE_CHECKING = False  # srun parses --gpu-bind with this module: no typing, no model.job
if TYPE_CHECKING:
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
        env["SLURM_STEP_GPUS"] = ids  # the batch step holds the job's GPUs of its node
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


def allocation_environment(job: Job, *, cluster_name: str, submit_host: str) -> dict[str, str]:
    """What salloc exports to the shell it starts (on the submit host, not a node)."""
    env = batch_environment(job, cluster_name=cluster_name, submit_host=submit_host)
    for key in ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_GTIDS", "SLURMD_NODENAME",
                "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "SLURM_TOPOLOGY_ADDR",
                "SLURM_TOPOLOGY_ADDR_PATTERN", "SLURM_CPUS_ON_NODE", "SLURM_GPUS_ON_NODE",
                "SLURM_JOB_GPUS", "SLURM_STEP_GPUS"):
        env.pop(key, None)
    return env


def step_environment(job: Job, *, cluster_name: str, submit_host: str, step_id: int,
                     step_nodes: list[str], tasks_per_node: list[int], node_index: int,
                     task_id: int, local_id: int, gpus: list[int] | None, cpus_on_node: int,
                     ntasks: int, task_gpus: list[int] | None = None,
                     gpus_per_task: int | None = None) -> dict[str, str]:
    """The SLURM_* variables of one srun task (compare env_srun_task0.txt)."""
    env = batch_environment(job, cluster_name=cluster_name, submit_host=submit_host)
    node = step_nodes[node_index]
    first = sum(tasks_per_node[:node_index])
    env.update({
        "SLURM_STEP_ID": str(step_id),
        "SLURM_STEPID": str(step_id),
        "SLURM_PROCID": str(task_id),
        "SLURM_LOCALID": str(local_id),
        "SLURM_NODEID": str(node_index),
        "SLURM_GTIDS": ",".join(str(first + i) for i in range(tasks_per_node[node_index])),
        "SLURM_STEP_NODELIST": compress(step_nodes),
        "SLURM_STEP_NUM_NODES": str(len(step_nodes)),
        "SLURM_STEP_NUM_TASKS": str(ntasks),
        "SLURM_STEP_TASKS_PER_NODE": tasks_per_node_string(tasks_per_node),
        "SLURM_NTASKS": str(ntasks),
        "SLURM_NPROCS": str(ntasks),
        "SLURM_TASKS_PER_NODE": tasks_per_node_string(tasks_per_node),
        "SLURM_CPUS_ON_NODE": str(cpus_on_node),
        "SLURMD_NODENAME": node,
        "SLURM_TOPOLOGY_ADDR": node,
        "SLURM_DISTRIBUTION": "block",
        "SLURM_LAUNCH_NODE_IPADDR": "127.0.0.1",
        "SLURM_SRUN_COMM_HOST": "127.0.0.1",
    })
    for key in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_GPUS_ON_NODE", "CUDA_VISIBLE_DEVICES",
                "GPU_DEVICE_ORDINAL"):
        env.pop(key, None)
    env.update(gpu_variables(gpus, task_gpus))
    if gpus_per_task:
        env["SLURM_GPUS_PER_TASK"] = str(gpus_per_task)
    return env


def gpu_variables(step_gpus: list[int] | None, task_gpus: list[int] | None) -> dict[str, str]:
    """The GPU variables of one task: the GPUs it is bound to (`task_gpus`, or all of the
    step's on its node when not bound), by their global ids.  As slurmstepd's gpu plugin
    does for a bound task, SLURM_STEP_GPUS names the task's GPUs too."""
    if step_gpus is None:
        return {}
    bound = step_gpus if task_gpus is None else task_gpus
    ids = ",".join(str(g) for g in bound)
    return {"SLURM_STEP_GPUS": ids, "CUDA_VISIBLE_DEVICES": ids, "GPU_DEVICE_ORDINAL": ids,
            "SLURM_GPUS_ON_NODE": str(len(step_gpus)),
            "SLURM_JOB_GPUS": ",".join(str(g) for g in step_gpus)}


# ---- --gpu-bind ----------------------------------------------------------------------------

class GpuBindError(ValueError):
    """srun: error: Invalid --gpu-bind argument: ..."""


GPU_BIND_KINDS = ("closest", "map_gpu", "mask_gpu", "none", "per_task", "single")


def _gpu_list(text: str, base: int) -> list[int]:
    """"0,1*2,0x3" -> [0, 1, 1, 3]: map_gpu/mask_gpu lists, with Slurm's `*count` repeats."""
    out: list[int] = []
    for item in text.split(","):
        value, _, count = item.partition("*")
        value = value.strip()
        if not value:
            raise GpuBindError(text)
        b = 16 if value.lower().startswith("0x") else base
        digits = value[2:] if b == 16 and value.lower().startswith("0x") else value
        if not digits or not all(c in "0123456789abcdefABCDEF"[:b if b == 10 else 22]
                                 for c in digits):
            raise GpuBindError(text)
        reps = 1
        if count:
            if not count.isdigit() or int(count) < 1:
                raise GpuBindError(text)
            reps = int(count)
        if reps > 4096 or len(out) + reps > 65536:  # bounded work for any input
            raise GpuBindError(text)
        out.extend([int(digits, b)] * reps)
    return out


def parse_gpu_bind(text: str) -> tuple[bool, str, list[int]]:
    """srun's --gpu-bind value: (verbose, kind, numbers); GpuBindError when invalid.

    [verbose,]closest | none | map_gpu:<list> | mask_gpu:<list> | per_task:<n> | single:<n>
    """
    verbose = False
    rest = text
    if rest.startswith("verbose"):
        verbose = True
        rest = rest[len("verbose"):]
        if rest.startswith(","):
            rest = rest[1:]
        elif rest:
            raise GpuBindError(text)
    kind, sep, arg = rest.partition(":")
    if not rest and verbose:
        return True, "none", []
    if kind in ("closest", "none"):
        if sep:
            raise GpuBindError(text)
        return verbose, kind, []
    if kind in ("per_task", "single"):
        if not arg.isdigit() or not 0 < int(arg) < 1 << 20:
            raise GpuBindError(text)
        return verbose, kind, [int(arg)]
    if kind in ("map_gpu", "mask_gpu") and arg:
        values = _gpu_list(arg, 10 if kind == "map_gpu" else 16)
        return verbose, kind, values
    raise GpuBindError(text)


def bind_task_gpus(kind: str, numbers: list[int], local_id: int,
                   step_gpus: list[int]) -> list[int] | None:
    """The GPUs (global ids) task `local_id` of a node is bound to, among the step's GPUs of
    that node; None: not bound (every step GPU).

    Without GPU topology (gres.conf Cores) every GPU is as close as any other, so `closest`
    binds to all of them, as Slurm does then.  map_gpu/mask_gpu name global GPU ids (Corral
    does not constrain devices); a task whose map names none of the step's GPUs gets the
    step's first GPU, as slurmstepd falls back."""
    if not step_gpus or kind in ("none", "closest"):
        return None
    n = len(step_gpus)
    if kind == "per_task":
        per = numbers[0]
        return [step_gpus[(local_id * per + k) % n] for k in range(min(per, n))]
    if kind == "single":
        return [step_gpus[(local_id // numbers[0]) % n]]
    if kind == "map_gpu":
        wanted = numbers[local_id % len(numbers)]
        return [wanted] if wanted in step_gpus else [step_gpus[0]]
    if kind == "mask_gpu":
        mask = numbers[local_id % len(numbers)]
        chosen = [g for g in step_gpus if g < 4096 and mask >> g & 1]
        return chosen or [step_gpus[0]]
    return None


def gpu_bind_line(step_gpus: list[int], task_gpus: list[int] | None) -> str:
    """What `--gpu-bind=verbose,...` prints on the task's stderr (slurmstepd's format)."""
    def hexmask(ids: list[int]) -> str:
        return hex(sum(1 << g for g in ids if g < 4096))

    bound = step_gpus if task_gpus is None else task_gpus
    ids = ",".join(str(g) for g in bound)
    return (f"gpu-bind: usable_gres={hexmask(bound)}; bit_alloc={hexmask(step_gpus)}; "
            f"local_inx=0; global_list={ids}; local_list={ids}\n")
