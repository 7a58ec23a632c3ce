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
        "SLURM_PRIO_PROCESS": str(job.nice),
        "SLURM_TOPOLOGY_ADDR": first.node if first else "",
        "SLURM_TOPOLOGY_ADDR_PATTERN": "node",
        "SLURM_NODE_ALIASES": "(null)",
    }
    # slurmd sets it from a job's first requeue on (env.c); SLURM_JOB_START_TIME and
    # SLURM_JOB_END_TIME came with Slurm 23.02, after the 22.05 Corral follows
    if job.restart_count:
        env["SLURM_RESTART_COUNT"] = str(job.restart_count)
    if job.ntasks_per_node:
        env["SLURM_NTASKS_PER_NODE"] = str(job.ntasks_per_node)
    if job.overcommit:  # slurmstepd's setup_env (and salloc's env_array_for_job)
        env["SLURM_OVERCOMMIT"] = "1"
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
    # SLURM_GPUS, SLURM_GPUS_PER_NODE and SLURM_GPUS_PER_TASK are not slurmd's: sbatch and
    # salloc export the options they were given (--gpus-per-node, not --gres=gpu:N, which
    # Corral also records as gpus_per_node) into the job's environment themselves.
    return env


def array_environment(count: int, min_id: int, max_id: int, step: int) -> dict[str, str]:
    return {
        "SLURM_ARRAY_TASK_COUNT": str(count),
        "SLURM_ARRAY_TASK_MIN": str(min_id),
        "SLURM_ARRAY_TASK_MAX": str(max_id),
        "SLURM_ARRAY_TASK_STEP": str(step),
    }


def allocation_environment(job: Job, *, cluster_name: str, submit_host: str) -> dict[str, str]:
    """What salloc exports to the shell it starts (on the submit host, not a node): env.c's
    env_array_for_job, without what only slurmd sets (the job's uid, user and gid among it)."""
    env = batch_environment(job, cluster_name=cluster_name, submit_host=submit_host)
    for key in ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_GTIDS", "SLURMD_NODENAME",
                "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "SLURM_TOPOLOGY_ADDR",
                "SLURM_TOPOLOGY_ADDR_PATTERN", "SLURM_CPUS_ON_NODE", "SLURM_GPUS_ON_NODE",
                "SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_JOB_UID", "SLURM_JOB_GID",
                "SLURM_JOB_USER", "SLURM_PRIO_PROCESS", "SLURM_RESTART_COUNT"):
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
    for key in GPU_VARIABLES:
        env.pop(key, None)
    env.update(gpu_variables(gpus, task_gpus))
    if gpus_per_task:
        env["SLURM_GPUS_PER_TASK"] = str(gpus_per_task)
    return env


# what the gres/gpu plugin sets for a step, and unsets for a step without GPUs on a node
GPU_VARIABLES = ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_GPUS_ON_NODE", "CUDA_VISIBLE_DEVICES",
                 "GPU_DEVICE_ORDINAL")


def gpu_variables(step_gpus: list[int] | None, task_gpus: list[int] | None) -> dict[str, str]:
    """The GPU variables of one task: the GPUs it is bound to (`task_gpus`, or all of the
    step's on its node when not bound), by their global ids.  As slurmstepd's gpu plugin
    does for a bound task, SLURM_STEP_GPUS names the task's GPUs too."""
    if not step_gpus:
        return {}  # a step without GPUs has none of these (Slurm's gres plugin unsets them)
    bound = step_gpus if task_gpus is None else task_gpus
    ids = ",".join(str(g) for g in bound)
    return {"SLURM_STEP_GPUS": ids, "CUDA_VISIBLE_DEVICES": ids, "GPU_DEVICE_ORDINAL": ids,
            "SLURM_GPUS_ON_NODE": str(len(step_gpus)),
            "SLURM_JOB_GPUS": ",".join(str(g) for g in step_gpus)}


# ---- --gpu-bind ----------------------------------------------------------------------------

class GpuBindError(ValueError):
    """srun: error: Invalid --gpu-bind argument: gpu:..."""


def _strtol(text: str) -> tuple[int, str]:
    """C's strtol(text, &end, 0) for non-negative input: (value, the rest)."""
    if text[:2].lower() == "0x" and text[2:3] and text[2:3] in "0123456789abcdefABCDEF":
        digits, base, start = "0123456789abcdefABCDEF", 16, 2
    elif text[:1] == "0":
        digits, base, start = "01234567", 8, 0
    else:
        digits, base, start = "0123456789", 10, 0
    end = start
    while end < len(text) and text[end] in digits:
        end += 1
    if end == start:
        return 0, text
    return int(text[start:end], base), text[end:]


