"""File-name patterns of --output/--error/--input: %j %x %u %N %A %a %% …"""

from __future__ import annotations

import re

_PAT = re.compile(r"%(\d*)([%AajJNnstuxb])")


def expand_pattern(pattern: str, *, job_id: int, name: str, user: str, node: str,
                   array_job_id: int | None = None, array_task_id: int | None = None,
                   step: str = "batch", task: int = 0, node_index: int = 0) -> str:
    """Expand a Slurm file-name pattern (see sbatch(1) "filename pattern")."""

    def repl(m: re.Match[str]) -> str:
        width, code = m.group(1), m.group(2)
        if code == "%":
            return "%"
        if code == "j":
            val: str | int = job_id
        elif code == "J":
            val = f"{job_id}.{step}"
        elif code == "A":
            val = array_job_id if array_job_id is not None else job_id
        elif code == "a":
            val = array_task_id if array_task_id is not None else 4294967294
        elif code == "b":
            val = (array_task_id or 0) % 10
        elif code == "x":
            return name
        elif code == "u":
            return user
        elif code == "N":
            return node
        elif code == "n":
            val = node_index
        elif code == "t":
            val = task
        elif code == "s":
            val = step
        else:
            return m.group(0)
        if width and isinstance(val, int):
            return str(val).zfill(int(width))
        return str(val)

    # "\\" disables pattern expansion, as in Slurm
    if "\\" in pattern:
        return pattern.replace("\\", "")
    return _PAT.sub(repl, pattern)
