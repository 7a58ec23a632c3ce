"""What this machine has: CPUs, memory, GPUs (through NVML when a driver is present)."""

from __future__ import annotations

import os
import platform
import socket
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(slots=True)
class Gpu:
    index: int
    name: str
    uuid: str
    memory_mb: int


@dataclass(slots=True)
class Hardware:
    hostname: str
    cpus: int
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    memory_mb: int
    gpus: list[Gpu] = field(default_factory=list)
    arch: str = ""
    os: str = ""
    boot_time: float | None = None
    gpu_note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def gpu_type(self) -> str | None:
        if not self.gpus:
            return None
        return _gpu_type_name(self.gpus[0].name)


def _gpu_type_name(name: str) -> str:
    """"NVIDIA H100 80GB HBM3" → "h100" (the type users write in --gres=gpu:h100:1)."""
    words = [w for w in name.lower().replace("nvidia", "").split() if w]
    for w in words:
        if any(c.isdigit() for c in w):
            return w.replace("-", "_")
    return words[0] if words else "gpu"


def detect_gpus() -> tuple[list[Gpu], str]:
    """GPUs through NVML; (gpus, note). No driver or library means no GPUs."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return [], "nvidia-ml-py not installed"
    try:
        pynvml.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, …
        return [], f"NVML unavailable: {e}"
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            uuid = pynvml.nvmlDeviceGetUUID(h)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h).total // (1024 * 1024)
            gpus.append(Gpu(i, name if isinstance(name, str) else name.decode(),
                            uuid if isinstance(uuid, str) else uuid.decode(), int(mem)))
        return gpus, ""
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _cpu_topology(cpus: int) -> tuple[int, int, int]:
    sockets: set[str] = set()
    cores: set[tuple[str, str]] = set()
    try:
        with open("/proc/cpuinfo") as f:
            phys = core = ""
            for line in f:
                if line.startswith("physical id"):
                    phys = line.split(":", 1)[1].strip()
                elif line.startswith("core id"):
                    core = line.split(":", 1)[1].strip()
                    sockets.add(phys)
                    cores.add((phys, core))
    except OSError:
        pass
    nsock = max(1, len(sockets))
    ncores = max(1, len(cores)) if cores else cpus
    threads = max(1, cpus // ncores)
    return nsock, max(1, ncores // nsock), threads


def _memory_mb() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 1


def free_memory_mb() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return None


def _boot_time() -> float | None:
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("btime"):
                    return float(line.split()[1])
    except OSError:
        pass
    return None


def detect(with_gpus: bool = True) -> Hardware:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    sockets, cores, threads = _cpu_topology(cpus)
    gpus, note = detect_gpus() if with_gpus else ([], "not probed")
    u = platform.uname()
    return Hardware(
        hostname=socket.gethostname().split(".")[0], cpus=cpus, sockets=sockets,
        cores_per_socket=cores, threads_per_core=threads, memory_mb=_memory_mb(), gpus=gpus,
        arch=u.machine, os=f"{u.system} {u.release} {u.version}", boot_time=_boot_time(),
        gpu_note=note,
    )