def _valid_num_list(text: str, hexa: bool) -> bool:
    """tres_bind.c's _valid_num_list: map_gpu/mask_gpu lists as srun checks them."""
    allowed = "0123456789abcdefABCDEF*" if hexa else "0123456789*"
    for tok in text.split(","):
        if not tok:
            continue
        body = tok[2:] if hexa and tok.startswith("0x") else tok
        if any(c not in allowed for c in body):
            return False
        value, rest = (int(body.split("*")[0] or "0", 16), body[len(body.split("*")[0]):]) \
            if hexa else _strtol(body)
        if value >= 1 << 63 or (rest and rest[0] != "*"):
            return False
        if rest:
            count, end = _strtol(rest[1:])
            if end or count >= 1 << 63:
                return False
    return True


def parse_gpu_bind(text: str) -> tuple[bool, str, list[int]]:
    """srun's --gpu-bind: (verbose, kind, numbers), GpuBindError where srun refuses it.

    Checked as srun checks it (tres_bind.c, loose: "c…" is closest, "n…" none), read as
    slurmstepd reads it (gres.c _parse_tres_bind): a value it does not understand binds
    nothing.  For map_gpu/mask_gpu the numbers are one per task, `*count` repeats expanded
    (-1: a value out of range, which binds the step's first GPU)."""
    low = text.lower()
    verbose = low.startswith("verbose,")
    rest, rlow = (text[8:], low[8:]) if verbose else (text, low)
    if rlow[:1] == "c":
        valid = True
    elif rlow.startswith("map_gpu:"):
        valid = _valid_num_list(rest[8:], False)
    elif rlow.startswith("mask_gpu:"):
        valid = _valid_num_list(rest[9:], True)
    elif rlow[:1] == "n":
        valid = True
    elif rlow.startswith(("per_task:", "single:")):
        valid = _strtol(rest.split(":", 1)[1])[0] < 1 << 63
    else:
        valid = False
    if not valid:
        raise GpuBindError(f"gpu:{text}")
    if rlow.startswith("single:"):
        n = _strtol(rest[7:])[0]
        return verbose, "single", [n if 0 < n < 1 << 32 else 1]
    if rlow.startswith("closest"):
        return verbose, "closest", []
    if rlow.startswith(("map_gpu:", "mask_gpu:")):
        kind = rlow[:rlow.index(":")]
        values: list[int] = []
        for tok in rest[len(kind) + 1:].split(","):
            if not tok:
                continue
            value, tail = _strtol(tok)
            count = max(1, min(_strtol(tail[1:])[0], 4096)) if tail.startswith("*") else 1
            values.extend([value] * count)
            if len(values) > 65536:  # bounded work for any input
                break
        return (verbose, kind, values) if values else (verbose, "none", [])
    if rlow.startswith("per_task:"):
        n = _strtol(rest[9:])[0]
        return (verbose, "per_task", [min(n, 1 << 16)]) if n > 0 else (verbose, "none", [])
    return verbose, "none", []


