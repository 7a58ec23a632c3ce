"""Launch records: the message that tells an agent to start a job's batch step."""

from __future__ import annotations

import functools
import logging
import os
import pwd
from typing import Any

from corral.controller.lifecycle import JobLifecycle
from corral.model.arrays import parse_array_spec
from corral.model.job import Job
from corral.model.jobenv import array_environment, batch_environment
from corral.model.launchplan import ContainerSpec, LaunchPlan, SignalSpec
from corral.model.messages import LaunchJob
from corral.model.patterns import expand_pattern

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


class Launching(JobLifecycle):
    def launch_message(self, job: Job) -> dict[str, Any]:
        """The `launch` message (model.messages.LaunchJob) of a job's batch step: its typed
        plan (model.launchplan), as the wire carries it."""
        payload = self.store.load_payload(job.job_id)
        if payload is None and job.array_job_id is not None:
            payload = self.store.load_payload(job.array_job_id)
        if payload is None:
            raise RuntimeError(f"no script stored for job {job.job_id}")
        first = job.alloc[0]
        env = dict(payload.env)
        env.update(batch_environment(job, cluster_name=self.cluster_name,
                                     submit_host=job.submit_host or os.uname().nodename))
        if job.array_spec:
            # validated against MaxArraySize at submission (which may have changed since)
            ids, _ = parse_array_spec(job.array_spec, 1 << 31)
            step = ids[1] - ids[0] if len(ids) > 1 else 1
            env.update(array_environment(len(ids), ids[0], ids[-1], step))
        env.setdefault("SLURM_CONF", self.config_path)
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

        node = self.nodes.get(first.node)
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
            script_text=payload.script, argv=list(payload.argv), env=env,
            work_dir=job.work_dir, stdout=stdout, stderr=stderr,
            stdin=path(job.stdin, "/dev/null"), open_mode=payload.open_mode,
            time_limit=job.time_limit, kill_wait=self.kill_wait,
            signal=SignalSpec(**signal) if signal is not None else None,
            cpus_count=first.cpus, gpus=list(first.gpus), mem_mb=first.mem_mb or None,
            # the default memory limit of a job without --mem is its node's RealMemory
            node_mem_mb=node.real_memory if node is not None else None,
            cpu_ids=list(first.cpu_ids) if first.cpu_ids is not None else None,
            acctg_freq=job.acctg_freq,  # its steps' sampling interval (agent.usage)
            container=ContainerSpec.from_dict(job.container) if job.container else None,
        )
        return LaunchJob(node=first.node, launch=plan).to_dict()

    def _launch(self, job: Job) -> None:
        """Send the job's launch once its start is committed (never before: a crash between
        the two would run a job the store does not know runs).  The message is built after
        the commit, in the store's thread, from the committed record."""
        assert job.batch_host is not None
        job_id = job.job_id
        self.writer.launch_after_commit(
            job, self.launch_message, lambda msg: self._deliver_launch(job_id, msg))

    def _deliver_launch(self, job_id: int, msg: dict[str, Any] | Exception) -> None:
        if isinstance(msg, Exception):
            log.error("cannot build launch for job %d: %s", job_id, msg)
            self.job_ended(job_id, "FAILED", 1, 0, self.clock(), note=str(msg))
            return
        host = str(msg["node"])
        send = self.agent_senders.get(host)
        if send is None:
            log.warning("no agent for node %s; job %d fails to launch", host, job_id)
            self.job_ended(job_id, "NODE_FAIL", 0, 0, self.clock())
            return
        send(msg)
