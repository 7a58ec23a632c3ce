"""Prolog and Epilog on the agent's nodes (slurmd's role; controller.prolog sends the job's
start and end).

The Prolog runs as root once per job and node, before the job's first process there: at
once with PrologFlags=Alloc, else when the batch step or the node's first srun step arrives
(those wait for it).  The Epilog runs at the job's end, on every node of the allocation,
after the Prolog if it still runs.  Each runs in a session of its own, killed (the whole
group) at PrologEpilogTimeout; PrologFlags=Serial runs one script at a time per node.  A
failure (non-zero exit, a signal, the timeout) is reported to the controller, which drains
the node; after a failed Prolog the job's processes never start on that node."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from typing import Any

from corral.model import messages

log = logging.getLogger("corral.agent")

Handle = Callable[[Any], None]


async def run_script(path: str, env: dict[str, str], timeout: float | None) -> str | None:
    """Run a Prolog/Epilog; None when it succeeded, else why it failed."""
    try:
        proc = await asyncio.create_subprocess_exec(
            path, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL, env=env, cwd="/", start_new_session=True)
    except OSError as e:
        return f"cannot run {path}: {e.strerror}"
    try:
        rc = await asyncio.wait_for(proc.wait(), timeout)
    except TimeoutError:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        await proc.wait()
        return f"{path} killed after PrologEpilogTimeout={timeout:g}s"
    if rc == 0:
        return None
    return f"{path} exited {rc}" if rc > 0 else f"{path} killed by signal {-rc}"


class _OnNode:
    """One job on one node: its Prolog's run (None: not started yet) and verdict."""

    __slots__ = ("task", "failed")

    def __init__(self) -> None:
        self.task: asyncio.Task[bool] | None = None
        self.failed = False


class PrologRunner:
    def __init__(self, nodes: list[str], send: Callable[[dict[str, Any]], None]) -> None:
        self.nodes = nodes
        self.send = send
        self.starts: dict[int, messages.JobStart] = {}
        self.on_node: dict[tuple[int, str], _OnNode] = {}
        self.locks: dict[str, asyncio.Lock] = {}  # PrologFlags=Serial

    # ---- the controller's messages ---------------------------------------------------
    def job_start(self, msg: messages.JobStart) -> None:
        self.starts[msg.job_id] = msg
        for node in msg.nodes:
            if node in self.nodes:
                self.on_node[(msg.job_id, node)] = _OnNode()
                if msg.alloc:
                    self._start(msg, node)

    async def job_end(self, msg: messages.JobEnd) -> None:
        start = self.starts.pop(msg.job_id, None)
        for node in msg.nodes:
            st = self.on_node.pop((msg.job_id, node), None)
            if st is not None and st.task is not None and not st.task.done():
                await asyncio.wait([st.task])
        if start is None or not start.epilog:
            return
        nodes = [n for n in msg.nodes if n in self.nodes]
        env = {**start.env, **msg.env, "SLURM_SCRIPT_CONTEXT": "epilog_slurmd"}
        await asyncio.gather(*(self._run(start, "epilog", n, env) for n in nodes))

    # ---- the gate in front of the job's processes ------------------------------------
    def gate(self, raw: Any, handle: Handle) -> bool:
        """A batch launch or srun step of a job whose Prolog has not finished on its node:
        start the Prolog if it waits for the first step, and handle the message after it
        (dropped if it failed).  True when the message was taken."""
        if not isinstance(raw, dict) or raw.get("type") not in ("launch", "launch_tasks"):
            return False
        if raw["type"] == "launch":
            launch = raw.get("launch")
            jid = launch.get("job_id") if isinstance(launch, dict) else None
            nodes = [launch.get("node_name")] if isinstance(launch, dict) else []
        else:
            jid = raw.get("job_id")
            tasks = raw.get("tasks")
            nodes = list({t.get("node") for t in tasks if isinstance(t, dict)}) \
                if isinstance(tasks, list) else []
        start = self.starts.get(jid) if isinstance(jid, int) else None
        if start is None:
            return False
        waits: list[asyncio.Task[bool]] = []
        for node in nodes:
            if not isinstance(node, str):
                continue
            st = self.on_node.get((start.job_id, node))
            if st is None:
                continue
            if st.failed:
                log.warning("job %d: its Prolog failed on %s; %s dropped", start.job_id, node,
                            raw["type"])
                return True
            if st.task is None:
                self._start(start, node)
            if st.task is not None and not st.task.done():
                waits.append(st.task)
        if not waits:
            return False
        asyncio.get_running_loop().create_task(self._after(waits, raw, handle, start.job_id))
        return True

    async def _after(self, waits: list[asyncio.Task[bool]], raw: Any, handle: Handle,
                     job_id: int) -> None:
        results = await asyncio.gather(*waits)
        if all(results):
            handle(raw)
        else:
            log.warning("job %d: its Prolog failed; %s dropped", job_id, raw.get("type"))

    # ---- running -------------------------------------------------------------------
    def _start(self, start: messages.JobStart, node: str) -> None:
        st = self.on_node[(start.job_id, node)]
        env = {**start.env, "SLURM_SCRIPT_CONTEXT": "prolog_slurmd"}
        st.task = asyncio.get_running_loop().create_task(self._prolog(start, node, env, st))

    async def _prolog(self, start: messages.JobStart, node: str, env: dict[str, str],
                      st: _OnNode) -> bool:
        if not start.prolog:
            return True
        ok = await self._run(start, "prolog", node, env)
        st.failed = not ok
        return ok

    async def _run(self, start: messages.JobStart, kind: str, node: str,
                   env: dict[str, str]) -> bool:
        path = start.prolog if kind == "prolog" else start.epilog
        env = {**env, "SLURMD_NODENAME": node}
        gpus = start.gpus.get(node)
        if gpus:
            env["SLURM_JOB_GPUS"] = env["CUDA_VISIBLE_DEVICES"] = gpus
        if start.serial:
            async with self.locks.setdefault(node, asyncio.Lock()):
                why = await run_script(path, env, start.timeout)
        else:
            why = await run_script(path, env, start.timeout)
        if why is None:
            return True
        log.warning("job %d: %s failed on %s: %s", start.job_id, kind.capitalize(), node, why)
        self.send({"type": "prolog_result", "job_id": start.job_id, "node": node,
                   "kind": kind, "ok": False, "reason": why[:1024]})
        return False