def bind_task_gpus(kind: str, numbers: list[int], local_id: int,
                   step_gpus: list[int]) -> list[int] | None:
    """The GPUs (global ids) task `local_id` of a node is bound to, among the step's GPUs of
    that node (slurmstepd's gres.c _get_usable_gres); None: not bound.

    Without GPU topology (gres.conf Cores) every GPU is as close as any other: `closest`
    binds to all of them and `single:N` binds tasks in blocks of N to them in turn.
    map_gpu/mask_gpu name global GPU ids (Corral does not constrain devices).  A task whose
    binding names none of the step's GPUs gets the step's first, as slurmstepd falls back."""
    if not step_gpus or kind == "none":
        return None
    n = len(step_gpus)
    chosen: list[int] = []
    if kind == "closest":
        chosen = list(step_gpus)
    elif kind == "per_task":
        per = numbers[0]
        chosen = step_gpus[local_id * per:(local_id + 1) * per]
    elif kind == "single":
        chosen = [step_gpus[(local_id // numbers[0]) % n]]
    elif kind == "map_gpu":
        wanted = numbers[local_id % len(numbers)]
        chosen = [wanted] if wanted in step_gpus else []
    elif kind == "mask_gpu":
        mask = numbers[local_id % len(numbers)]
        chosen = [g for g in step_gpus if g < 4096 and mask >> g & 1]
    return chosen or [step_gpus[0]]


def gpu_bind_line(step_gpus: list[int], task_gpus: list[int] | None) -> str:
    """What `--gpu-bind=verbose,...` prints on the task's stderr (slurmstepd's gres_common.c
    format; Corral's GPU indexes are global, so local_inx stays 0)."""
    def hexmask(ids: list[int]) -> str:
        return hex(sum(1 << g for g in ids if g < 4096))

    bound = step_gpus if task_gpus is None else task_gpus
    ids = ",".join(str(g) for g in bound)
    usable = "NULL" if task_gpus is None else hexmask(task_gpus)
    return (f"gpu-bind: usable_gres={usable}; bit_alloc={hexmask(step_gpus)}; "
            f"local_inx=0; global_list={ids}; local_list={ids}\n")


# ---- --multi-prog ----------------------------------------------------------------------------

class MultiProgError(ValueError):
    """The configuration file is invalid: `lines` are srun's error lines (without prefix)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("; ".join(lines))
        self.lines = lines


def _multi_prog_records(text: str) -> list[tuple[int, str, str]]:
    """(line number, rank spec, rest of the line) of each record, as Slurm reads them: whole
    line comments and blank lines skipped; a line ending in a backslash continues on the next,
    which srun's check skips."""
    out = []
    last_break = False
    for num, line in enumerate(text.split("\n"), 1):
        brk = line.endswith("\\")
        if last_break:
            last_break = brk
            continue
        last_break = brk
        p = line.lstrip()
        if not p or p.startswith("#"):
            continue
        parts = p.split(None, 1)
        out.append((num, parts[0], parts[1].strip() if len(parts) > 1 else ""))
    return out


def verify_multi_prog(text: str, fname: str, ntasks: int | None) -> int:
    """srun's verify_multi_name: every task has exactly one record.  Returns the task count
    (the highest rank + 1 when -n was not given); MultiProgError with srun's messages."""
    if ntasks is not None and ntasks <= 0:
        raise MultiProgError([f"Invalid task count {ntasks}"])
    count = ntasks or 0
    fixed = ntasks is not None
    seen: set[int] = set()
    asterisk = False
    for num, ranks, rest in _multi_prog_records(text):
        invalid = f"Line {num} of configuration file {fname} invalid"
        if not rest:
            raise MultiProgError([invalid])
        if ranks == "*":
            asterisk = True
            fixed = True
            if count == 0:
                count = 1
            seen.update(range(count))
            continue
        for rng in ranks.split(","):
            if asterisk:
                raise MultiProgError(["Task range specification with asterisk must be last",
                                      invalid])
            digits = len(rng) - len(rng.lstrip("0123456789"))
            tail = rng[digits:]
            if tail and (tail[0] != "-" or not tail[1:].isdigit()):
                raise MultiProgError([f"Invalid task range specification ({rng})"
                                      if tail[0] != "-" else "Invalid task range specification",
                                      invalid])
            lo = int(rng[:digits] or "0")
            hi = int(tail[1:]) if tail else lo
            if lo > hi:
                raise MultiProgError([f"Invalid task range, {lo}-{hi}", invalid])
            if hi >= count:
                if fixed or hi >= 1 << 20:
                    raise MultiProgError([f"Invalid task id, {hi} >= ntasks", invalid])
                count = hi + 1
            for i in range(lo, hi + 1):
                if i in seen:
                    raise MultiProgError([f"Duplicate record for task {i}", invalid])
                seen.add(i)
    for i in range(count):
        if i not in seen:
            raise MultiProgError([f"Configuration file {fname} invalid, no record for task "
                                  f"id {i}"])
    if count == 0:
        raise MultiProgError([f"Configuration file {fname} invalid, no record for task id 0"])
    return count


def _in_range(rank: int, spec: str) -> int | None:
    """The task's offset within the record's ranks, or None when the record is not its."""
    if spec == "*":
        return rank
    passed = 0
    for rng in spec.split(","):
        lo_text, dash, hi_text = rng.partition("-")
        if not lo_text.isdigit() or (dash and not hi_text.isdigit()):
            continue
        lo = int(lo_text)
        hi = int(hi_text) if dash else lo
        if lo <= rank <= hi:
            return passed + rank - lo
        passed += hi - lo + 1
    return None


def multi_prog_argv(text: str, rank: int, extra: list[str]) -> list[str] | None:
    """slurmstepd's multi_prog_get_argv: the argv of task `rank` (%t: its rank, %o: its
    offset in the record; '...' quotes, \\ escapes), then srun's extra arguments; None when
    no record names the task."""
    lines = text.split("\n")
    i = 0
    last_break = False
    while i < len(lines):
        line = lines[i]
        i += 1
        brk = line.endswith("\\")
        if last_break:
            last_break = brk
            continue
        last_break = brk
        p = line.lstrip()
        if not p or p.startswith("#"):
            continue
        spec_end = next((k for k, c in enumerate(p) if c.isspace()), len(p))
        if spec_end == len(p):
            return None
        offset = _in_range(rank, p[:spec_end])
        if offset is None:
            continue
        args: list[str] = []
        buf: str | None = None
        s = p[spec_end:].lstrip()
        k = 0
        while k < len(s):
            c = s[k]
            if c.isspace():
                if buf is not None:
                    args.append(buf)
                    buf = None
                k += 1
            elif c == "%" and k + 1 < len(s):
                buf = (buf or "") + (str(rank) if s[k + 1] == "t" else
                                     str(offset) if s[k + 1] == "o" else "")
                k += 2
            elif c == "\\":
                if k + 1 < len(s):
                    buf = (buf or "") + s[k + 1]
                    k += 2
                elif i < len(lines):  # continued on the next line
                    s = s[:k] + lines[i]
                    i += 1
                else:
                    k += 1
            elif c == "'":
                end = s.find("'", k + 1)
                if end < 0:
                    return None
                buf = (buf or "") + s[k + 1:end]
                k = end + 1
            else:
                buf = (buf or "") + c
                k += 1
        if buf is not None:
            args.append(buf)
        return args + list(extra)
    return None
