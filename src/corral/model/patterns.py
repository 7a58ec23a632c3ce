"""File-name patterns of --output/--error/--input: %j %x %u %N %A %a %% …

As Slurm 22.05 expands them (sbatch(1), srun(1) "filename pattern"; slurmstepd's
fname.c): the batch step and srun steps differ in `%J` (a batch step has no step
number: `%J` is the bare job id) and `%s` ("batch" for the batch step).
"""

from __future__ import annotations

NO_VAL = 4294967294  # what %a gives outside an array, as in Slurm
MAX_WIDTH = 10  # Slurm pads to at most ten digits


def expand_pattern(pattern: str, *, job_id: int, name: str, user: str, node: str,
                   array_job_id: int | None = None, array_task_id: int | None = None,
                   step: str = "batch", task: int = 0, node_index: int = 0) -> str:
    """Expand a Slurm file-name pattern.

    `step` is "batch" for the batch script, else the step number; `task` and
    `node_index` are the task's rank and its node's index in the step.  A number
    between "%" and the letter zero-pads a number (`%5j` → 00042); a pattern with a
    backslash is taken literally (without its backslashes); an unknown letter stays.
    """
    if "\\" in pattern:
        return pattern.replace("\\", "")
    batch = step == "batch"
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch != "%":
            j = pattern.find("%", i)
            j = n if j < 0 else j
            out.append(pattern[i:j])
            i = j
            continue
        if i + 1 < n and pattern[i + 1] == "%":
            out.append("%")
            i += 2
            continue
        j = i + 1
        while j < n and pattern[j].isdigit():
            j += 1
        if j >= n:
            out.append(pattern[i:])
            break
        width = min(int(pattern[i + 1:j]), MAX_WIDTH) if j > i + 1 else 0
        code = pattern[j]
        value: int | str
        if code == "j":
            value = job_id
        elif code == "J":
            value = job_id if batch else f"{job_id:0{width}d}.{step}"
        elif code == "A":
            value = array_job_id if array_job_id is not None else job_id
        elif code == "a":
            value = array_task_id if array_task_id is not None else NO_VAL
        elif code == "s":
            value = "batch" if batch else int(step) if step.isdigit() else step
        elif code == "t":
            value = task
        elif code == "n":
            value = node_index
        elif code == "N":
            value = node
        elif code == "u":
            value = user
        elif code == "x":
            value = name
        else:
            out.append(pattern[i:j + 1])
            i = j + 1
            continue
        out.append(f"{value:0{width}d}" if isinstance(value, int) else value)
        i = j + 1
    return "".join(out)
