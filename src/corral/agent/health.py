"""Node health on the agent: HealthCheckProgram when the controller asks (controller.health),
and the GPUs' own health at every heartbeat.

The program runs as the agent (root), once per node this agent serves, with
`SLURMD_NODENAME` set, in a session of its own that is killed at the timeout.  An NHC-style
program drains the node through `scontrol` itself and exits 0; unlike Slurm, which ignores
the exit code, a non-zero exit makes a failing verdict whose reason is the program's first
line of output.

GPU health reads the GPU backend (agent.gpu): with NVML, XID events, uncorrected ECC errors,
row-remapping failures and pending remaps, and a GPU that no longer answers (fallen off the
bus); with the simulated backend, the same facts from the keys `xid` (a number or a list),
`ecc_uncorrected`, `remap_pending`, `remap_failure` and `lost` of each GPU in its file.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from corral.agent.gpu import GpuBackend, SimulatedBackend
from corral.model import messages

log = logging.getLogger("corral.agent")

# XIDs that mean the hardware (or its driver) is in trouble: drain, with what to do
HARDWARE_XIDS: dict[int, str] = {
    48: "double-bit ECC error: reset the GPU (nvidia-smi -r) or reboot the node",
    63: "ECC page retirement or row remapping recorded: reset the GPU when idle",
    64: "ECC page retirement or row remapping failed: reset the GPU, then run a diagnostic",
    74: "NVLink error: check the NVLink connections, then reset the GPU",
    79: "GPU has fallen off the bus: reboot the node and check the GPU's seating and power",
    92: "high single-bit ECC error rate: run a diagnostic, replace the GPU if it repeats",
    94: "contained ECC error: reset the GPU",
    95: "uncontained ECC error: reset the GPU (nvidia-smi -r) or reboot the node",
    119: "GSP RPC timeout: reset the GPU or reboot the node",
    120: "GSP error: reset the GPU or reboot the node",
}
# XIDs a user's program causes: logged on the job, never drain
USER_XIDS: dict[int, str] = {
    13: "graphics engine exception (the program's fault)",
    31: "GPU memory page fault (the program's illegal address)",
    43: "GPU stopped processing (the program's fault)",
}


def first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:1024]
    return ""


async def run_program(program: str, timeout: float, node: str) -> messages.HealthReport:
    """Run HealthCheckProgram for `node`; its verdict."""
    env = {**os.environ, "SLURMD_NODENAME": node}
    now = time.time()
    try:
        proc = await asyncio.create_subprocess_exec(
            program, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env=env, start_new_session=True, cwd="/")
    except OSError as e:
        return messages.HealthReport(node=node, ok=False, checked=now,
                                     reason=f"HealthCheckProgram {program}: {e.strerror}")
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        _kill_group(proc.pid)
        await proc.wait()
        return messages.HealthReport(node=node, ok=False, checked=now,
                                     reason=f"HealthCheckProgram timed out after {timeout:g}s")
    finally:
        if proc.returncode is None:
            _kill_group(proc.pid)
    rc = proc.returncode
    if rc == 0:
        return messages.HealthReport(node=node, ok=True, checked=now)
    why = first_line(out.decode(errors="replace")) or \
        f"HealthCheckProgram exited {rc if rc is not None and rc >= 0 else 'on a signal'}"
    return messages.HealthReport(node=node, ok=False, reason=why, checked=now)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def xid_event(gpu: int, xid: int) -> messages.GpuHealthEvent:
    if xid in HARDWARE_XIDS:
        return messages.GpuHealthEvent(gpu=gpu, kind="xid", code=xid, drains=True,
                                       text=f"GPU {gpu} XID {xid}: {HARDWARE_XIDS[xid]}")
    what = USER_XIDS.get(xid, "not known to drain a node")
    return messages.GpuHealthEvent(gpu=gpu, kind="xid", code=xid, drains=False,
                                   text=f"GPU {gpu} XID {xid}: {what}")


def simulated_health(path: str, default_node: str) -> dict[str, list[messages.GpuHealthEvent]]:
    """The GPU health facts of a simulated backend's file, per node."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    out: dict[str, list[messages.GpuHealthEvent]] = {}
    for d in data if isinstance(data, list) else []:
        if not isinstance(d, dict) or type(d.get("index")) is not int or d["index"] < 0:
            continue
        gpu = d["index"]
        node = d["node"] if isinstance(d.get("node"), str) else default_node
        evs = out.setdefault(node, [])
        xids = d.get("xid")
        for x in xids if isinstance(xids, list) else [xids]:
            if type(x) is int and 0 <= x < 1 << 20:
                evs.append(xid_event(gpu, x))
        if d.get("lost"):
            evs.append(messages.GpuHealthEvent(
                gpu=gpu, kind="lost", drains=True,
                text=f"GPU {gpu} has fallen off the bus: reboot the node"))
        ecc = d.get("ecc_uncorrected")
        if type(ecc) is int and ecc > 0:
            evs.append(messages.GpuHealthEvent(
                gpu=gpu, kind="ecc", code=min(ecc, 1 << 20), drains=True,
                text=f"GPU {gpu} has {ecc} uncorrected ECC errors: reset the GPU"))
        if d.get("remap_failure") or d.get("remap_pending"):
            failed = bool(d.get("remap_failure"))
            evs.append(messages.GpuHealthEvent(
                gpu=gpu, kind="remap", drains=True,
                text=f"GPU {gpu} row remapping " + ("failed: replace the GPU" if failed
                                                    else "pending: reset the GPU when idle")))
    return out


