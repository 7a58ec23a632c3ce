"""`scontrol show step(s) [JOB[_TASK][.STEP]]`: the running steps of running jobs, in the
layout of Slurm 22.05's slurm_sprint_job_step_info (imported only for this command)."""

from __future__ import annotations

import sys

from corral.cli import client
from corral.cli.fmt import stamp
from corral.model import hostlists

TYPE_CHECKING = False  # annotations only: `typing` would cost every start
if TYPE_CHECKING:
    from typing import Any


def _leading_int(text: str) -> tuple[int, str]:
    """strtol: the number at the start of `text` (0 if none) and what follows it."""
    digits = len(text) - len(text.lstrip("0123456789"))
    return (int(text[:digits]) if digits else 0), text[digits:]


def parse_step_id(text: str) -> tuple[int, int | None, int | None]:
    """(job id, array task or None, step number or None) as scontrol_print_step reads them:
    `5`, `7_3`, `5.0`; a step named by a word (`5.batch`) is read as step 0, as there."""
    job_id, rest = _leading_int(text)
    if rest.startswith("_"):
        task, _ = _leading_int(rest[1:])
        return job_id, task, None
    if rest.startswith("."):
        return job_id, None, _leading_int(rest[1:])[0]
    return job_id, None, None


def _step_number(step_id: str) -> int | None:
    return int(step_id) if step_id.isdigit() else None


def format_step(job: dict[str, Any], step: dict[str, Any], one_liner: bool) -> str:
    """One step record (Slurm's field order; Corral has no step ports, CPU frequency,
    srun host or per-step memory, so those print as Slurm prints them unset)."""
    end = " " if one_liner else "\n   "
    sid = str(step["step_id"])
    if job.get("array_job_id") is not None and job.get("array_task_id") is not None:
        ident = f"StepId={job['array_job_id']}_{job['array_task_id']}.{sid}"
    else:
        ident = f"StepId={job['job_id']}.{sid}"
    nodes = step.get("nodes") or ""
    try:
        count = len(hostlists.expand(nodes)) if nodes else 0
    except hostlists.HostlistError:
        count = 0
    cpus = int(step.get("cpus") or 0)
    tres = ",".join(x for x in (f"cpu={cpus}" if cpus else "",
                                f"node={count}" if count else "") if x)
    dist = " Dist=Block" if _step_number(sid) is not None else ""
    return (f"{ident} UserId={job.get('uid', 0)} "
            f"StartTime={stamp(step.get('start_time'))} TimeLimit=UNLIMITED{end}"
            f"State={step.get('state') or 'RUNNING'} Partition={job.get('partition') or ''} "
            f"NodeList={nodes or '(null)'}{end}"
            f"Nodes={count} CPUs={cpus} Tasks={int(step.get('ntasks') or 0)} "
            f"Name={step.get('name') or ''} Network=(null){end}"
            f"TRES={tres or '(null)'}{end}"
            f"ResvPorts=(null){end}"
            f"CPUFreqReq=Default{dist}{end}"
            f"SrunHost:Pid=(null):0" + ("\n" if one_liner else "\n\n"))


def show_steps(ident: str | None, one_liner: bool) -> int:
    job_id, task, step_no = parse_step_id(ident) if ident else (0, None, None)
    try:
        ans = client.get("/v1/jobs", ids=str(job_id) if job_id else None)
    except client.ApiError as e:
        if job_id and e.status == 404:
            sys.stderr.write("slurm_get_job_steps error: Invalid job id specified\n")
            return 1
        raise
    jobs: list[dict[str, Any]] = ans.get("jobs", []) if isinstance(ans, dict) else ans
    if job_id:
        jobs = [j for j in jobs if job_id in (j.get("job_id"), j.get("array_job_id"))]
        if not jobs:
            sys.stderr.write("slurm_get_job_steps error: Invalid job id specified\n")
            return 1
    out: list[str] = []
    for job in sorted(jobs, key=lambda j: int(j.get("job_id") or 0)):
        if job.get("state") not in ("RUNNING", "SUSPENDED", "COMPLETING"):
            continue  # a finished job's steps are gone from the controller's records
        if task is not None and job.get("array_task_id") != task:
            continue
        for step in job.get("steps") or []:  # in the order they were created
            if step.get("end_time") is not None:
                continue
            if step_no is not None and _step_number(str(step["step_id"])) != step_no:
                continue
            out.append(format_step(job, step, one_liner))
    if out:
        sys.stdout.write("".join(out))
        return 0
    if ident:
        step_text = "" if step_no is None else str(step_no)
        job_text = f"{job_id}_{task}" if task is not None else str(job_id)
        sys.stdout.write(f"Job step {job_text}.{step_text} not found\n")
        return 1
    sys.stdout.write("No job steps in the system\n")
    return 0
