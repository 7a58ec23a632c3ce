"""Launch records: the message that tells an agent to start a job's batch step, built by
the shell after the job's start is committed (in the store's thread: the script is read
there, not on the event loop)."""

from __future__ import annotations

import functools
import logging
import os
import pwd
import re
from typing import Any

from corral.model.arrays import parse_array_spec
from corral.model.job import Job
from corral.model.jobenv import array_environment, batch_environment
from corral.model.launchplan import ContainerSpec, LaunchPlan, SignalSpec
from corral.model.messages import LaunchJob
from corral.model.node import Node
from corral.model.patterns import expand_pattern
from corral.store.base import Store

log = logging.getLogger("corral.controller")


def parse_signal_spec(spec: str | None) -> dict[str, Any] | None:
    """"[B:|R:]SIG[@secs]" → {"num", "secs", "batch_only"}."""
    if not spec:
        return None
    import signal as _signal

    text = spec
    batch_only = False
    if text[:2].upper() in ("B:", "R:"):
        batch_only = text[0].upper() == "B"
        text = text[2:]
    name, _, secs = text.partition("@")
    if name.isdigit():
        num = int(name)
    else:
        nm = name.upper()
        if not nm.startswith("SIG"):
            nm = "SIG" + nm
        num = int(getattr(_signal, nm, 0)) or int(_signal.SIGUSR1)
    return {"num": num, "secs": int(secs) if secs.isdigit() else 60, "batch_only": batch_only}


@functools.lru_cache(maxsize=4096)
def home_of(uid: int) -> str:
    """A user's home directory (cached: an NSS lookup per launch costs more than the rest)."""
    try:
        return pwd.getpwuid(uid).pw_dir
    except KeyError:
        return "/"


def launch_message(job: Job, *, store: Store, config_path: str, cluster_name: str,
                   kill_wait: int, node: Node | None) -> dict[str, Any]:
    """The `launch` message (model.messages.LaunchJob) of a job's batch step: its typed
    plan (model.launchplan), as the wire carries it."""
    payload = store.load_payload(job.job_id)
    if payload is None and job.array_job_id is not None:
        payload = store.load_payload(job.array_job_id)
    if payload is None:
        raise RuntimeError(f"no script stored for job {job.job_id}")
    first = job.alloc[0]
    env = dict(payload.env)
    env.update(batch_environment(job, cluster_name=cluster_name,
                                 submit_host=job.submit_host or os.uname().nodename))
    if job.array_spec:
        # validated against MaxArraySize at submission (which may have changed since)
        ids, _ = parse_array_spec(job.array_spec, 1 << 31)
        step = ids[1] - ids[0] if len(ids) > 1 else 1
        env.update(array_environment(len(ids), ids[0], ids[-1], step))
    env.setdefault("SLURM_CONF", config_path)
    # slurmstepd applies sbatch's SLURM_UMASK to the batch step and unsets it there
    umask_text = env.pop("SLURM_UMASK", "")
    umask = int(umask_text, 8) if re.fullmatch(r"[0-7]{1,4}", umask_text) else None
    if payload.open_mode == "append":
        env["SLURM_OPEN_MODE"] = "a"  # srun in the script appends too, as in Slurm
    is_array = job.array_job_id is not None
    default_out = "slurm-%A_%a.out" if is_array else "slurm-%j.out"

    def path(pattern: str | None, default: str | None) -> str | None:
        p = pattern or default
        if p is None:
            return None
        p = expand_pattern(p, job_id=job.job_id, name=job.name, user=job.user,
                           node=first.node, array_job_id=job.array_job_id,
                           array_task_id=job.array_task_id)
        return p if os.path.isabs(p) else os.path.join(job.work_dir, p)

    stdout = path(job.stdout, default_out)
    stderr = path(job.stderr, None) or stdout
    home = home_of(job.uid)
    signal = parse_signal_spec(job.signal)
    if signal is not None and not signal["batch_only"]:
        signal = None  # without B: the steps get it, not the batch shell (steps.py times it)
    plan = LaunchPlan(
        job_id=job.job_id, step="batch", node_name=first.node,
        restart_count=job.restart_count,
        uid=job.uid, gid=job.gid, user=job.user, home=home,
        script_text=payload.script, argv=list(payload.argv), env=env, umask=umask,
        work_dir=job.work_dir, stdout=stdout, stderr=stderr,
        stdin=path(job.stdin, "/dev/null"), open_mode=payload.open_mode,
        time_limit=job.time_limit, kill_wait=kill_wait,
        signal=SignalSpec(**signal) if signal is not None else None,
        cpus_count=first.cpus, gpus=list(first.gpus), mem_mb=first.mem_mb or None,
        # the default memory limit of a job without --mem is its node's RealMemory
        node_mem_mb=node.real_memory if node is not None else None,
        cpu_ids=list(first.cpu_ids) if first.cpu_ids is not None else None,
        acctg_freq=job.acctg_freq,  # its steps' sampling interval (agent.usage)
        container=ContainerSpec.from_dict(job.container) if job.container else None,
    )
    return LaunchJob(node=first.node, launch=plan).to_dict()
