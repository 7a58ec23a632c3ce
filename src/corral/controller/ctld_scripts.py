"""PrologSlurmctld and EpilogSlurmctld: programs the controller runs on its own machine, as
its own user (Slurm's SlurmUser), at a job's allocation and at its end.

    PrologSlurmctld   runs when a job is allocated; a batch job's launch waits for it.  A
                      non-zero exit (or running past PrologEpilogTimeout) requeues a batch
                      job (an allocation without a script — salloc, srun — is cancelled),
                      as Slurm does
    EpilogSlurmctld   runs when a job's run ends (finished or requeued); its exit status is
                      logged, it changes nothing

Both get Slurm's environment (SLURM_JOB_ID, SLURM_JOB_USER, SLURM_JOB_NODELIST, …, and
SLURM_SCRIPT_CONTEXT=prolog_slurmctld|epilog_slurmctld; the epilog also SLURM_JOB_EXIT_CODE
and SLURM_JOB_EXIT_CODE2).  Unlike Slurm, an interactive allocation is granted while its
PrologSlurmctld runs (it is cancelled if the program fails), and the job shows RUNNING, not
CONFIGURING, meanwhile."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from corral.controller.jobs import JobEvent, JobEventKind
from corral.model.job import Job, JobState

log = logging.getLogger("corral.controller")
events_log = logging.getLogger("corral.controller.events")

PROLOG_FAILED = "PrologSlurmctld failed"


class CtldScripts:
    """`ctl` is the controller (its prolog settings, environment and lifecycle)."""

    def __init__(self, ctl: Any) -> None:
        self.ctl = ctl
        self.tasks: set[asyncio.Task[None]] = set()
        self.subscribed = False
        self.reload()

    def reload(self) -> None:
        """slurm.conf's PrologSlurmctld/EpilogSlurmctld, again after `scontrol reconfigure`."""
        o = self.ctl.config.options
        self.prolog = o.get("PrologSlurmctld", "").strip()
        self.epilog = o.get("EpilogSlurmctld", "").strip()
        if self.active and not self.subscribed:
            self.ctl.table.subscribe(self.on_job_event)
            self.subscribed = True

    @property
    def active(self) -> bool:
        return bool(self.prolog or self.epilog)

    # ---- the shell's launch gate ----------------------------------------------------
    def gate_launch(self, job: Job, launch: Callable[[], None]) -> bool:
        """Run the PrologSlurmctld before a batch job's launch: True when the launch now
        waits for it (`launch` is called once it succeeds)."""
        if not self.prolog:
            return False
        self._spawn(self._prolog(job, job.restart_count, launch))
        return True

    def on_job_event(self, ev: JobEvent) -> None:
        job = ev.job
        if ev.kind is JobEventKind.STARTED and self.prolog and not job.batch:
            self._spawn(self._prolog(job, job.restart_count, None))
        elif self.epilog and ev.kind in (JobEventKind.ENDED, JobEventKind.REQUEUED) \
                and ev.old is not None and ev.old.active:
            self._spawn(self._epilog(job, self.ctl.prolog.environment(job, job.nodes)))

    # ---- running them -----------------------------------------------------------------
    def _spawn(self, coro: Any) -> None:
        try:
            task = asyncio.get_running_loop().create_task(coro)
        except RuntimeError:  # no loop (an in-process tool): the program is not run
            coro.close()
            log.warning("no event loop: PrologSlurmctld/EpilogSlurmctld not run")
            return
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _environment(self, job: Job, context: str) -> dict[str, str]:
        env = self.ctl.prolog.environment(job, job.nodes)
        env["SLURM_SCRIPT_CONTEXT"] = context
        return env

    async def _run(self, program: str, env: dict[str, str], what: str, job_id: int) -> str | None:
        """None when the program exits 0; else why it failed (logged)."""
        timeout = self.ctl.prolog.settings.timeout
        try:
            proc = await asyncio.create_subprocess_exec(
                program, env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
                start_new_session=True)
        except OSError as e:
            why = f"cannot run {program}: {e.strerror}"
        else:
            try:
                _, err = await asyncio.wait_for(proc.communicate(), timeout)
            except TimeoutError:
                proc.kill()
                await proc.wait()
                why = f"{program} killed after PrologEpilogTimeout ({timeout:.0f} s)"
            else:
                if proc.returncode == 0:
                    return None
                first = err.decode(errors="replace").strip().splitlines()[:1]
                why = f"{program} exited {proc.returncode}" + (f": {first[0][:200]}" if first else "")
        events_log.warning("job %d: %s: %s", job_id, what, why)
        return why

    async def _prolog(self, job: Job, run: int, launch: Callable[[], None] | None) -> None:
        why = await self._run(self.prolog, self._environment(job, "prolog_slurmctld"),
                              "PrologSlurmctld", job.job_id)
        ctl = self.ctl
        if job.restart_count != run or job.state != JobState.RUNNING:
            return  # cancelled or requeued meanwhile: nothing to launch or undo
        if why is None:
            if launch is not None:
                launch()
            return
        now = ctl.clock()
        if job.batch:
            # its batch step never started: requeued (kept waiting: not held), as Slurm does
            job.kill_reason = "REQUEUE"
            ctl.job_ended(job.job_id, "FAILED", 1, 0, now, note=PROLOG_FAILED)
        else:
            ctl.end_allocation(job, "CANCELLED")

    async def _epilog(self, job: Job, env: dict[str, str]) -> None:
        status = (job.exit_code << 8) | (job.term_signal & 0x7F)
        env.update(SLURM_SCRIPT_CONTEXT="epilog_slurmctld", SLURM_JOB_EXIT_CODE=str(status),
                   SLURM_JOB_EXIT_CODE2=f"{job.exit_code}:{job.term_signal}")
        await self._run(self.epilog, env, "EpilogSlurmctld", job.job_id)