class NvmlHealth:
    """GPU health through NVML: XID events (an event set, polled), ECC, remapped rows, and a
    GPU that answers NVML_ERROR_GPU_IS_LOST."""

    def __init__(self) -> None:
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                        for i in range(pynvml.nvmlDeviceGetCount())]
        self.events: Any = None
        try:
            self.events = pynvml.nvmlEventSetCreate()
            for h in self.handles:
                try:
                    pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError,
                                                    self.events)
                except pynvml.NVMLError as e:
                    log.info("no XID events from a GPU: %s", e)
        except pynvml.NVMLError as e:
            log.info("no NVML event set: %s", e)

    def check(self) -> list[messages.GpuHealthEvent]:
        nvml = self.nvml
        out: list[messages.GpuHealthEvent] = []
        if self.events is not None:
            for _ in range(64):  # the XIDs since the last check
                try:
                    data = nvml.nvmlEventSetWait_v2(self.events, 0)
                except nvml.NVMLError:
                    break
                try:
                    gpu = int(nvml.nvmlDeviceGetIndex(data.device))
                except nvml.NVMLError:
                    gpu = 0
                out.append(xid_event(gpu, int(data.eventData)))
        for gpu, h in enumerate(self.handles):
            try:
                ecc = nvml.nvmlDeviceGetTotalEccErrors(
                    h, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC)
                if ecc:
                    out.append(messages.GpuHealthEvent(
                        gpu=gpu, kind="ecc", code=min(int(ecc), 1 << 20), drains=True,
                        text=f"GPU {gpu} has {ecc} uncorrected ECC errors: reset the GPU"))
            except nvml.NVMLError_GpuIsLost:
                out.append(messages.GpuHealthEvent(
                    gpu=gpu, kind="lost", drains=True,
                    text=f"GPU {gpu} has fallen off the bus: reboot the node"))
                continue
            except nvml.NVMLError:
                pass  # ECC not supported or off
            try:
                _corr, _unc, pending, failure = nvml.nvmlDeviceGetRemappedRows(h)
                if failure or pending:
                    out.append(messages.GpuHealthEvent(
                        gpu=gpu, kind="remap", drains=True,
                        text=f"GPU {gpu} row remapping " + (
                            "failed: replace the GPU" if failure
                            else "pending: reset the GPU when idle")))
            except nvml.NVMLError:
                pass
        return out

    def close(self) -> None:
        try:
            if self.events is not None:
                self.nvml.nvmlEventSetFree(self.events)
            self.nvml.nvmlShutdown()
        except Exception:
            pass


class HealthMonitor:
    """The agent's side: runs checks and sends verdicts that changed (or were asked for)."""

    def __init__(self, nodes: list[str], gpus: GpuBackend,
                 send: Callable[[dict[str, Any]], None]) -> None:
        self.nodes = nodes
        self.gpus = gpus
        self.send = send
        self.nvml: NvmlHealth | None = None
        if gpus.name == "nvml":
            try:
                self.nvml = NvmlHealth()
            except Exception as e:  # the sampler works; health checks without NVML events
                log.warning("GPU health checks off: %s", e)
        # what each node's GPUs showed last time: an event is reported once, when it appears
        self.gpu_seen: dict[str, set[tuple[int, str, int]]] = {}
        self.checking: set[str] = set()  # nodes whose HealthCheckProgram runs now

    def gpu_events(self) -> dict[str, list[messages.GpuHealthEvent]]:
        default = self.nodes[0] if self.nodes else ""
        if isinstance(self.gpus, SimulatedBackend):
            return simulated_health(self.gpus.path, default)
        if self.nvml is not None:
            return {default: self.nvml.check()} if default else {}
        return {}

    def check_gpus(self) -> None:
        """At each heartbeat: report GPU trouble that is new; a node whose GPUs are clean
        again gets a passing GPU verdict (the controller's resume gate reads it)."""
        reports = []
        now = time.time()
        found = self.gpu_events()
        for node in set(found) | set(self.gpu_seen):
            evs = found.get(node, [])
            keys = {(e.gpu, e.kind, e.code) for e in evs}
            old = self.gpu_seen.get(node, set())
            if keys == old:
                continue
            new = [e for e in evs if (e.gpu, e.kind, e.code) not in old]
            self.gpu_seen[node] = keys
            bad = [e for e in evs if e.drains]
            reports.append(messages.HealthReport(
                node=node, ok=not bad, source="gpu", checked=now,
                reason=bad[0].text if bad else "", gpu_events=new))
        if reports:
            self.send({"type": "heartbeat", "load": os.getloadavg()[0],
                       "health": [r.to_dict() for r in reports]})

    async def run(self, msg: messages.HealthCheck) -> None:
        # a node whose last check still runs is skipped: checks never overlap, so verdicts
        # arrive in the order they were asked for; each node's verdict goes out on its own
        nodes = [n for n in msg.nodes if n in self.nodes and n not in self.checking]
        if msg.program:
            await asyncio.gather(*(self._check(msg, n) for n in nodes))

    async def _check(self, msg: messages.HealthCheck, node: str) -> None:
        self.checking.add(node)
        try:
            r = await run_program(msg.program, msg.timeout, node)
        finally:
            self.checking.discard(node)
        if not r.ok:
            log.warning("health check failed on %s: %s", r.node, r.reason)
        self.send({"type": "heartbeat", "load": os.getloadavg()[0], "health": [r.to_dict()]})

    def close(self) -> None:
        if self.nvml is not None:
            self.nvml.close()
