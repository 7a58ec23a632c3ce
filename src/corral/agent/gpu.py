"""What each GPU of this machine is doing: utilisation, memory, power and processes.

`GpuBackend.sample()` returns one `GpuSample` per GPU.  Two backends:

- `NvmlBackend`: NVIDIA's NVML through nvidia-ml-py (`pynvml`), the real one.
- `SimulatedBackend`: reads a JSON file a test (or a demo) writes, so every path that uses
  GPU samples runs on machines without GPUs.  The file is a list of objects with the keys
  of `GpuSample` (`index` required; the others default to an idle GPU; `node` names the
  declared node of an agent serving several); it is re-read at each sample, so a test
  changes a GPU's utilisation by rewriting it.

`backend_for(home)` picks: the file named by `$CORRAL_SIM_GPUS`, else
`<home>/sim_gpus.json` when it exists, else NVML when it finds GPUs, else none.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

SIM_ENV = "CORRAL_SIM_GPUS"
SIM_FILE = "sim_gpus.json"


@dataclass(slots=True)
class GpuProcess:
    pid: int
    used_memory: int = 0  # bytes


@dataclass(slots=True)
class GpuSample:
    index: int
    util: float = 0.0  # percent of the last sample period the GPU was busy (0-100)
    memory_used: int = 0  # bytes
    memory_total: int = 0  # bytes
    power_w: float | None = None  # watts; None where the GPU does not report it
    processes: list[GpuProcess] = field(default_factory=list)
    # the declared node it belongs to, for an agent serving several (simulation only)
    node: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class GpuBackend(Protocol):
    name: str

    def sample(self) -> list[GpuSample]: ...

    def close(self) -> None: ...


class NoGpus:
    name = "none"

    def sample(self) -> list[GpuSample]:
        return []

    def close(self) -> None:
        pass


class NvmlBackend:
    """NVML: one nvmlInit for the backend's life, one query per GPU and metric."""

    name = "nvml"

    def __init__(self) -> None:
        import pynvml  # nvidia-ml-py; raises ImportError or NVMLError when unusable

        self._nvml = pynvml
        pynvml.nvmlInit()
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                         for i in range(pynvml.nvmlDeviceGetCount())]

    def sample(self) -> list[GpuSample]:
        nvml = self._nvml
        out = []
        for index, h in enumerate(self._handles):
            util = nvml.nvmlDeviceGetUtilizationRates(h).gpu
            mem = nvml.nvmlDeviceGetMemoryInfo(h)
            try:
                power: float | None = nvml.nvmlDeviceGetPowerUsage(h) / 1000.0  # mW -> W
            except nvml.NVMLError:
                power = None  # not supported on this GPU
            procs: dict[int, int] = {}
            for getter in (nvml.nvmlDeviceGetComputeRunningProcesses,
                           nvml.nvmlDeviceGetGraphicsRunningProcesses):
                try:
                    for p in getter(h):
                        # usedGpuMemory is None where the driver hides it (containers)
                        procs[int(p.pid)] = procs.get(int(p.pid), 0) + int(p.usedGpuMemory or 0)
                except nvml.NVMLError:
                    pass
            out.append(GpuSample(index, float(util), int(mem.used), int(mem.total), power,
                                 [GpuProcess(pid, used) for pid, used in sorted(procs.items())]))
        return out

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass


class SimulatedBackend:
    """GPUs described by a JSON file (see the module's docstring)."""

    name = "simulated"

    def __init__(self, path: str) -> None:
        self.path = path

    def sample(self) -> list[GpuSample]:
        try:
            with open(self.path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            return []
        out = []
        for d in data if isinstance(data, list) else []:
            if not isinstance(d, dict) or type(d.get("index")) is not int:
                continue
            try:
                procs = [GpuProcess(int(p["pid"]), int(p.get("used_memory", 0)))
                         for p in d.get("processes") or []]
                power = d.get("power_w")
                node = d.get("node")
                out.append(GpuSample(d["index"], float(d.get("util", 0.0)),
                                     int(d.get("memory_used", 0)),
                                     int(d.get("memory_total", 0)),
                                     None if power is None else float(power), procs,
                                     node if isinstance(node, str) else None))
            except (KeyError, TypeError, ValueError):
                continue
        return sorted(out, key=lambda s: (s.node or "", s.index))

    def close(self) -> None:
        pass


def write_simulated(path: str, gpus: list[dict[str, Any]]) -> None:
    """Replace a simulated backend's file at once (a reader never sees half of it)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(gpus, f)
    os.replace(tmp, path)


def backend_for(home: str) -> GpuBackend:
    sim = os.environ.get(SIM_ENV) or os.path.join(home, SIM_FILE)
    if os.environ.get(SIM_ENV) or os.path.exists(sim):
        return SimulatedBackend(sim)
    try:
        nvml = NvmlBackend()
    except Exception:  # no library, no driver: no GPUs to sample
        return NoGpus()
    if not nvml._handles:
        nvml.close()
        return NoGpus()
    return nvml
